package routeagent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/nodenet"
)

// The node contract: numbers and names this package owns on a node (see
// README.md). They differ from pkg/cable's (VNI 4242, port 4789, route
// protocol 157) and the lab's (route protocols 76/77).
const (
	// DefaultDevice is the VXLAN overlay device between nodes and the
	// active gateway node.
	DefaultDevice = "vx-causeway"
	// DefaultVNI is the overlay's VXLAN network identifier.
	DefaultVNI = 4343
	// DefaultPort is the overlay's UDP port on the node network.
	DefaultPort = 4799
	// VXLANOverhead is what VXLAN over IPv4 adds to an inner frame.
	VXLANOverhead = 50
	// RouteProtocol marks every route the route agent installs
	// ("proto 148" in `ip route`); only routes with it are ever changed.
	RouteProtocol = 148
	// RouteMetric is the priority of the route agent's routes. pkg/cable
	// installs its routes with metric 0, so on a node that becomes the
	// active gateway the tunnel routes win at once, before the agent
	// catches up, and the two never replace each other's routes.
	RouteMetric = 100
	// FallbackMetric is the priority of the unreachable fallback routes
	// every node holds under its routes to remote clusters: above
	// RouteMetric and above pkg/cable's routes (metric 0; the kernel's
	// 1024 for IPv6), so they are used only while the real route is
	// missing, and traffic for a remote never leaves by the default
	// route (fail closed).
	FallbackMetric = 4096
	// DefaultTunnelMTU is the smallest MTU on the way between clusters
	// (pkg/cable's WireGuard default), used for MSS clamping.
	DefaultTunnelMTU = 1420
)

// Chains the route agent owns.
const (
	ChainMSS     = "CAUSEWAY-MSS"     // mangle, jumped to from POSTROUTING
	ChainForward = "CAUSEWAY-FORWARD" // filter, jumped to from FORWARD
	ChainCanary  = "CAUSEWAY-CANARY"  // mangle, empty; gone = outside flush
	// ChainNAT (nat, jumped to first from POSTROUTING) accepts traffic
	// from remote clusters before any masquerading rule (kube-proxy's
	// KUBE-POSTROUTING, a CNI's) can rewrite its source: a backend reached
	// through a ClusterIP sees the remote pod's address.
	ChainNAT = "CAUSEWAY-POSTROUTING"
)

// overlayFirstOctet starts the overlay addresses: 241.b.c.d for node
// a.b.c.d. They are never routed between nodes; they exist only as the
// address of each node's overlay device and as on-link next hops.
const overlayFirstOctet = 241

// OverlayAddr is the overlay address of the node with IPv4 node address a:
// 241.b.c.d for a.b.c.d. Two nodes of one cluster whose node addresses
// share the last three octets would collide (Compute reports it).
func OverlayAddr(a netip.Addr) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte{overlayFirstOctet, b[1], b[2], b[3]})
}

// OverlayAddr6 is the IPv6 next hop of the node with IPv4 node address
// a on the overlay: the link-local address the kernel derives from
// OverlayMAC(a) (nodenet.LinkLocal: fe80::cb:<a>ff:fe<b>:<c><d> in hex
// for a.b.c.d), so it is also the address the node's device answers on. IPv6
// routes to remote subnets point at it, with a permanent neighbour entry
// for OverlayMAC(a) (no neighbour discovery across the overlay).
func OverlayAddr6(a netip.Addr) netip.Addr { return nodenet.LinkLocal(OverlayMAC(a)) }

// OverlayMAC is the MAC address of the overlay device of the node with
// IPv4 node address a: locally administered 02:cb followed by a.
func OverlayMAC(a netip.Addr) net.HardwareAddr {
	b := a.As4()
	return net.HardwareAddr{0x02, 0xcb, b[0], b[1], b[2], b[3]}
}

