package vip

import (
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// IPv6 VIPs and backends of the privileged tests: the VIPs in the default
// IPv6 VIP range of pkg/mcs, the backends on lo of the fixture's namespace.
var (
	vip6A  = netip.MustParseAddr("fd63:6175:7365::1")
	vip6B  = netip.MustParseAddr("fd63:6175:7365::2")
	be61   = be("[fd00:200::1]:8081")
	be62   = be("[fd00:200::2]:8082")
	be61u  = be("[fd00:200::1]:5301")
	be62u  = be("[fd00:200::2]:5302")
	range6 = "fd63:6175:7365::/108"
)

// newFixture6 is newFixture with IPv6 echo backends next to the IPv4 ones:
// TCP and UDP on fd00:200::1 ("be1") and fd00:200::2 ("be2").
func newFixture6(tb testing.TB) *fixture {
	tb.Helper()
	f := newFixture(tb)
	for _, a := range []string{"fd00:200::1/128", "fd00:200::2/128"} {
		f.ns.mustRun(tb, "ip", "-6", "addr", "add", a, "dev", "lo", "nodad")
	}
	tcpEcho(tb, f.ns, be61.String(), "be1")
	tcpEcho(tb, f.ns, be62.String(), "be2")
	udpEcho(tb, f.ns, be61u.String(), "be1")
	udpEcho(tb, f.ns, be62u.String(), "be2")
	return f
}

// TestKernelIPv6VIPs: an IPv6 VIP is translated to its IPv6 backends by
// connect6 (TCP and connected UDP, getpeername = the VIP), sendmsg6
// (unconnected UDP, replies from the VIP through recvmsg6); without
// backends every call fails with EHOSTUNREACH; an IPv4 VIP in the same maps
// keeps working from IPv4 and dual-stack sockets.
func TestKernelIPv6VIPs(t *testing.T) {
	f := newFixture6(t)
	k := f.open(t)
	t.Cleanup(func() {
		if err := k.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	desired := map[ServiceKey]Service{
		{vip6A, 80, TCP}: on(be62, be61),
		{vip6A, 53, UDP}: on(be61u, be62u),
		{vip6B, 80, TCP}: on(),
		{vip6B, 53, UDP}: on(),
		{vipA, 80, TCP}:  on(be1, be2),
	}
	mustSet(t, k, desired)
	got, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	desired[ServiceKey{vip6A, 80, TCP}] = on(be61, be62) // canonical order
	if !reflect.DeepEqual(got, desired) {
		t.Fatalf("maps hold %v, want %v", got, desired)
	}

	c := startClient(t, f.ns, f.cg)
	seen := map[string]int{}
	for range 40 {
		res := c.do(t, "tcp6 %s", ap(vip6A, 80))
		name, peer, ok := parseOK(t, res)
		if !ok {
			t.Fatalf("tcp6 to %s: %s", ap(vip6A, 80), res)
		}
		if peer != ap(vip6A, 80) {
			t.Fatalf("tcp6: getpeername = %s, want the VIP %s", peer, ap(vip6A, 80))
		}
		seen[name]++
	}
	if seen["be1"] == 0 || seen["be2"] == 0 || len(seen) != 2 {
		t.Fatalf("40 connections to %s reached %v, want both be1 and be2", ap(vip6A, 80), seen)
	}
	for _, cmd := range []string{"udp6", "cudp6"} {
		vip := ap(vip6A, 53)
		seenUDP := map[string]bool{}
		for range 20 {
			fields := strings.Fields(c.do(t, "%s %s", cmd, vip))
			if len(fields) < 3 || fields[0] != "ok" {
				t.Fatalf("%s to %s: %v", cmd, vip, fields)
			}
			seenUDP[fields[1]] = true
			if fields[2] != vip {
				t.Fatalf("%s: reply source %s, want the VIP %s", cmd, fields[2], vip)
			}
			if cmd == "cudp6" && fields[3] != vip {
				t.Fatalf("%s: getpeername %s, want the VIP %s", cmd, fields[3], vip)
			}
		}
		if len(seenUDP) != 2 {
			t.Errorf("%s: 20 sockets reached %v, want both backends", cmd, seenUDP)
		}
	}
	for _, tc := range []struct {
		cmd  string
		port uint16
	}{{"tcp6", 80}, {"udp6", 53}, {"cudp6", 53}} {
		if res := c.do(t, "%s %s", tc.cmd, ap(vip6B, tc.port)); res != "err EHOSTUNREACH" {
			t.Errorf("%s to %s without backends: %q, want err EHOSTUNREACH", tc.cmd, ap(vip6B, tc.port), res)
		}
	}
	// The IPv4 VIP, over IPv4 and as ::ffff:<vip>.
	for _, cmd := range []string{"tcp", "tcp6"} {
		if res := c.do(t, "%s %s", cmd, apFor(cmd, vipA, 80)); !strings.HasPrefix(res, "ok be") || !strings.HasSuffix(res, " "+apFor(cmd, vipA, 80)) {
			t.Errorf("%s to the IPv4 VIP: %q", cmd, res)
		}
	}
}

// TestKernelIPv6WeightsAffinity: an IPv6 service weighted 1:3 splits 400
// connect()s and 400 sendto()s from new sockets about 1:3 (5 standard
// deviations of a binomial); with ClientIP affinity 30 connects of one
// client land on one backend.
func TestKernelIPv6WeightsAffinity(t *testing.T) {
	f := newFixture6(t)
	k := f.open(t)
	t.Cleanup(func() { _ = k.Cleanup() })
	one := func(b Backend, w uint32) Backend { b.Weight = w; return b }
	tcp, udp := ServiceKey{vip6A, 80, TCP}, ServiceKey{vip6A, 53, UDP}
	desired := map[ServiceKey]Service{
		tcp: on(one(be61, 1), one(be62, 3)),
		udp: on(one(be61u, 1), one(be62u, 3)),
	}
	mustSet(t, k, desired)
	c := startClient(t, f.ns, f.cg)
	count := func(cmd string, key ServiceKey, n int) map[string]int {
		seen := map[string]int{}
		for range n {
			fields := strings.Fields(c.do(t, "%s %s", cmd, ap(key.VIP, key.Port)))
			if len(fields) < 2 || fields[0] != "ok" {
				t.Fatalf("%s to %s: %v", cmd, ap(key.VIP, key.Port), fields)
			}
			seen[fields[1]]++
		}
		return seen
	}
	const n = 400
	for _, tc := range []struct {
		cmd string
		key ServiceKey
	}{{"tcp6", tcp}, {"udp6", udp}} {
		got := float64(count(tc.cmd, tc.key, n)["be1"]) / n
		sd := math.Sqrt(0.25 * 0.75 / n)
		if math.Abs(got-0.25) > 5*sd {
			t.Errorf("%s, weights 1:3: be1 got %.3f of %d, want 0.25 ± %.3f", tc.cmd, got, n, 5*sd)
		}
	}

	desired[tcp] = Service{Backends: []Backend{be61, be62}, AffinitySeconds: 60}
	mustSet(t, k, desired)
	if seen := count("tcp6", tcp, 30); len(seen) != 1 {
		t.Errorf("with affinity 30 connects of one client reached %v, want one backend", seen)
	}
}

// TestKernelIPv6TerminatesConnectedUDP: UDP sockets connected to an IPv6
// VIP are terminated when a Set removes their backend; those on the other
// backend keep working.
func TestKernelIPv6TerminatesConnectedUDP(t *testing.T) {
	f := newFixture6(t)
	k := f.open(t)
	t.Cleanup(func() { _ = k.Cleanup() })
	dns := ServiceKey{vip6A, 53, UDP}
	mustSet(t, k, map[ServiceKey]Service{dns: on(be61u, be62u)})
	c := startClient(t, f.ns, f.cg)
	sockets := map[string][]string{}
	for i := range 12 {
		name := "s" + string(rune('a'+i))
		backend, ok := strings.CutPrefix(c.do(t, "uopen6 %s %s", name, ap(vip6A, 53)), "ok ")
		if !ok {
			t.Fatalf("uopen6 %s to %s failed", name, ap(vip6A, 53))
		}
		sockets[backend] = append(sockets[backend], name)
	}
	if len(sockets["be1"]) == 0 || len(sockets["be2"]) == 0 {
		t.Fatalf("12 connected UDP sockets reached %v, want both backends", sockets)
	}
	mustSet(t, k, map[ServiceKey]Service{dns: on(be62u)})
	if got := k.LastTerminated(); got != len(sockets["be1"]) {
		t.Errorf("removing be1 terminated %d sockets, want its %d", got, len(sockets["be1"]))
	}
	for _, name := range sockets["be1"] {
		if res := c.do(t, "urecv %s", name); res != "err ECONNABORTED" {
			t.Errorf("recv on socket %s of the removed backend: %q, want err ECONNABORTED", name, res)
		}
	}
	for _, name := range sockets["be2"] {
		if res := c.do(t, "usay %s", name); res != "ok be2" {
			t.Errorf("socket %s on the remaining backend: %q, want ok be2", name, res)
		}
	}
}

// TestKernelIPv6UnknownVIPFailsFast: with an IPv6 default route that
// swallows packets, an IPv6 VIP the maps do not know fails with
// EHOSTUNREACH once the IPv6 VIP range is routed unreachable (as
// pkg/routeagent does), while a known one still connects.
func TestKernelIPv6UnknownVIPFailsFast(t *testing.T) {
	f := newFixture6(t)
	f.ns.mustRun(t, "ip", "link", "add", "wan0", "type", "veth", "peer", "name", "wan1")
	f.ns.mustRun(t, "ip", "link", "set", "wan0", "up")
	f.ns.mustRun(t, "ip", "link", "set", "wan1", "up")
	f.ns.mustRun(t, "ip", "-6", "addr", "add", "2001:db8::1/64", "dev", "wan0", "nodad")
	f.ns.mustRun(t, "ip", "-6", "neigh", "add", "2001:db8::2", "lladdr", "02:00:00:00:00:02", "dev", "wan0", "nud", "permanent")
	f.ns.mustRun(t, "ip", "-6", "route", "add", "default", "via", "2001:db8::2", "dev", "wan0")
	k := f.open(t)
	t.Cleanup(func() { _ = k.Cleanup() })
	mustSet(t, k, map[ServiceKey]Service{{vip6A, 80, TCP}: on(be61)})
	unknown := netip.MustParseAddr("fd63:6175:7365::9")
	c := startClient(t, f.ns, f.cg)
	// connect() bounded by SO_SNDTIMEO ends in EINPROGRESS: it hung.
	if res := c.do(t, "tcp6 %s", ap(unknown, 80)); res != "err EINPROGRESS" {
		t.Fatalf("unknown IPv6 VIP without the unreachable range: %q, want the connect timeout (err EINPROGRESS)", res)
	}
	f.ns.mustRun(t, "ip", "-6", "route", "add", "unreachable", range6, "proto", "148", "metric", "100")
	for _, tc := range []struct{ cmd, addr string }{
		{"tcp6", ap(unknown, 80)},
		{"tcp6", ap(vip6A, 81)},
		{"udp6", ap(unknown, 53)},
		{"cudp6", ap(vip6A, 5353)},
	} {
		if res := c.do(t, "%s %s", tc.cmd, tc.addr); res != "err EHOSTUNREACH" {
			t.Errorf("%s %s: %q, want err EHOSTUNREACH", tc.cmd, tc.addr, res)
		}
	}
	if res := c.do(t, "tcp6 %s", ap(vip6A, 80)); res != "ok be1 "+ap(vip6A, 80) {
		t.Errorf("tcp6 to the known VIP: %q, want be1 behind %s", res, ap(vip6A, 80))
	}
}
