package vip

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

var (
	vipA = netip.MustParseAddr("243.0.0.1")
	vipB = netip.MustParseAddr("243.0.0.2")
	be1  = be("10.200.0.1:8081")
	be2  = be("10.200.0.2:8082")
	// UDP backends listen on the same addresses, other ports.
	be1u = be("10.200.0.1:5301")
	be2u = be("10.200.0.2:5302")
)

// fixture is a namespace with two TCP and two UDP echo backends on 10.200.0.1
// and 10.200.0.2 (on lo), a cgroup, a private bpffs and the datapath attached
// to the cgroup.
type fixture struct {
	ns  *netNS
	cg  string
	cfg Config
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	requireRoot(tb)
	f := &fixture{cg: newCgroup(tb), ns: newNetNS(tb)}
	f.ns.mustRun(tb, "ip", "addr", "add", "10.200.0.1/32", "dev", "lo")
	f.ns.mustRun(tb, "ip", "addr", "add", "10.200.0.2/32", "dev", "lo")
	tcpEcho(tb, f.ns, be1.String(), "be1")
	tcpEcho(tb, f.ns, be2.String(), "be2")
	udpEcho(tb, f.ns, be1u.String(), "be1")
	udpEcho(tb, f.ns, be2u.String(), "be2")
	f.cfg = Config{PinDir: newBPFFS(tb), CgroupPath: f.cg, MaxServices: 1024, MaxBackends: 4096, MaxReverseNAT: 1024}
	return f
}

func (f *fixture) open(tb testing.TB) *Kernel {
	tb.Helper()
	k, err := Open(f.cfg)
	if err != nil {
		tb.Fatalf("open: %+v", err)
	}
	return k
}

func mustSet(tb testing.TB, tbl Table, desired map[ServiceKey]Service) {
	tb.Helper()
	if err := tbl.Set(context.Background(), desired); err != nil {
		tb.Fatalf("set: %v", err)
	}
}