// Params are the node-wide settings that do not come from the API.
type Params struct {
	// Device, VNI and Port of the overlay; zero values pick the defaults.
	Device string
	VNI    int
	Port   int
	// OverlayMTU is the overlay device's MTU: the node interface's MTU
	// minus VXLANOverhead (the daemon derives it).
	OverlayMTU int
	// TunnelMTU is the MTU of the tunnels between gateways.
	TunnelMTU int
	// Table is the route table (0 = main).
	Table int
	// LocalCIDRs are the local cluster's pod and service CIDRs: remote
	// subnets overlapping them are never routed (a safety check; the
	// gateway's policy refuses them first).
	LocalCIDRs []netip.Prefix
	// VIPRange is the clusterset VIP range (IPv4), routed unreachable on
	// every node; zero picks addrpolicy.DefaultVIPRange. Remote subnets
	// overlapping it are never routed (as for LocalCIDRs).
	VIPRange netip.Prefix
	// VIPRangeIPv6 is the IPv6 clusterset VIP range, routed unreachable on
	// every node like VIPRange; zero routes none.
	VIPRangeIPv6 netip.Prefix
	// Supernet is the ClusterSet's globalnet supernet, which holds
	// nothing but global CIDRs: every node has an unreachable fallback
	// route for it; zero picks addrpolicy.DefaultSupernet.
	Supernet netip.Prefix
}

func (p Params) withDefaults() Params {
	if p.Device == "" {
		p.Device = DefaultDevice
	}
	if p.VNI == 0 {
		p.VNI = DefaultVNI
	}
	if p.Port == 0 {
		p.Port = DefaultPort
	}
	if p.OverlayMTU == 0 {
		p.OverlayMTU = 1500 - VXLANOverhead
	}
	if p.TunnelMTU == 0 {
		p.TunnelMTU = DefaultTunnelMTU
	}
	if !p.VIPRange.IsValid() {
		p.VIPRange = netip.MustParsePrefix(addrpolicy.DefaultVIPRange)
	}
	if !p.Supernet.IsValid() {
		p.Supernet = netip.MustParsePrefix(addrpolicy.DefaultSupernet)
	}
	return p
}

// Gateway is the local cluster's active gateway node.
type Gateway struct {
	Hostname string
	NodeIP   netip.Addr
}

// Remote is one remote cluster whose Endpoint the gateway marked Valid:
// its subnets are the ones pkg/addrpolicy accepted for it.
type Remote struct {
	ClusterID string
	Subnets   []netip.Prefix
}

// Inputs is everything the desired state depends on.
type Inputs struct {
	NodeName string
	NodeIP   netip.Addr
	// Gateway is the local active gateway; nil when none is known.
	Gateway *Gateway
	Remotes []Remote
	Params  Params
}

// Overlay is the VXLAN device on this node.
type Overlay struct {
	Device  string
	VNI     int
	Port    int
	MTU     int
	LocalIP netip.Addr       // VTEP source: the node address
	Address netip.Addr       // assigned /32
	MAC     net.HardwareAddr // device MAC
	// Peer is the gateway node this node sends to; nil on the gateway.
	Peer *Peer
}

// Peer is the far end of the overlay: FDB and neighbour entries.
type Peer struct {
	NodeIP  netip.Addr
	Address netip.Addr
	// Address6 is its IPv6 next hop (OverlayAddr6), with a neighbour
	// entry of its own; invalid when no remote subnet is IPv6.
	Address6 netip.Addr
	MAC      net.HardwareAddr
}

// Route is one route the agent owns. An invalid Via makes it an
// unreachable route (the VIP range; remote subnets while no active
// gateway is known: fail fast instead of leaking to a default route;
// the fallbacks under the routes to remotes). Metric is RouteMetric or,
// for a fallback, FallbackMetric.
type Route struct {
	Dst    netip.Prefix
	Via    netip.Addr
	Metric int
}

func (r Route) String() string {
	if !r.Via.IsValid() {
		return fmt.Sprintf("unreachable %s metric %d", r.Dst, r.Metric)
	}
	return fmt.Sprintf("%s via %s metric %d", r.Dst, r.Via, r.Metric)
}

// Sysctl is one value the agent sets.
type Sysctl struct {
	Path  string // below /proc/sys, e.g. net/ipv4/conf/vx-causeway/rp_filter
	Value string
}

// Rules are the iptables chains the agent owns, as rule specs (the part
// after `-A <chain>`), per table and chain, plus the jumps into them.
type Rules struct {
	// Chains: table -> chain -> rules. Every owned chain is present, even
	// when empty.
	Chains map[string]map[string][]string
	// Jumps: builtin chain -> owned chain, per table.
	Jumps []Jump
}

// Jump is a rule in a builtin chain that jumps to an owned chain.
type Jump struct {
	Table, From, To string
	// Insert keeps the jump the first rule of its chain: a sync finding
	// another rule in front of it (kube-proxy prepending its own jump
	// after us) deletes and re-inserts it. Otherwise it is appended and
	// its position is not checked.
	Insert bool
}

