package gateway

import (
	"net/netip"
	"slices"
	"testing"
)

// TestNodeNetworks: an address on an interface stands for its network, an
// address on none (a public address behind NAT) for itself.
func TestNodeNetworks(t *testing.T) {
	ns := newNetns(t, "gwn")
	run(t, "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	run(t, "ip", "-n", ns, "addr", "add", "172.20.1.5/24", "dev", "eth0")
	run(t, "ip", "-n", ns, "addr", "add", "198.18.3.10/15", "dev", "eth0")
	got, err := nodeNetworks("/run/netns/"+ns, netip.MustParseAddr("198.18.3.10"), netip.MustParseAddr("172.20.1.5"),
		netip.MustParseAddr("203.0.113.7"), netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("172.20.1.0/24"), netip.MustParsePrefix("203.0.113.7/32")}
	if !slices.Equal(got, want) {
		t.Errorf("nodeNetworks = %v, want %v", got, want)
	}
}
