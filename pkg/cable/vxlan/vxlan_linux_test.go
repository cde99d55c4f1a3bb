package vxlan

import (
	"context"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
)

const testPort = 4789

func factory(t testing.TB, tp *cabletest.Topo, side, stateDir string) cable.Driver {
	t.Helper()
	d, err := New(context.Background(), tp.Local(side, testPort, stateDir))
	if err != nil {
		t.Fatalf("new vxlan %s: %v", side, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestVXLAN(t *testing.T) {
	cabletest.RunSuite(t, testPort, factory)
}

// A restarted driver adopts the kernel device: same ifindex, FDB kept.
func TestVXLANAdoptsDevice(t *testing.T) {
	tp := cabletest.New(t)
	a := factory(t, tp, "a", t.TempDir())
	b := factory(t, tp, "b", t.TempDir())
	cabletest.Connect(t, a, b, testPort)
	before := cabletest.Run(t, "ip", "-n", tp.GwA, "-o", "link", "show", "dev", tp.IfName("a"))
	fdbBefore := cabletest.Run(t, "bridge", "-n", tp.GwA, "fdb", "show", "dev", tp.IfName("a"))
	if !strings.Contains(fdbBefore, "dst "+cabletest.WANB.String()) {
		t.Fatalf("fdb has no entry for %s: %q", cabletest.WANB, fdbBefore)
	}
	a.Close()
	a = factory(t, tp, "a", t.TempDir())
	after := cabletest.Run(t, "ip", "-n", tp.GwA, "-o", "link", "show", "dev", tp.IfName("a"))
	if strings.Fields(before)[0] != strings.Fields(after)[0] {
		t.Fatalf("device re-created instead of adopted: %q -> %q", before, after)
	}
	if fdb := cabletest.Run(t, "bridge", "-n", tp.GwA, "fdb", "show", "dev", tp.IfName("a")); fdb != fdbBefore {
		t.Fatalf("fdb changed by adoption: %q -> %q", fdbBefore, fdb)
	}
	if err := a.Set(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if fdb := cabletest.Run(t, "bridge", "-n", tp.GwA, "fdb", "show", "dev", tp.IfName("a")); strings.Contains(fdb, "dst ") {
		t.Fatalf("fdb entries left after empty Set: %q", fdb)
	}
}

// TestVXLANIPv6Subnets: IPv6 subnets cross the VXLAN cable over the IPv4
// underlay (cabletest.RunIPv6Suite), routed via the remote device's
// link-local address (NextHop6For, which the kernel gave that device)
// with a permanent IPv6 neighbour for its MAC; with no IPv6 subnet left
// the IPv6 neighbour goes, the IPv4 one stays.
func TestVXLANIPv6Subnets(t *testing.T) {
	neighbours := func(t *testing.T, tp *cabletest.Topo) string {
		return cabletest.Run(t, "ip", "-n", tp.GwA, "neigh", "show", "dev", tp.IfName("a"), "nud", "permanent")
	}
	nh4, nh6, mac := NextHopFor(cabletest.WANB), NextHop6For(cabletest.WANB), MACFor(cabletest.WANB)
	cabletest.RunIPv6Suite(t, testPort, factory, cabletest.IPv6Checks{
		Up: func(t *testing.T, tp *cabletest.Topo, routes string) {
			dev := " dev " + tp.IfName("a")
			for _, want := range []string{
				cabletest.SubnetB.String() + " via " + nh4.String() + dev,
				cabletest.SubnetB6.String() + " via " + nh6.String() + dev,
			} {
				if !strings.Contains(routes, want) {
					t.Fatalf("gateway A's routes:\n%s\nwant %q", routes, want)
				}
			}
			n := neighbours(t, tp)
			for _, nh := range []string{nh4.String(), nh6.String()} {
				if !strings.Contains(n, nh+" lladdr "+mac.String()+" PERMANENT") {
					t.Fatalf("gateway A's neighbours:\n%s\nwant %s at %s", n, nh, mac)
				}
			}
			if addrs := cabletest.Run(t, "ip", "-n", tp.GwB, "-6", "addr", "show", "dev", tp.IfName("b")); !strings.Contains(addrs, nh6.String()+"/64") {
				t.Fatalf("gateway B's device does not hold the next hop %s:\n%s", nh6, addrs)
			}
		},
		Removed: func(t *testing.T, tp *cabletest.Topo, routes string) {
			if n := neighbours(t, tp); strings.Contains(n, nh6.String()) || !strings.Contains(n, nh4.String()) {
				t.Fatalf("gateway A's neighbours without IPv6 subnets:\n%s\nwant %s only", n, nh4)
			}
		},
	})
}
