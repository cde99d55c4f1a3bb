package nat

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// TestDeleteConntrack creates conntrack entries in a fresh namespace —
// a flow to a remote subnet, one from it, one between local addresses —
// and checks that DeleteConntrack removes exactly the first two.
func TestDeleteConntrack(t *testing.T) {
	requireRoot(t)
	tp := newTopo(t)
	h, err := netnsx.Handle(tp.path("gw"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	flow := func(src, dst string, sport, dport uint16) *netlink.ConntrackFlow {
		f := &netlink.ConntrackFlow{FamilyType: unix.AF_INET, TimeOut: 120}
		f.Forward = netlink.IPTuple{SrcIP: net.ParseIP(src).To4(), DstIP: net.ParseIP(dst).To4(), SrcPort: sport, DstPort: dport, Protocol: unix.IPPROTO_UDP}
		f.Reverse = netlink.IPTuple{SrcIP: net.ParseIP(dst).To4(), DstIP: net.ParseIP(src).To4(), SrcPort: dport, DstPort: sport, Protocol: unix.IPPROTO_UDP}
		return f
	}
	for _, f := range []*netlink.ConntrackFlow{
		flow("10.245.0.2", "242.0.1.2", 40000, 1025),   // a local pod to a remote global IP:port
		flow("242.0.1.253", "10.244.0.4", 41000, 7071), // a remote client to a local pod
		flow("10.245.0.2", "10.245.1.2", 42000, 53),    // local only
	} {
		if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
			t.Fatalf("create conntrack entry %s: %v", f, err)
		}
	}
	n, err := DeleteConntrack(tp.path("gw"), []netip.Prefix{netip.MustParsePrefix("242.0.1.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	left, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || len(left) != 1 || !left[0].Forward.DstIP.Equal(net.ParseIP("10.245.1.2")) {
		t.Errorf("deleted %d entries, left %v; want 2 deleted and the local flow left", n, left)
	}
	if n, err := DeleteConntrack(tp.path("gw"), nil); err != nil || n != 0 {
		t.Errorf("no prefixes: deleted %d, %v; want nothing", n, err)
	}
}
