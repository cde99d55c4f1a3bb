package wireguard

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
)

// TestWireGuardIPv6Subnets: a dual-stack cluster's IPv6 subnets (reached
// directly, beside IPv4 ones under globalnet) cross the WireGuard cable
// over the IPv4 WAN: AllowedIPs and proto-157 routes of both families,
// TCP echo pod to pod over IPv6 both ways and over IPv4 beside it; the
// IPv6 subnet removed, its route and AllowedIP go and IPv6 traffic stops.
func TestWireGuardIPv6Subnets(t *testing.T) {
	tp := cabletest.New(t)
	v6 := map[string]struct {
		gw, pod string
		subnet  netip.Prefix
		addr    netip.Addr
	}{
		"a": {tp.GwA, tp.PodA, netip.MustParsePrefix("fd00:1::/64"), netip.MustParseAddr("fd00:1::2")},
		"b": {tp.GwB, tp.PodB, netip.MustParsePrefix("fd00:2::/64"), netip.MustParseAddr("fd00:2::2")},
	}
	for _, s := range v6 {
		gwAddr := s.subnet.Addr().Next().String()
		cabletest.Run(t, "ip", "-n", s.gw, "addr", "add", gwAddr+"/64", "dev", "pod0", "nodad")
		cabletest.Run(t, "ip", "-n", s.pod, "addr", "add", s.addr.String()+"/64", "dev", "eth0", "nodad")
		cabletest.Run(t, "ip", "-n", s.pod, "-6", "route", "add", "default", "via", gwAddr)
		cabletest.Run(t, "ip", "netns", "exec", s.gw, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	}
	a, b := newTest(t, tp, "a", t.TempDir()), newTest(t, tp, "b", t.TempDir())
	conn := func(side string, d cable.Driver, ipv6 bool) cable.Connection {
		c := cabletest.ConnTo(side, testPort, d.PublicKey())
		if ipv6 {
			c.Subnets = append(c.Subnets, v6[side].subnet)
		}
		return c
	}
	set := func(ipv6 bool) {
		t.Helper()
		ctx := context.Background()
		if err := a.Set(ctx, []cable.Connection{conn("b", b, ipv6)}); err != nil {
			t.Fatalf("set a: %v", err)
		}
		if err := b.Set(ctx, []cable.Connection{conn("a", a, ipv6)}); err != nil {
			t.Fatalf("set b: %v", err)
		}
	}
	set(true)
	for _, s := range v6 {
		cabletest.EchoServer(t, s.pod, netip.AddrPortFrom(s.addr, 7000))
	}
	cabletest.EchoServer(t, tp.PodB, netip.AddrPortFrom(cabletest.PodB, 7000))
	for _, d := range []struct{ from, to string }{{"a", "b"}, {"b", "a"}} {
		to := netip.AddrPortFrom(v6[d.to].addr, 7000)
		if err := cabletest.Eventually(10*time.Second, func() error {
			return cabletest.DialEcho(v6[d.from].pod, to, "over ipv6", time.Second)
		}); err != nil {
			t.Fatalf("pod %s -> [%s] over IPv6: %v", d.from, to, err)
		}
	}
	if err := cabletest.DialEcho(tp.PodA, netip.AddrPortFrom(cabletest.PodB, 7000), "over ipv4", 3*time.Second); err != nil {
		t.Fatalf("pod a -> %s over IPv4 beside IPv6: %v", cabletest.PodB, err)
	}
	routes := cabletest.OwnedRoutes(t, tp.GwA)
	if !strings.Contains(routes, "fd00:2::/64 dev "+tp.IfName("a")) || !strings.Contains(routes, cabletest.SubnetB.String()+" dev "+tp.IfName("a")) {
		t.Fatalf("gateway a's routes:\n%s\nwant both families of b's subnets", routes)
	}
	st, err := a.Connections(context.Background())
	if err != nil || len(st) != 1 {
		t.Fatalf("connections %v, %v", st, err)
	}

	set(false)
	if routes := cabletest.OwnedRoutes(t, tp.GwA); strings.Contains(routes, "fd00:2::") {
		t.Fatalf("IPv6 route left after its subnet was removed:\n%s", routes)
	}
	if out := cabletest.Run(t, "ip", "netns", "exec", tp.GwA, "wg", "show", tp.IfName("a"), "allowed-ips"); strings.Contains(out, "fd00:2::") ||
		!slices.ContainsFunc(strings.Fields(out), func(f string) bool { return f == cabletest.SubnetB.String() }) {
		t.Fatalf("allowed IPs after removing the IPv6 subnet:\n%s", out)
	}
	if err := cabletest.DialEcho(tp.PodA, netip.AddrPortFrom(v6["b"].addr, 7000), "gone", time.Second); err == nil {
		t.Fatal("IPv6 still crosses after its subnet was removed")
	}
}