// Spec is the jump's rule spec, comment included (what iptables-save prints).
func (j Jump) Spec() string {
	return fmt.Sprintf(`-m comment --comment "causeway route agent" -j %s`, j.To)
}

// DesiredState is what the node should look like.
type DesiredState struct {
	// Overlay is nil when the node has no usable node address.
	Overlay *Overlay
	// RouteTable the routes live in (0 = main).
	RouteTable int
	// Routes sorted by destination, then metric.
	Routes []Route
	Rules  Rules
	// Rules6 are the same chains for the IPv6 remote subnets, applied
	// with ip6tables; empty (no chains) when there are none.
	Rules6 Rules
	// Sysctls, including loose reverse-path filtering on the overlay
	// device (packets enter it with sources routed elsewhere).
	Sysctls []Sysctl
	// LooseUplinkRPFilter asks the mechanism to loosen rp_filter on the
	// interface towards the gateway when it is strict: replies from remote
	// clusters arrive there while their sources are routed via the overlay.
	LooseUplinkRPFilter bool
	// Skipped explains remote subnets that were not programmed.
	Skipped []string
}

// Equal reports whether two desired states program the same thing.
func (d DesiredState) Equal(o DesiredState) bool {
	return d.String() == o.String()
}

// String is a stable, complete rendering (used by Equal and in logs).
func (d DesiredState) String() string {
	var b strings.Builder
	if o := d.Overlay; o != nil {
		fmt.Fprintf(&b, "overlay %s vni %d port %d mtu %d local %s addr %s mac %s\n",
			o.Device, o.VNI, o.Port, o.MTU, o.LocalIP, o.Address, o.MAC)
		if p := o.Peer; p != nil {
			fmt.Fprintf(&b, "peer %s addr %s addr6 %s mac %s\n", p.NodeIP, p.Address, p.Address6, p.MAC)
		}
	}
	fmt.Fprintf(&b, "table %d\n", d.RouteTable)
	for _, r := range d.Routes {
		fmt.Fprintf(&b, "route %s\n", r)
	}
	for _, f := range []struct {
		name  string
		rules Rules
	}{{"iptables", d.Rules}, {"ip6tables", d.Rules6}} {
		for _, t := range sortedKeys(f.rules.Chains) {
			for _, c := range sortedKeys(f.rules.Chains[t]) {
				fmt.Fprintf(&b, "%s chain %s %s\n", f.name, t, c)
				for _, r := range f.rules.Chains[t][c] {
					fmt.Fprintf(&b, "  %s\n", r)
				}
			}
		}
		for _, j := range f.rules.Jumps {
			fmt.Fprintf(&b, "%s jump %s %s -> %s insert=%v\n", f.name, j.Table, j.From, j.To, j.Insert)
		}
	}
	for _, s := range d.Sysctls {
		fmt.Fprintf(&b, "sysctl %s=%s\n", s.Path, s.Value)
	}
	fmt.Fprintf(&b, "loose-uplink %v\n", d.LooseUplinkRPFilter)
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Compute is the route agent's policy: the node's desired state from its
// inputs. It has no I/O.
//
//   - Every node has the overlay device (the gateway receives on it).
//   - A node that is not the active gateway points the overlay at the
//     gateway node (FDB + neighbour) and routes every remote subnet via the
//     gateway's overlay address; with no gateway known, remote subnets get
//     unreachable routes.
//   - The active gateway node gets no routes: pkg/cable routes the remote
//     subnets into the tunnel there.
//   - Every node, the active gateway node too, has an unreachable
//     fallback route at FallbackMetric for every remote subnet it routes
//     (or pkg/cable routes) and for the globalnet supernet: while the
//     real route is missing (tunnel down or gone, the gateway's cable
//     not built, an overlay route removed) the lookup meets it instead
//     of the default route, and the traffic is dropped with
//     EHOSTUNREACH (fail closed). A remote that is not Valid gets neither
//     (what it announces was not accepted, and an unreachable route for
//     it could cut off addresses it has no right to).
//   - Every node routes the clusterset VIP ranges (IPv4, and IPv6 when
//     configured) unreachable: a VIP the
//     eBPF connect hook knows is rewritten to a backend before the route
//     lookup, so only an unknown VIP (not synced yet, a port not exported)
//     meets the route, and connect() fails at once with EHOSTUNREACH
//     instead of leaving by the default route and hanging.
//   - Every node clamps the MSS of TCP SYNs to and from remote subnets to
//     min(overlay MTU, tunnel MTU) - 40 (IPv6: - 60, its header is 20
//     bytes longer), accepts forwarded traffic to and from them, and
//     exempts traffic from them from source NAT — iptables for the IPv4
//     subnets, ip6tables for the IPv6 ones.
//   - IPv6 remote subnets (a dual-stack cluster's, reached directly) are
//     routed like IPv4 ones over the same IPv4 overlay, via the gateway's
//     link-local OverlayAddr6; IPv6 forwarding is turned on with them.
func Compute(in Inputs) DesiredState {
	p := in.Params.withDefaults()
	d := DesiredState{RouteTable: p.Table, Routes: []Route{{Dst: p.VIPRange, Metric: RouteMetric}}}
	if p.VIPRangeIPv6.IsValid() {
		d.Routes = append(d.Routes, Route{Dst: p.VIPRangeIPv6, Metric: RouteMetric})
	}
	g := guard{local: p.LocalCIDRs, vipRange: p.VIPRange, vipRange6: p.VIPRangeIPv6}
	if in.NodeIP.IsValid() {
		g.nodes = append(g.nodes, in.NodeIP)
	}
	if in.Gateway != nil && in.Gateway.NodeIP.IsValid() {
		g.nodes = append(g.nodes, in.Gateway.NodeIP)
	}
	subnets, skipped := usableSubnets(in.Remotes, g)
	d.Skipped = skipped
	fallbacks := slices.Clone(subnets)
	if why := g.unsafe(p.Supernet); why != "" {
		d.Skipped = append(d.Skipped, fmt.Sprintf("globalnet supernet %s %s: no fallback route", p.Supernet, why))
	} else {
		fallbacks = append(fallbacks, p.Supernet)
	}
	for _, s := range fallbacks {
		d.Routes = append(d.Routes, Route{Dst: s, Metric: FallbackMetric})
	}
	var subnets4, subnets6 []netip.Prefix
	for _, s := range subnets {
		if s.Addr().Is4() {
			subnets4 = append(subnets4, s)
		} else {
			subnets6 = append(subnets6, s)
		}
	}
	mtu := min(p.OverlayMTU, p.TunnelMTU)
	d.Rules = renderRules(subnets4, mtu-40)
	if len(subnets6) > 0 {
		d.Rules6 = renderRules(subnets6, mtu-60)
	}
	if !in.NodeIP.Is4() {
		d.Skipped = append(d.Skipped, fmt.Sprintf("node address %v is not IPv4: no overlay, no routes but the unreachable ones", in.NodeIP))
		sortRoutes(d.Routes)
		return d
	}
	d.Overlay = &Overlay{
		Device: p.Device, VNI: p.VNI, Port: p.Port, MTU: p.OverlayMTU,
		LocalIP: in.NodeIP, Address: OverlayAddr(in.NodeIP), MAC: OverlayMAC(in.NodeIP),
	}
	d.Sysctls = []Sysctl{
		{Path: "net/ipv4/conf/" + p.Device + "/rp_filter", Value: "2"},
		{Path: "net/ipv4/ip_forward", Value: "1"},
	}
	if len(subnets6) > 0 {
		d.Sysctls = append(d.Sysctls, Sysctl{Path: "net/ipv6/conf/all/forwarding", Value: "1"})
	}
	gw := in.Gateway
	isGateway := gw != nil && (gw.Hostname == in.NodeName || gw.NodeIP == in.NodeIP)
	switch {
	case isGateway:
		// pkg/cable owns the routes here.
	case gw == nil || !gw.NodeIP.Is4():
		for _, s := range subnets {
			d.Routes = append(d.Routes, Route{Dst: s, Metric: RouteMetric})
		}
	case OverlayAddr(gw.NodeIP) == OverlayAddr(in.NodeIP):
		d.Skipped = append(d.Skipped, fmt.Sprintf("gateway %s (%s) and this node (%s) share the overlay address %s",
			gw.Hostname, gw.NodeIP, in.NodeIP, OverlayAddr(in.NodeIP)))
		for _, s := range subnets {
			d.Routes = append(d.Routes, Route{Dst: s, Metric: RouteMetric})
		}
	default:
		peer := &Peer{NodeIP: gw.NodeIP, Address: OverlayAddr(gw.NodeIP), MAC: OverlayMAC(gw.NodeIP)}
		if len(subnets6) > 0 {
			peer.Address6 = OverlayAddr6(gw.NodeIP)
		}
		d.Overlay.Peer = peer
		for _, s := range subnets4 {
			d.Routes = append(d.Routes, Route{Dst: s, Via: peer.Address, Metric: RouteMetric})
		}
		for _, s := range subnets6 {
			d.Routes = append(d.Routes, Route{Dst: s, Via: peer.Address6, Metric: RouteMetric})
		}
		d.LooseUplinkRPFilter = len(subnets) > 0
	}
	sortRoutes(d.Routes)
	return d
}

// sortRoutes sorts routes by destination, then metric.
func sortRoutes(routes []Route) {
	slices.SortFunc(routes, func(a, b Route) int {
		if c := addrpolicy.ComparePrefix(a.Dst, b.Dst); c != 0 {
			return c
		}
		return a.Metric - b.Metric
	})
}

// usableSubnets returns the sorted, deduplicated remote subnets to
// route. Which subnets of which cluster are accepted is pkg/addrpolicy's
// decision, published by the gateway as Valid=True on the Endpoints these
// remotes come from; the agent does not re-arbitrate it (two remotes with
// overlapping subnets are both routed: every remote subnet goes to the
// same active gateway, whose tunnels carry what the policy accepted). It
// keeps only the safety checks of g, for what it programs on the node.
func usableSubnets(remotes []Remote, g guard) ([]netip.Prefix, []string) {
	var out []netip.Prefix
	var notes []string
	for _, r := range remotes {
		for _, s := range r.Subnets {
			if why := g.unsafe(s); why != "" {
				notes = append(notes, fmt.Sprintf("%s: %v %s", r.ClusterID, s, why))
				continue
			}
			out = append(out, s)
		}
	}
	slices.SortFunc(out, addrpolicy.ComparePrefix)
	out = slices.Compact(out)
	slices.Sort(notes)
	return out, notes
}

// guard is the agent's own check of a prefix before it routes it, into
// the overlay or unreachable: a valid (not IPv4-mapped), canonical,
// non-default CIDR that never overlaps a local CIDR (routing one would
// take the local pods or services off this node) nor a VIP range (routed
// unreachable here), and contains no node address of this cluster it
// knows (this node's, the active gateway node's: routing one would cut
// the node off the node network, or loop the overlay into itself).
type guard struct {
	local               []netip.Prefix
	vipRange, vipRange6 netip.Prefix
	nodes               []netip.Addr
}

// unsafe says why s must not be routed, or "" when it may.
func (g guard) unsafe(s netip.Prefix) string {
	switch {
	case !s.IsValid() || s.Addr().Is4In6():
		return "is not an IPv4 or IPv6 CIDR"
	case s.Masked() != s || s.Bits() == 0:
		return "is not a canonical, non-default CIDR"
	case slices.ContainsFunc(g.local, s.Overlaps):
		return "overlaps a local CIDR"
	case s.Overlaps(g.vipRange):
		return "overlaps the VIP range " + g.vipRange.String()
	case g.vipRange6.IsValid() && s.Overlaps(g.vipRange6):
		return "overlaps the IPv6 VIP range " + g.vipRange6.String()
	}
	for _, a := range g.nodes {
		if s.Contains(a) {
			return "contains the node address " + a.String()
		}
	}
	return ""
}

// renderRules builds the owned chains for the usable remote subnets.
func renderRules(subnets []netip.Prefix, mss int) Rules {
	var mssRules, fwdRules, natRules []string
	for _, s := range subnets {
		for _, dir := range []string{"-d", "-s"} {
			mssRules = append(mssRules, fmt.Sprintf(
				"%s %s -p tcp -m tcp --tcp-flags SYN,RST SYN -m tcpmss --mss %d:65535 -j TCPMSS --set-mss %d",
				dir, s, mss+1, mss))
		}
	}
	for _, s := range subnets {
		for _, dir := range []string{"-d", "-s"} {
			fwdRules = append(fwdRules, fmt.Sprintf("%s %s -j ACCEPT", dir, s))
		}
	}
	for _, s := range subnets {
		natRules = append(natRules, fmt.Sprintf("-s %s -j ACCEPT", s))
	}
	return Rules{
		Chains: map[string]map[string][]string{
			"mangle": {ChainMSS: mssRules, ChainCanary: nil},
			"filter": {ChainForward: fwdRules},
			"nat":    {ChainNAT: natRules},
		},
		Jumps: []Jump{
			{Table: "mangle", From: "POSTROUTING", To: ChainMSS, Insert: true},
			{Table: "filter", From: "FORWARD", To: ChainForward},
			{Table: "nat", From: "POSTROUTING", To: ChainNAT, Insert: true},
		},
	}
}
