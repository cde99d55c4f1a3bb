package cabletest

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/pkg/cable"
)

// IPv6Checks are a driver's own assertions in RunIPv6Suite; nil ones are
// skipped.
type IPv6Checks struct {
	// Up runs while both families cross the cable; routes are gateway
	// A's proto-157 routes (OwnedRoutes).
	Up func(t *testing.T, tp *Topo, routes string)
	// Removed runs after B's IPv6 subnet was taken out of the
	// connections (its IPv4 subnet stays, and IPv4 crosses again).
	Removed func(t *testing.T, tp *Topo, routes string)
}

// RunIPv6Suite checks that a driver carries a dual-stack cluster's IPv6
// subnets over the IPv4 WAN beside its IPv4 ones, in a dual-stack
// topology (AddIPv6; the IPv6 subnets are in each side's LocalEndpoint
// and connection): TCP echo pod to pod over IPv6 both ways and over IPv4
// beside it, status connected, gateway A routes both of B's subnets and
// neither of its own; B's IPv6 subnet removed, its route goes and IPv6
// stops while IPv4 still crosses; after Cleanup neither gateway keeps a
// proto-157 route or a device beyond the topology's (lo, wan0, pod0).
func RunIPv6Suite(t *testing.T, port uint16, newDriver Factory, checks IPv6Checks) {
	tp := New(t)
	tp.AddIPv6(t)
	ctx := context.Background()
	a, b := newDriver(t, tp, "a", t.TempDir()), newDriver(t, tp, "b", t.TempDir())
	set := func(ipv6 bool) {
		t.Helper()
		for _, s := range []struct {
			d    cable.Driver
			peer string
			key  cable.Key
			v6   netip.Prefix
		}{{a, "b", b.PublicKey(), SubnetB6}, {b, "a", a.PublicKey(), SubnetA6}} {
			c := ConnTo(s.peer, port, s.key)
			if ipv6 {
				c.Subnets = append(c.Subnets, s.v6)
			}
			if err := s.d.Set(ctx, []cable.Connection{c}); err != nil {
				t.Fatalf("set the connection to %s: %v", s.peer, err)
			}
		}
	}
	for _, s := range []struct {
		ns   string
		addr netip.Addr
	}{{tp.PodA, PodA}, {tp.PodB, PodB}, {tp.PodA, PodA6}, {tp.PodB, PodB6}} {
		EchoServer(t, s.ns, netip.AddrPortFrom(s.addr, EchoPort))
	}
	toB6 := netip.AddrPortFrom(PodB6, EchoPort)
	if err := DialEcho(tp.PodA, toB6, "x", time.Second); err == nil {
		t.Fatal("IPv6 crossed before the cable was set")
	}

	set(true)
	for _, d := range []struct {
		from string
		to   netip.Addr
	}{{tp.PodA, PodB6}, {tp.PodB, PodA6}} {
		to := netip.AddrPortFrom(d.to, EchoPort)
		if err := Eventually(20*time.Second, func() error { return DialEcho(d.from, to, "over ipv6", 2*time.Second) }); err != nil {
			t.Fatalf("%s -> %s over IPv6: %v", d.from, to, err)
		}
	}
	WaitTraffic(t, tp)
	WaitConnected(t, a, b)
	routes := OwnedRoutes(t, tp.GwA)
	for _, p := range []netip.Prefix{SubnetB, SubnetB6} {
		if !hasRoute(routes, p) {
			t.Fatalf("gateway A's routes:\n%s\nwant one to %s", routes, p)
		}
	}
	for _, p := range []netip.Prefix{SubnetA, SubnetA6} {
		if hasRoute(routes, p) {
			t.Fatalf("gateway A's routes:\n%s\nhold its own subnet %s", routes, p)
		}
	}
	if checks.Up != nil {
		checks.Up(t, tp, routes)
	}

	set(false)
	WaitTraffic(t, tp)
	routes = OwnedRoutes(t, tp.GwA)
	if hasRoute(routes, SubnetB6) || !hasRoute(routes, SubnetB) {
		t.Fatalf("gateway A's routes after removing %s:\n%s\nwant only %s", SubnetB6, routes, SubnetB)
	}
	if err := DialEcho(tp.PodA, toB6, "gone", time.Second); err == nil {
		t.Fatal("IPv6 still crosses after its subnet was removed")
	}
	if checks.Removed != nil {
		checks.Removed(t, tp, routes)
	}

	for _, d := range []cable.Driver{a, b} {
		if err := d.Cleanup(ctx); err != nil {
			t.Fatalf("cleanup: %v", err)
		}
	}
	for _, gw := range []string{tp.GwA, tp.GwB} {
		if r := OwnedRoutes(t, gw); r != "" {
			t.Errorf("%s: routes left after cleanup:\n%s", gw, r)
		}
		for line := range strings.Lines(Run(t, "ip", "-n", gw, "-br", "link", "show")) {
			name, _, _ := strings.Cut(strings.Fields(line)[0], "@")
			if !slices.Contains([]string{"lo", "wan0", "pod0"}, name) {
				t.Errorf("%s: device %s left after cleanup", gw, name)
			}
		}
	}
}

// hasRoute reports whether routes (`ip route` lines) hold one to p.
func hasRoute(routes string, p netip.Prefix) bool {
	for line := range strings.Lines(routes) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == p.String() {
			return true
		}
	}
	return false
}