func ap(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// apFor is the address client command cmd dials for a:port: a:port, or
// for the AF_INET6 commands (tcp6, udp6, cudp6) [::ffff:a]:port.
func apFor(cmd string, a netip.Addr, port uint16) string {
	if strings.HasSuffix(cmd, "6") {
		return ap(netip.AddrFrom16(a.As16()), port)
	}
	return ap(a, port)
}

// TestKernelTranslates checks every hook through a client process in the
// cgroup: TCP load-balancing and getpeername, unconnected and connected UDP
// with the VIP as the reply source, EHOSTUNREACH without backends, and a
// backend removal taking effect for new connections.
func TestKernelTranslates(t *testing.T) {
	f := newFixture(t)
	k := f.open(t)
	t.Cleanup(func() {
		if err := k.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	desired := map[ServiceKey]Service{
		{vipA, 80, TCP}: on(be2, be1),
		{vipA, 53, UDP}: on(be1u, be2u),
		{vipB, 80, TCP}: on(),
		{vipB, 53, UDP}: {},
	}
	mustSet(t, k, desired)
	got, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	want := map[ServiceKey]Service{
		{vipA, 80, TCP}: on(be1, be2),
		{vipA, 53, UDP}: on(be1u, be2u),
		{vipB, 80, TCP}: on(),
		{vipB, 53, UDP}: on(),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("maps hold %v, want %v", got, want)
	}

	c := startClient(t, f.ns, f.cg)
	// IPv4 sockets, and dual-stack AF_INET6 ones to the IPv4-mapped VIP.
	for _, v := range []string{"", "6"} {
		tcp := "tcp" + v
		seen := map[string]int{}
		for range 40 {
			res := c.do(t, "%s %s", tcp, apFor(tcp, vipA, 80))
			name, peer, ok := parseOK(t, res)
			if !ok {
				t.Fatalf("%s to %s: %s", tcp, apFor(tcp, vipA, 80), res)
			}
			if peer != apFor(tcp, vipA, 80) {
				t.Fatalf("%s: getpeername = %s, want the VIP %s", tcp, peer, apFor(tcp, vipA, 80))
			}
			seen[name]++
		}
		if seen["be1"] == 0 || seen["be2"] == 0 || len(seen) != 2 {
			t.Fatalf("%s: 40 connections reached %v, want both be1 and be2", tcp, seen)
		}

		for _, cmd := range []string{"udp" + v, "cudp" + v} {
			vip := apFor(cmd, vipA, 53)
			seenUDP := map[string]bool{}
			for range 20 {
				res := c.do(t, "%s %s", cmd, vip)
				fields := strings.Fields(res)
				if len(fields) < 3 || fields[0] != "ok" {
					t.Fatalf("%s to %s: %s", cmd, vip, res)
				}
				seenUDP[fields[1]] = true
				if fields[2] != vip {
					t.Fatalf("%s: reply source %s, want the VIP %s", cmd, fields[2], vip)
				}
				if strings.HasPrefix(cmd, "cudp") && fields[3] != vip {
					t.Fatalf("%s: getpeername %s, want the VIP %s", cmd, fields[3], vip)
				}
			}
			if len(seenUDP) != 2 {
				t.Errorf("%s: 20 sockets reached %v, want both backends", cmd, seenUDP)
			}
		}

		// No backends: connect() and sendto() fail at once with EHOSTUNREACH.
		for _, cmd := range []string{"tcp" + v, "udp" + v, "cudp" + v} {
			port := uint16(80)
			if !strings.HasPrefix(cmd, "tcp") {
				port = 53
			}
			if res := c.do(t, "%s %s", cmd, apFor(cmd, vipB, port)); res != "err EHOSTUNREACH" {
				t.Errorf("%s to %s without backends: %q, want err EHOSTUNREACH", cmd, apFor(cmd, vipB, port), res)
			}
		}
	}

	// Remove be2: new connections go to be1 only.
	desired[ServiceKey{vipA, 80, TCP}] = on(be1)
	mustSet(t, k, desired)
	if ops := k.LastOps(); ops != (OpCounts{PutServices: 1, DeleteBackends: 1}) {
		t.Errorf("removing one backend wrote %+v, want one service update and one backend delete", ops)
	}
	for range 20 {
		if res := c.do(t, "tcp %s", ap(vipA, 80)); !strings.HasPrefix(res, "ok be1 ") {
			t.Fatalf("after removing be2: %s, want be1", res)
		}
	}
}

// TestKernelPlainIPv6Untouched: a dual-stack socket's connect(), sendto()
// and getpeername() to a plain IPv6 address are left alone, also when its
// low 32 bits are a VIP (the NAT64 address 64:ff9b::<vip>), and a socket
// that connected through a VIP and then to the backend's own address
// reports that address.
func TestKernelPlainIPv6Untouched(t *testing.T) {
	f := newFixture(t)
	nat64 := netip.MustParseAddr("64:ff9b::" + vipA.String())
	f.ns.mustRun(t, "ip", "-6", "addr", "add", nat64.String()+"/128", "dev", "lo", "nodad")
	tcpEcho(t, f.ns, ap(nat64, 80), "v6")
	udpEcho(t, f.ns, ap(nat64, 53), "v6")
	k := f.open(t)
	t.Cleanup(func() { _ = k.Cleanup() })
	mustSet(t, k, map[ServiceKey]Service{{vipA, 80, TCP}: on(be1), {vipA, 53, UDP}: on(be1u)})
	c := startClient(t, f.ns, f.cg)
	for _, tc := range []struct{ cmd, addr, want string }{
		{"tcp6", ap(nat64, 80), "ok v6 " + ap(nat64, 80)},
		{"udp6", ap(nat64, 53), "ok v6 " + ap(nat64, 53)},
		{"cudp6", ap(nat64, 53), "ok v6 " + ap(nat64, 53) + " " + ap(nat64, 53)},
		// The IPv4-mapped VIP on the same sockets is translated.
		{"tcp6", apFor("tcp6", vipA, 80), "ok be1 " + apFor("tcp6", vipA, 80)},
		{"cudp6", apFor("cudp6", vipA, 53), "ok be1 " + apFor("cudp6", vipA, 53) + " " + apFor("cudp6", vipA, 53)},
	} {
		if res := c.do(t, "%s %s", tc.cmd, tc.addr); res != tc.want {
			t.Errorf("%s %s: %q, want %q", tc.cmd, tc.addr, res, tc.want)
		}
	}
	// Connected through the VIP to be1u, then to be1u itself (a UDP socket
	// connected to an IPv4-mapped peer cannot move to a plain IPv6 one):
	// replies and getpeername show be1u, not the VIP.
	direct := apFor("cudp6", be1u.Addr, be1u.Port)
	if res := c.do(t, "cudp6 %s %s", apFor("cudp6", vipA, 53), direct); res != "ok be1 "+direct+" "+direct {
		t.Errorf("UDP socket connected to the VIP, then to %s: %q, want that peer", direct, res)
	}
}

// TestKernelTerminatesConnectedUDP: connected UDP sockets (IPv4 and
// dual-stack ones to ::ffff:<vip>) keep the backend connect() gave them. When a Set removes that backend from the service,
// the sockets connected through the VIP to it are terminated (the client
// runs in its own network namespace, the Set in the test's): a read gets
// ECONNABORTED, a send EDESTADDRREQ (no longer connected), and a new socket
// reaches the backend that stays. Sockets on
// the remaining backend, and one connected to the removed backend's own
// address (not through the VIP), keep working; a Set that removes nothing
// terminates nothing.
func TestKernelTerminatesConnectedUDP(t *testing.T) {
	f := newFixture(t)
	k := f.open(t)
	t.Cleanup(func() { _ = k.Cleanup() })
	dns := ServiceKey{vipA, 53, UDP}
	desired := map[ServiceKey]Service{dns: on(be1u, be2u), {vipA, 80, TCP}: on(be1, be2)}
	mustSet(t, k, desired)
	c := startClient(t, f.ns, f.cg)
	const n = 20
	sockets := map[string][]string{} // backend → socket names
	for i := range n {
		// Every other socket a dual-stack one to ::ffff:<vip>.
		cmd, name := "uopen", fmt.Sprintf("s%d", i)
		if i%2 == 1 {
			cmd, name = "uopen6", fmt.Sprintf("s%d-6", i)
		}
		res := c.do(t, "%s %s %s", cmd, name, apFor(cmd, vipA, 53))
		backend, ok := strings.CutPrefix(res, "ok ")
		if !ok {
			t.Fatalf("%s %s: %s", cmd, name, res)
		}
		sockets[backend] = append(sockets[backend], name)
	}
	if len(sockets["be1"]) == 0 || len(sockets["be2"]) == 0 {
		t.Fatalf("%d connected UDP sockets reached %v, want both backends", n, sockets)
	}
	if res := c.do(t, "uopen direct %s", be1u); res != "ok be1" {
		t.Fatalf("uopen direct %s: %s", be1u, res)
	}

	desired[ServiceKey{vipA, 80, TCP}] = on(be1) // a TCP change terminates nothing
	mustSet(t, k, desired)
	if got := k.LastTerminated(); got != 0 {
		t.Errorf("removing a TCP backend terminated %d UDP sockets", got)
	}
	desired[dns] = on(be2u)
	mustSet(t, k, desired)
	if got := k.LastTerminated(); got != len(sockets["be1"]) {
		t.Errorf("removing be1 terminated %d sockets, want its %d", got, len(sockets["be1"]))
	}
	// A terminated socket: the pending error is ECONNABORTED, and it is no
	// longer connected.
	for _, name := range sockets["be1"] {
		if res := c.do(t, "urecv %s", name); res != "err ECONNABORTED" {
			t.Errorf("recv on socket %s of the removed backend: %q, want err ECONNABORTED", name, res)
		}
		if res := c.do(t, "usay %s", name); res != "err EDESTADDRREQ" {
			t.Errorf("send on socket %s of the removed backend: %q, want err EDESTADDRREQ", name, res)
		}
	}
	for _, name := range append(sockets["be2"], "direct") {
		want := "ok be2"
		if name == "direct" {
			want = "ok be1"
		}
		if res := c.do(t, "usay %s", name); res != want {
			t.Errorf("socket %s: %q, want %q", name, res, want)
		}
	}
	if res := c.do(t, "uopen again %s", ap(vipA, 53)); res != "ok be2" {
		t.Errorf("a new connected socket: %q, want be2", res)
	}
}

// TestKernelWeights: with weights 1 and 3, 400 TCP connections through the
// hook split about 1:3 (within 5 standard deviations of a binomial), for
// connect() (random), for unconnected UDP sendto() from new sockets (hash
// of the socket cookie) and for connect() of dual-stack AF_INET6 sockets to
// ::ffff:<vip>; then, with the weights swapped by a Set
// that rewrites the two slots only, about 3:1.
func TestKernelWeights(t *testing.T) {
	f := newFixture(t)
	k := f.open(t)
	t.Cleanup(func() { _ = k.Cleanup() })
	one := func(b Backend, w uint32) Backend { b.Weight = w; return b }
	desired := map[ServiceKey]Service{
		{vipA, 80, TCP}: on(one(be1, 1), one(be2, 3)),
		{vipA, 53, UDP}: on(one(be1u, 1), one(be2u, 3)),
	}
	mustSet(t, k, desired)
	c := startClient(t, f.ns, f.cg)
	const n = 400
	share := func(cmd string, port uint16) float64 {
		got := 0
		for range n {
			res := c.do(t, "%s %s", cmd, apFor(cmd, vipA, port))
			switch {
			case strings.HasPrefix(res, "ok be1 "):
				got++
			case !strings.HasPrefix(res, "ok be2 "):
				t.Fatalf("%s to %s: %s", cmd, apFor(cmd, vipA, port), res)
			}
		}
		return float64(got) / n
	}
	within := func(what string, got, want float64) {
		sd := math.Sqrt(want * (1 - want) / n)
		if math.Abs(got-want) > 5*sd {
			t.Errorf("%s: be1 got %.3f of %d, want %.2f ± %.3f", what, got, n, want, 5*sd)
		} else {
			t.Logf("%s: be1 got %.3f of %d (want %.2f)", what, got, n, want)
		}
	}
	within("tcp, weights 1:3", share("tcp", 80), 0.25)
	within("udp sendto, weights 1:3", share("udp", 53), 0.25)
	within("dual-stack tcp6 to ::ffff:VIP, weights 1:3", share("tcp6", 80), 0.25)

	desired[ServiceKey{vipA, 80, TCP}] = on(one(be1, 3), one(be2, 1))
	mustSet(t, k, desired)
	if ops := k.LastOps(); ops != (OpCounts{PutBackends: 2}) {
		t.Errorf("swapping the weights wrote %+v, want the two slots", ops)
	}
	got, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	if want := []Backend{one(be1, 3), one(be2, 1)}; !reflect.DeepEqual(got[ServiceKey{vipA, 80, TCP}].Backends, want) {
		t.Errorf("maps hold %v, want %v", got[ServiceKey{vipA, 80, TCP}].Backends, want)
	}
	within("tcp, weights 3:1", share("tcp", 80), 0.75)
}

// TestKernelAffinity: with ClientIP affinity (1 s), 50 TCP connects and 20
// UDP sendto()s from new sockets of one client (one network namespace) land
// on one backend each, and its dual-stack sockets to ::ffff:<vip> on the
// same one; weights changed to leave that backend 2^-32 of the
// picks do not move it within the timeout; after the timeout the next
// connect picks anew (the other backend, by the weights) and sticks there;
// a remembered backend removed from the service is not used; without
// affinity the connects spread over both.
func TestKernelAffinity(t *testing.T) {
	f := newFixture(t)
	k := f.open(t)
	t.Cleanup(func() { _ = k.Cleanup() })
	tcp, udp := ServiceKey{vipA, 80, TCP}, ServiceKey{vipA, 53, UDP}
	desired := map[ServiceKey]Service{
		tcp: {Backends: []Backend{be1, be2}, AffinitySeconds: 1},
		udp: {Backends: []Backend{be1u, be2u}, AffinitySeconds: 1},
	}
	mustSet(t, k, desired)
	got, err := k.Services()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, desired) {
		t.Fatalf("maps hold %v, want %v", got, desired)
	}
	c := startClient(t, f.ns, f.cg)
	// backends returns how often each backend answered n connects.
	backends := func(cmd string, key ServiceKey, n int) map[string]int {
		seen := map[string]int{}
		for range n {
			res := c.do(t, "%s %s", cmd, apFor(cmd, key.VIP, key.Port))
			fields := strings.Fields(res)
			if len(fields) < 2 || fields[0] != "ok" {
				t.Fatalf("%s to %s: %s", cmd, apFor(cmd, key.VIP, key.Port), res)
			}
			seen[fields[1]]++
		}
		return seen
	}
	only := func(seen map[string]int) string {
		if len(seen) != 1 {
			t.Fatalf("connects reached %v, want one backend", seen)
		}
		for name := range seen {
			return name
		}
		return ""
	}
	first := only(backends("tcp", tcp, 50))
	udpFirst := only(backends("udp", udp, 20))
	// Dual-stack sockets of the same client share its affinity.
	if name := only(backends("tcp6", tcp, 20)); name != first {
		t.Fatalf("tcp6 to ::ffff:VIP reached %s, the client's IPv4 connects %s", name, first)
	}
	if name := only(backends("udp6", udp, 10)); name != udpFirst {
		t.Fatalf("udp6 to ::ffff:VIP reached %s, the client's IPv4 sendto()s %s", name, udpFirst)
	}

	// Leave the remembered backend a 2^-32 share: affinity keeps it.
	kept, other := be1, be2
	if first == "be2" {
		kept, other = be2, be1
	}
	kept.Weight, other.Weight = 1, math.MaxUint32-1
	desired[tcp] = Service{Backends: []Backend{kept, other}, AffinitySeconds: 1}
	mustSet(t, k, desired)
	if name := only(backends("tcp", tcp, 50)); name != first {
		t.Fatalf("within the timeout the client moved from %s to %s", first, name)
	}
	// After the timeout the weights decide again, and the new choice sticks.
	time.Sleep(1500 * time.Millisecond)
	second := only(backends("tcp", tcp, 20))
	if second == first {
		t.Fatalf("after the timeout the client stayed on %s (weight 1 of 2^32-1)", first)
	}
	// The remembered backend leaves the service: not used any more.
	desired[tcp] = Service{Backends: []Backend{kept}, AffinitySeconds: 1}
	mustSet(t, k, desired)
	if name := only(backends("tcp", tcp, 5)); name != first {
		t.Fatalf("with %s removed the client reached %s", second, name)
	}
	// Without affinity: spread.
	desired[tcp] = Service{Backends: []Backend{be1, be2}}
	mustSet(t, k, desired)
	if seen := backends("tcp", tcp, 40); len(seen) != 2 {
		t.Errorf("without affinity 40 connects reached %v, want both backends", seen)
	}
}

// TestKernelUnknownVIPFailsFast: on a node with a default route, a VIP
// without a map entry leaves by it and connect() hangs. With the VIP range
// routed unreachable (what pkg/routeagent programs on every node: proto
// 148, metric 100) it fails at once with EHOSTUNREACH, while VIPs the maps
// know still connect: the hooks rewrite the destination before the route
// lookup.
func TestKernelUnknownVIPFailsFast(t *testing.T) {
	f := newFixture(t)
	// A default route whose next hop swallows everything: veth wan0 to
	// wan1 (no address there, so nothing answers), neighbour static.
	f.ns.mustRun(t, "ip", "link", "add", "wan0", "type", "veth", "peer", "name", "wan1")
	f.ns.mustRun(t, "ip", "link", "set", "wan0", "up")
	f.ns.mustRun(t, "ip", "link", "set", "wan1", "up")
	f.ns.mustRun(t, "ip", "addr", "add", "192.0.2.1/24", "dev", "wan0")
	f.ns.mustRun(t, "ip", "neigh", "add", "192.0.2.2", "lladdr", "02:00:00:00:00:02", "dev", "wan0", "nud", "permanent")
	f.ns.mustRun(t, "ip", "route", "add", "default", "via", "192.0.2.2", "dev", "wan0")
	k := f.open(t)
	t.Cleanup(func() {
		if err := k.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	mustSet(t, k, map[ServiceKey]Service{{vipA, 80, TCP}: on(be1), {vipA, 53, UDP}: on(be1u)})
	unknown := netip.MustParseAddr("243.0.0.9")
	c := startClient(t, f.ns, f.cg)

	// The problem: an unknown VIP goes to the default route and hangs.
	if res := c.do(t, "tcp %s", ap(unknown, 80)); !strings.Contains(res, "timeout") {
		t.Fatalf("unknown VIP without the unreachable range: %q, want a timeout", res)
	}

	f.ns.mustRun(t, "ip", "route", "add", "unreachable", "243.0.0.0/12", "proto", "148", "metric", "100")
	for _, tc := range []struct{ cmd, addr string }{
		{"tcp", ap(unknown, 80)}, // no entry at all
		{"tcp", ap(vipA, 81)},    // a port the service does not export
		{"udp", ap(unknown, 53)}, // unconnected sendto
		{"cudp", ap(vipA, 5353)}, // connect of a UDP socket
		{"tcp", ap(vipA, 53)},    // the UDP port's number over TCP
	} {
		// EHOSTUNREACH comes from the route lookup itself; a hang
		// would end in the client's timeout instead.
		if res := c.do(t, "%s %s", tc.cmd, tc.addr); res != "err EHOSTUNREACH" {
			t.Errorf("%s %s: %q, want err EHOSTUNREACH", tc.cmd, tc.addr, res)
		}
	}
	// Known VIPs are translated before the route lookup: unaffected.
	if res := c.do(t, "tcp %s", ap(vipA, 80)); !strings.HasPrefix(res, "ok be1 "+ap(vipA, 80)) {
		t.Errorf("tcp to the known VIP: %q, want be1 behind %s", res, ap(vipA, 80))
	}
	for _, cmd := range []string{"udp", "cudp"} {
		if res := c.do(t, "%s %s", cmd, ap(vipA, 53)); !strings.HasPrefix(res, "ok be1 "+ap(vipA, 53)) {
			t.Errorf("%s to the known VIP: %q, want be1 answering as %s", cmd, res, ap(vipA, 53))
		}
	}
}

func parseOK(t *testing.T, res string) (name, peer string, ok bool) {
	t.Helper()
	f := strings.Fields(res)
	if len(f) != 3 || f[0] != "ok" {
		return "", "", false
	}
	return f[1], f[2], true
}

// TestKernelRestartAdoptsAndCleanup closes the Table without cleanup (a
// daemon restart), checks the datapath keeps working meanwhile, reopens it
// from the pins with the same content, keeps an established connection, and
// finally checks Cleanup removes every pin and attachment.
func TestKernelRestartAdoptsAndCleanup(t *testing.T) {
	f := newFixture(t)
	k := f.open(t)
	desired := map[ServiceKey]Service{{vipA, 80, TCP}: on(be1, be2)}
	mustSet(t, k, desired)

	c := startClient(t, f.ns, f.cg)
	if res := c.do(t, "open %s", ap(vipA, 80)); res != "ok "+ap(vipA, 80) {
		t.Fatalf("open: %s", res)
	}
	first := c.do(t, "say")
	if !strings.HasPrefix(first, "ok be") {
		t.Fatalf("say: %s", first)
	}

	if err := k.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	// No process holds the objects now: the pins keep the datapath.
	if res := c.do(t, "tcp %s", ap(vipA, 80)); !strings.HasPrefix(res, "ok be") {
		t.Fatalf("new connection while no daemon runs: %s", res)
	}

	k2 := f.open(t)
	got, err := k2.Services()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, desired) {
		t.Fatalf("adopted maps hold %v, want %v", got, desired)
	}
	if u := k2.Usage(); u != (Limits{Services: 1, Backends: 2}) {
		t.Errorf("adopted maps' usage %+v, want 1 service, 2 backend slots", u)
	}
	mustSet(t, k2, desired)
	if ops := k2.LastOps(); ops.Total() != 0 {
		t.Errorf("setting the adopted state again wrote %+v, want nothing", ops)
	}
	// Found right in the maps, the services are remembered as given: the
	// next Set compares their backend lists, not their slots.
	if got := k2.state.given; !reflect.DeepEqual(got, desired) {
		t.Errorf("after the first Set on adopted maps the Kernel remembers %v as given, want %v", got, desired)
	}
	if res := c.do(t, "say"); res != first {
		t.Errorf("established connection after restart: %q, want %q", res, first)
	}
	for _, cmd := range []string{"tcp", "tcp6"} {
		if res := c.do(t, "%s %s", cmd, apFor(cmd, vipA, 80)); !strings.HasPrefix(res, "ok be") {
			t.Fatalf("new %s connection after restart: %s", cmd, res)
		}
	}
	for _, h := range hooks {
		if n := attached(t, f.cg, h.attach); n != 1 {
			t.Errorf("%s: %d programs attached after restart, want 1", h.pin, n)
		}
	}

	if err := k2.Cleanup(); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if _, err := os.Stat(f.cfg.PinDir); !errors.Is(err, os.ErrNotExist) {
		entries, _ := os.ReadDir(f.cfg.PinDir)
		t.Errorf("pin directory left behind: %v %v", err, entries)
	}
	for _, h := range hooks {
		if n := attached(t, f.cg, h.attach); n != 0 {
			t.Errorf("%s: %d programs still attached after cleanup", h.pin, n)
		}
	}
	// Nothing translates the VIP any more (and nothing routes it here).
	for _, cmd := range []string{"tcp", "tcp6"} {
		if res := c.do(t, "%s %s", cmd, apFor(cmd, vipA, 80)); strings.HasPrefix(res, "ok") {
			t.Errorf("VIP still reachable over %s after cleanup: %s", cmd, res)
		}
	}
	// The established connection was never translated per packet: it lives on.
	if res := c.do(t, "say"); !strings.HasPrefix(res, "ok be") {
		t.Errorf("established connection after cleanup: %s", res)
	}
	if err := Cleanup(f.cfg.PinDir); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
}

// attached returns how many programs of type at are attached to cgroup dir.
func attached(t *testing.T, dir string, at ebpf.AttachType) int {
	t.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: at})
	if err != nil {
		t.Fatalf("query programs of %s: %v", dir, err)
	}
	return len(res.Programs)
}

// TestOpenRefusesNonBPFFS checks the pin directory must be on bpffs.
func TestOpenRefusesNonBPFFS(t *testing.T) {
	requireRoot(t)
	cg := newCgroup(t)
	_, err := Open(Config{PinDir: filepath.Join(t.TempDir(), "vip"), CgroupPath: cg})
	if err == nil || !strings.Contains(err.Error(), "not on a bpf filesystem") {
		t.Fatalf("open on a non-bpffs directory: %v, want a refusal", err)
	}
}

// TestOpenRefusesOtherSizes checks pinned maps of other sizes are not
// silently replaced.
func TestOpenRefusesOtherSizes(t *testing.T) {
	requireRoot(t)
	cfg := Config{PinDir: newBPFFS(t), CgroupPath: newCgroup(t), MaxServices: 128}
	k, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Cleanup() })
	cfg.MaxServices = 256
	if k2, err := Open(cfg); !errors.Is(err, ebpf.ErrMapIncompatible) {
		if k2 != nil {
			_ = k2.Close()
		}
		t.Fatalf("reopen with other sizes: %v, want ErrMapIncompatible", err)
	}
}

// TestOpenMovesLinksToNewCgroup reopens the pins with another cgroup: the
// programs leave the old cgroup and attach to the new one.
func TestOpenMovesLinksToNewCgroup(t *testing.T) {
	requireRoot(t)
	pins, cg1, cg2 := newBPFFS(t), newCgroup(t), newCgroup(t)
	k, err := Open(Config{PinDir: pins, CgroupPath: cg1})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	k, err = Open(Config{PinDir: pins, CgroupPath: cg2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Cleanup() })
	for _, h := range hooks {
		if n1, n2 := attached(t, cg1, h.attach), attached(t, cg2, h.attach); n1 != 0 || n2 != 1 {
			t.Errorf("%s: %d programs on the old cgroup, %d on the new one; want 0 and 1", h.pin, n1, n2)
		}
	}
}
