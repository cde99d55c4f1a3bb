package nodenet

import (
	"fmt"
	"net"
	"net/netip"
)

// Owner identifies the routes of one component: those with Protocol in
// Table, and on Link when it is set. Only such routes are ever replaced
// or deleted.
type Owner struct {
	Protocol int
	// Table is the route table; 0 means main.
	Table int
	// Link is a device index; 0 means owned routes of every device.
	Link int
}

// Route is one desired route. There is one route per destination and
// metric: a later one with the same Dst and Metric wins. One owner may
// hold several routes to a destination with different metrics (the
// kernel uses the lowest).
type Route struct {
	Dst netip.Prefix
	// Metric is the route's priority ("metric" in `ip route`); 0 is the
	// kernel's default, which for IPv6 is 1024 (read back as 0).
	Metric int
	// Via is an on-link next hop; invalid means a device route (scope
	// link) straight out of Link.
	Via netip.Addr
	// Src is the preferred source address; invalid means the kernel's
	// choice.
	Src netip.Addr
	// Link is the index of the outgoing device; 0 makes an unreachable
	// route (Via and Src must then be invalid).
	Link int
}

// String is r in the style of `ip route`, with the device as an index.
func (r Route) String() string {
	var s string
	switch {
	case r.Link == 0:
		s = "unreachable " + r.Dst.String()
	case r.Via.IsValid():
		s = r.Dst.String() + " via " + r.Via.String()
	default:
		s = fmt.Sprintf("%s dev %d", r.Dst, r.Link)
	}
	if r.Src.IsValid() {
		s += " src " + r.Src.String()
	}
	if r.Metric != 0 {
		s += fmt.Sprintf(" metric %d", r.Metric)
	}
	return s
}

// LinkLocal is the IPv6 link-local address the kernel derives from the
// 48-bit MAC of a device (modified EUI-64, RFC 4291 appendix A: the
// universal/local bit of the first octet flipped, ff:fe in the middle):
// fe80::ca:c6ff:fe12:1 for 02:ca:c6:12:00:01. Overlays route IPv6
// via the remote device's LinkLocal with a permanent neighbour entry for
// its MAC, so no neighbour discovery crosses them.
func LinkLocal(mac net.HardwareAddr) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfe, 1: 0x80,
		8: mac[0] ^ 0x02, 9: mac[1], 10: mac[2], 11: 0xff, 12: 0xfe, 13: mac[3], 14: mac[4], 15: mac[5]})
}

// VXLAN is a desired VXLAN device (always with learning off: the FDB is
// static).
type VXLAN struct {
	Name string
	VNI  int
	Port int
	// Local is the source address of the outer packets.
	Local netip.Addr
	MTU   int
	MAC   net.HardwareAddr
}

// FDB is a static forwarding entry of a VXLAN device: frames to MAC are
// sent to the remote VTEP Dst.
type FDB struct {
	MAC net.HardwareAddr
	Dst netip.Addr
}

// Neigh is a permanent neighbour entry: IP is at MAC, no ARP asked.
type Neigh struct {
	IP  netip.Addr
	MAC net.HardwareAddr
}

// Neighbours are the static entries of one device. They are all the
// owner's: PruneNeighbours deletes every permanent one not listed.
type Neighbours struct {
	FDB   []FDB
	Neigh []Neigh
}

// Sysctl is one value below /proc/sys, e.g. {"net/ipv4/ip_forward", "1"}.
type Sysctl struct {
	Path, Value string
}
