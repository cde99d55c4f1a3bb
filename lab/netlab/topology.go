package netlab

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
)

// Defaults of the address plan (see ../README.md).
var (
	// DefaultWAN is the shared "internet" between gateway nodes: the
	// benchmarking range of RFC 2544.
	DefaultWAN = netip.MustParsePrefix("198.18.0.0/15")
	// DefaultPodCIDR and DefaultServiceCIDR are what clusters with
	// overlapping CIDRs share.
	DefaultPodCIDR     = netip.MustParsePrefix("10.244.0.0/16")
	DefaultServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")
)

// DefaultPrefix is the prefix of every object the lab creates.
const DefaultPrefix = "cwl-"

// WANNamespace is the name (after the prefix) of the shared WAN namespace;
// no cluster may be called like this.
const WANNamespace = "wan"

// Node-side plumbing constants.
const (
	// BridgeName is the bridge in a cluster's switch namespace and in the
	// WAN namespace.
	BridgeName = "br0"
	// NodeLink is a node's interface on its cluster's node network.
	NodeLink = "eth0"
	// NodeWANLink is a gateway node's interface on the WAN.
	NodeWANLink = "wan0"
	// PodLink is a pod's only interface.
	PodLink = "eth0"
)

// PodGateway is the link-local next hop every pod routes through. It is
// not configured on any interface: the pod has a permanent neighbour entry
// mapping it to HostVethMAC, the MAC address of every node-side pod veth
// (the Calico arrangement, without needing proxy ARP).
// PodGateway6 is the IPv6 next hop of pods on dual-stack nodes, mapped
// to HostVethMAC the same way.
var (
	PodGateway  = netip.MustParseAddr("169.254.1.1")
	PodGateway6 = netip.MustParseAddr("fe80::1")
	HostVethMAC = [6]byte{0xee, 0xee, 0xee, 0xee, 0xee, 0xee}
)

// APIAddress is an address every node namespace holds on lo (/32), the
// same on every node: host-network processes reach it locally, pods
// through their default route to the node. The lab kubelet's forwarders
// to the API servers listen on every address of the node, so this is
// where pods find their cluster's API server and the broker.
var APIAddress = netip.MustParseAddr("169.254.64.1")

// Topology is the whole lab as plain data.
type Topology struct {
	// Prefix starts every namespace, cgroup directory, pin and socket name
	// of the lab, e.g. "cwl-".
	Prefix string
	// WAN is the network gateway nodes share; zero value means no WAN
	// namespace.
	WAN      netip.Prefix
	Clusters []Cluster
}

// Cluster is one Kubernetes cluster's node network.
type Cluster struct {
	// Name is a DNS label, e.g. "c1".
	Name string
	// NodeCIDR is the node network, e.g. 172.18.1.0/24.
	NodeCIDR netip.Prefix
	// PodCIDR and ServiceCIDR are the cluster's (they may overlap other
	// clusters').
	PodCIDR     netip.Prefix
	ServiceCIDR netip.Prefix
	// NodeCIDR6, PodCIDR6 and ServiceCIDR6 are set in a dual-stack
	// cluster only (see IPv6 on Node and Pod).
	NodeCIDR6    netip.Prefix `json:",omitzero"`
	PodCIDR6     netip.Prefix `json:",omitzero"`
	ServiceCIDR6 netip.Prefix `json:",omitzero"`
	Nodes        []Node
}

// DualStack tells whether the cluster has IPv6 next to IPv4.
func (c Cluster) DualStack() bool { return c.PodCIDR6.IsValid() }

// PodCIDRs are the cluster's pod CIDRs, IPv4 first (the IPv6 one in a
// dual-stack cluster).
func (c Cluster) PodCIDRs() []netip.Prefix { return c.families(c.PodCIDR, c.PodCIDR6) }

// ServiceCIDRs are the cluster's service CIDRs, IPv4 first.
func (c Cluster) ServiceCIDRs() []netip.Prefix { return c.families(c.ServiceCIDR, c.ServiceCIDR6) }

func (c Cluster) families(v4, v6 netip.Prefix) []netip.Prefix {
	if c.DualStack() {
		return []netip.Prefix{v4, v6}
	}
	return []netip.Prefix{v4}
}

// Node is one node of a cluster.
type Node struct {
	// Name is a DNS label, unique in its cluster, e.g. "n0".
	Name string
	// Address is the node's eth0 address with the node network's length,
	// e.g. 172.18.1.10/24.
	Address netip.Prefix
	// PodCIDR is the node's slice of the cluster's pod CIDR, e.g.
	// 10.244.0.0/24.
	PodCIDR netip.Prefix
	// WANAddress is set on gateway nodes only: the wan0 address with the
	// WAN's length, e.g. 198.18.1.10/15.
	WANAddress netip.Prefix
	// Address6 and PodCIDR6 are the node's in a dual-stack cluster: the
	// eth0 IPv6 address with the node network's length, e.g.
	// fd00:172:18:1::10/64, and the node's slice of the IPv6 pod CIDR,
	// as many addresses as its IPv4 slice, e.g. fd00:10:244:1::/120.
	Address6 netip.Prefix `json:",omitzero"`
	PodCIDR6 netip.Prefix `json:",omitzero"`
}

// PodIP6 is the IPv6 address of the pod whose IPv4 address is ip: the
// node's IPv6 slice plus ip's offset in the IPv4 slice, so a pod's two
// addresses are one allocation. Zero on IPv4-only nodes.
func (n Node) PodIP6(ip netip.Addr) netip.Addr {
	if !n.PodCIDR6.IsValid() || !n.PodCIDR.Contains(ip) {
		return netip.Addr{}
	}
	off := v4uint(ip) - v4uint(n.PodCIDR.Masked().Addr())
	b := n.PodCIDR6.Masked().Addr().As16()
	for i := 15; off > 0; i-- {
		sum := uint32(b[i]) + off&0xff
		b[i] = byte(sum)
		off = off>>8 + sum>>8
	}
	return netip.AddrFrom16(b)
}

func v4uint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// Gateway tells whether the node is attached to the WAN.
func (n Node) Gateway() bool { return n.WANAddress.IsValid() }

// Pod is one pod's network attachment.
type Pod struct {
	Cluster string // cluster name
	Node    string // node name
	// Namespace and Name are the Kubernetes pod's.
	Namespace string
	Name      string
	IP        netip.Addr
	// IP6 is the pod's IPv6 address on a dual-stack node (Node.PodIP6);
	// zero on IPv4-only nodes.
	IP6 netip.Addr
	// MTU of the pod's veth pair; 0 means the kernel default (1500).
	MTU int
}

// ClusterSpec asks for a cluster with the default address plan.
type ClusterSpec struct {
	Name string
	// Index (1..254) numbers the cluster in the node network
	// (172.18.<Index>.0/24) and on the WAN (198.18.<Index>.x).
	Index int
	// PodCIDR and ServiceCIDR default to DefaultPodCIDR and
	// DefaultServiceCIDR.
	PodCIDR     netip.Prefix
	ServiceCIDR netip.Prefix
	// NodePodBits is the length of each node's pod CIDR slice; default 24.
	NodePodBits int
	// Nodes is the number of nodes, named NodeName(i).
	Nodes int
	// Gateways is how many nodes (the first ones) are attached to the WAN.
	Gateways int
	// PodCIDR6 and ServiceCIDR6, when set, make the cluster dual-stack:
	// node i gets eth0 fd00:172:18:<Index>::<10+i>/64 too and slice i of
	// PodCIDR6 with as many addresses as its IPv4 slice.
	PodCIDR6     netip.Prefix
	ServiceCIDR6 netip.Prefix
}

// NodeName is the default name of a cluster's i-th node ("n0", "n1", …).
func NodeName(i int) string { return fmt.Sprintf("n%d", i) }

// NewCluster lays out a cluster with the default address plan: node i has
// eth0 172.18.<Index>.<10+i>/24, pod CIDR slice i of the cluster's pod CIDR
// and, if it is one of the first Gateways nodes, wan0 198.18.<Index>.<10+i>/15.
func NewCluster(s ClusterSpec) (Cluster, error) {
	if s.Index < 1 || s.Index > 254 {
		return Cluster{}, fmt.Errorf("cluster %q: index %d out of 1..254", s.Name, s.Index)
	}
	if s.Nodes < 0 || s.Nodes > 240 {
		return Cluster{}, fmt.Errorf("cluster %q: %d nodes out of 0..240", s.Name, s.Nodes)
	}
	if s.Gateways > s.Nodes {
		return Cluster{}, fmt.Errorf("cluster %q: %d gateways but %d nodes", s.Name, s.Gateways, s.Nodes)
	}
	if !s.PodCIDR.IsValid() {
		s.PodCIDR = DefaultPodCIDR
	}
	if !s.ServiceCIDR.IsValid() {
		s.ServiceCIDR = DefaultServiceCIDR
	}
	if s.NodePodBits == 0 {
		s.NodePodBits = 24
	}
	c := Cluster{
		Name:        s.Name,
		NodeCIDR:    netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 18, byte(s.Index), 0}), 24),
		PodCIDR:     s.PodCIDR.Masked(),
		ServiceCIDR: s.ServiceCIDR.Masked(),
	}
	for i := 0; i < s.Nodes; i++ {
		slice, err := Subnet(c.PodCIDR, s.NodePodBits, i)
		if err != nil {
			return Cluster{}, fmt.Errorf("cluster %q node %d pod CIDR: %w", s.Name, i, err)
		}
		n := Node{
			Name:    NodeName(i),
			Address: netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 18, byte(s.Index), byte(10 + i)}), 24),
			PodCIDR: slice,
		}
		if i < s.Gateways {
			n.WANAddress = netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(s.Index), byte(10 + i)}), DefaultWAN.Bits())
		}
		c.Nodes = append(c.Nodes, n)
	}
	if s.PodCIDR6.IsValid() || s.ServiceCIDR6.IsValid() {
		if err := c.addIPv6(s); err != nil {
			return Cluster{}, err
		}
	}
	return c, nil
}

// addIPv6 gives a laid-out cluster its IPv6 address plan (see ClusterSpec).
func (c *Cluster) addIPv6(s ClusterSpec) error {
	if !s.PodCIDR6.Addr().Is6() || !s.ServiceCIDR6.Addr().Is6() {
		return fmt.Errorf("cluster %q: a dual-stack cluster needs IPv6 pod and service CIDRs (have %s, %s)", s.Name, s.PodCIDR6, s.ServiceCIDR6)
	}
	c.PodCIDR6, c.ServiceCIDR6 = s.PodCIDR6.Masked(), s.ServiceCIDR6.Masked()
	c.NodeCIDR6 = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0x01, 0x72, 0, 0x18, 0, byte(s.Index)}), 64)
	bits := 128 - (32 - s.NodePodBits)
	for i := range c.Nodes {
		slice, err := Subnet6(c.PodCIDR6, bits, i)
		if err != nil {
			return fmt.Errorf("cluster %q node %d IPv6 pod CIDR: %w", s.Name, i, err)
		}
		a := c.NodeCIDR6.Addr().As16()
		a[15] = byte(0x10 + i)
		c.Nodes[i].Address6 = netip.PrefixFrom(netip.AddrFrom16(a), 64)
		c.Nodes[i].PodCIDR6 = slice
	}
	return nil
}

// Subnet6 returns the i-th subnet of length bits inside the IPv6 prefix
// p; i counts within the last 32 bits.
func Subnet6(p netip.Prefix, bits, i int) (netip.Prefix, error) {
	if !p.Addr().Is6() {
		return netip.Prefix{}, fmt.Errorf("%s: not an IPv6 prefix", p)
	}
	if bits < p.Bits() || bits > 128 || bits < 96 {
		return netip.Prefix{}, fmt.Errorf("subnet length /%d does not fit in %s (want /96 to /128)", bits, p)
	}
	if i < 0 || (bits-p.Bits() < 32 && uint64(i) >= uint64(1)<<(bits-p.Bits())) {
		return netip.Prefix{}, fmt.Errorf("subnet %d of length /%d is outside %s", i, bits, p)
	}
	b := p.Masked().Addr().As16()
	v := uint64(b[12])<<24 | uint64(b[13])<<16 | uint64(b[14])<<8 | uint64(b[15])
	v += uint64(i) << (128 - bits)
	if v > 0xffffffff {
		return netip.Prefix{}, fmt.Errorf("subnet %d of length /%d is outside %s", i, bits, p)
	}
	b[12], b[13], b[14], b[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return netip.PrefixFrom(netip.AddrFrom16(b), bits), nil
}

// Subnet returns the i-th subnet of length bits inside p.
func Subnet(p netip.Prefix, bits, i int) (netip.Prefix, error) {
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%s: only IPv4 is supported", p)
	}
	if bits < p.Bits() || bits > 32 {
		return netip.Prefix{}, fmt.Errorf("subnet length /%d does not fit in %s", bits, p)
	}
	if i < 0 || uint64(i) >= uint64(1)<<(bits-p.Bits()) {
		return netip.Prefix{}, fmt.Errorf("subnet %d of length /%d is outside %s", i, bits, p)
	}
	base := p.Masked().Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(i) << (32 - bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), bits), nil
}

// ErrPoolExhausted is returned when a node's pod CIDR has no free address.
var ErrPoolExhausted = errors.New("pod CIDR exhausted")

// AllocatePodIP returns the lowest address of the node's pod CIDR that is
// not in used. The network address, the first host address (.1, reserved
// for node-side use) and the broadcast address are never handed out.
func AllocatePodIP(podCIDR netip.Prefix, used map[netip.Addr]bool) (netip.Addr, error) {
	p := podCIDR.Masked()
	if !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Addr{}, fmt.Errorf("pod CIDR %s: need an IPv4 prefix of length /30 or shorter", podCIDR)
	}
	a := p.Addr().Next().Next()
	for p.Contains(a) {
		next := a.Next()
		if !p.Contains(next) { // a is the broadcast address
			break
		}
		if !used[a] {
			return a, nil
		}
		a = next
	}
	return netip.Addr{}, fmt.Errorf("%s: %w", podCIDR, ErrPoolExhausted)
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,10}-$`)

// Validate checks names, uniqueness and that addresses lie in their
// networks and do not collide where they share a wire.
func (t Topology) Validate() error {
	if !prefixRE.MatchString(t.Prefix) {
		return fmt.Errorf("prefix %q: want lower-case letters and digits ending in '-', at most 12 characters", t.Prefix)
	}
	clusters := map[string]bool{}
	wanAddrs := map[netip.Addr]string{}
	for _, c := range t.Clusters {
		if !dnsLabel.MatchString(c.Name) {
			return fmt.Errorf("cluster name %q is not a DNS label", c.Name)
		}
		if c.Name == WANNamespace {
			return fmt.Errorf("cluster name %q is reserved for the WAN namespace", c.Name)
		}
		if clusters[c.Name] {
			return fmt.Errorf("cluster %q appears twice", c.Name)
		}
		clusters[c.Name] = true
		if err := c.validate(); err != nil {
			return err
		}
		for _, n := range c.Nodes {
			if !n.Gateway() {
				continue
			}
			if !t.WAN.IsValid() {
				return fmt.Errorf("cluster %q node %q: gateway but the topology has no WAN", c.Name, n.Name)
			}
			if !t.WAN.Contains(n.WANAddress.Addr()) || n.WANAddress.Bits() != t.WAN.Bits() {
				return fmt.Errorf("cluster %q node %q: WAN address %s not in %s", c.Name, n.Name, n.WANAddress, t.WAN)
			}
			if other, ok := wanAddrs[n.WANAddress.Addr()]; ok {
				return fmt.Errorf("cluster %q node %q: WAN address %s already used by %s", c.Name, n.Name, n.WANAddress.Addr(), other)
			}
			wanAddrs[n.WANAddress.Addr()] = c.Name + "/" + n.Name
		}
	}
	return nil
}

func (c Cluster) validate() error {
	for _, p := range []netip.Prefix{c.NodeCIDR, c.PodCIDR, c.ServiceCIDR} {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("cluster %q: CIDRs must be valid IPv4 prefixes (node %s, pod %s, service %s)", c.Name, c.NodeCIDR, c.PodCIDR, c.ServiceCIDR)
		}
	}
	if c.PodCIDR.Overlaps(c.ServiceCIDR) || c.PodCIDR.Overlaps(c.NodeCIDR) || c.ServiceCIDR.Overlaps(c.NodeCIDR) {
		return fmt.Errorf("cluster %q: node %s, pod %s and service %s CIDRs overlap", c.Name, c.NodeCIDR, c.PodCIDR, c.ServiceCIDR)
	}
	if err := c.validateIPv6(); err != nil {
		return err
	}
	names := map[string]bool{}
	addrs := map[netip.Addr]string{}
	var slices []netip.Prefix
	for _, n := range c.Nodes {
		if !dnsLabel.MatchString(n.Name) {
			return fmt.Errorf("cluster %q: node name %q is not a DNS label", c.Name, n.Name)
		}
		if names[n.Name] {
			return fmt.Errorf("cluster %q: node %q appears twice", c.Name, n.Name)
		}
		names[n.Name] = true
		if !c.NodeCIDR.Contains(n.Address.Addr()) || n.Address.Bits() != c.NodeCIDR.Bits() {
			return fmt.Errorf("cluster %q node %q: address %s not in node network %s", c.Name, n.Name, n.Address, c.NodeCIDR)
		}
		if other, ok := addrs[n.Address.Addr()]; ok {
			return fmt.Errorf("cluster %q node %q: address %s already used by node %q", c.Name, n.Name, n.Address.Addr(), other)
		}
		addrs[n.Address.Addr()] = n.Name
		if !n.PodCIDR.IsValid() || n.PodCIDR != n.PodCIDR.Masked() || n.PodCIDR.Bits() < c.PodCIDR.Bits() || !c.PodCIDR.Contains(n.PodCIDR.Addr()) {
			return fmt.Errorf("cluster %q node %q: pod CIDR %s not a subnet of %s", c.Name, n.Name, n.PodCIDR, c.PodCIDR)
		}
		for _, s := range slices {
			if s.Overlaps(n.PodCIDR) {
				return fmt.Errorf("cluster %q node %q: pod CIDR %s overlaps %s", c.Name, n.Name, n.PodCIDR, s)
			}
		}
		slices = append(slices, n.PodCIDR)
	}
	return nil
}

// validateIPv6 checks a dual-stack cluster's IPv6 plan: every node has
// an address in NodeCIDR6 and a slice of PodCIDR6 as large as its IPv4
// slice, the slices disjoint; an IPv4-only cluster has no IPv6 at all.
func (c Cluster) validateIPv6() error {
	if !c.DualStack() {
		for _, n := range c.Nodes {
			if n.Address6.IsValid() || n.PodCIDR6.IsValid() {
				return fmt.Errorf("cluster %q node %q: IPv6 addresses in an IPv4-only cluster", c.Name, n.Name)
			}
		}
		if c.NodeCIDR6.IsValid() || c.ServiceCIDR6.IsValid() {
			return fmt.Errorf("cluster %q: IPv6 node or service CIDR without an IPv6 pod CIDR", c.Name)
		}
		return nil
	}
	all := []netip.Prefix{c.NodeCIDR6, c.PodCIDR6, c.ServiceCIDR6}
	for _, p := range all {
		if !p.IsValid() || !p.Addr().Is6() {
			return fmt.Errorf("cluster %q: IPv6 CIDRs must be valid IPv6 prefixes (node %s, pod %s, service %s)", c.Name, c.NodeCIDR6, c.PodCIDR6, c.ServiceCIDR6)
		}
	}
	if c.PodCIDR6.Overlaps(c.ServiceCIDR6) || c.PodCIDR6.Overlaps(c.NodeCIDR6) || c.ServiceCIDR6.Overlaps(c.NodeCIDR6) {
		return fmt.Errorf("cluster %q: IPv6 node %s, pod %s and service %s CIDRs overlap", c.Name, c.NodeCIDR6, c.PodCIDR6, c.ServiceCIDR6)
	}
	addrs := map[netip.Addr]string{}
	var slices []netip.Prefix
	for _, n := range c.Nodes {
		if !c.NodeCIDR6.Contains(n.Address6.Addr()) || n.Address6.Bits() != c.NodeCIDR6.Bits() {
			return fmt.Errorf("cluster %q node %q: IPv6 address %s not in node network %s", c.Name, n.Name, n.Address6, c.NodeCIDR6)
		}
		if other, ok := addrs[n.Address6.Addr()]; ok {
			return fmt.Errorf("cluster %q node %q: IPv6 address %s already used by node %q", c.Name, n.Name, n.Address6.Addr(), other)
		}
		addrs[n.Address6.Addr()] = n.Name
		p := n.PodCIDR6
		if !p.IsValid() || p != p.Masked() || p.Bits() < c.PodCIDR6.Bits() || !c.PodCIDR6.Contains(p.Addr()) ||
			128-p.Bits() != 32-n.PodCIDR.Bits() {
			return fmt.Errorf("cluster %q node %q: IPv6 pod CIDR %s not a subnet of %s as large as %s", c.Name, n.Name, p, c.PodCIDR6, n.PodCIDR)
		}
		for _, s := range slices {
			if s.Overlaps(p) {
				return fmt.Errorf("cluster %q node %q: IPv6 pod CIDR %s overlaps %s", c.Name, n.Name, p, s)
			}
		}
		slices = append(slices, p)
	}
	return nil
}

// Cluster returns the named cluster.
func (t Topology) Cluster(name string) (Cluster, bool) {
	for _, c := range t.Clusters {
		if c.Name == name {
			return c, true
		}
	}
	return Cluster{}, false
}

// Node returns the named node.
func (c Cluster) Node(name string) (Node, bool) {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return Node{}, false
}

// Route is one IPv4 or IPv6 route a node or pod namespace should have in its main
// table.
type Route struct {
	Dst netip.Prefix
	// Via is the next hop; zero for a route straight out of Dev.
	Via netip.Addr
	Dev string
	// Src is the preferred source address; zero for the kernel's choice.
	Src netip.Addr
}

// NodeRoutes is what a node's main table holds besides connected routes:
// every other node's pod CIDR slice via that node's eth0 address, and the
// cluster's service CIDR straight out of eth0 with the node's address as
// source, so that locally originated connections to ClusterIPs get a
// routing decision before kube-proxy's DNAT rewrites them.
func (c Cluster) NodeRoutes(node string) []Route {
	self, ok := c.Node(node)
	if !ok {
		return nil
	}
	var rs []Route
	for _, n := range c.Nodes {
		if n.Name == node {
			continue
		}
		rs = append(rs, Route{Dst: n.PodCIDR, Via: n.Address.Addr(), Dev: NodeLink})
	}
	rs = append(rs, Route{Dst: c.ServiceCIDR, Dev: NodeLink, Src: self.Address.Addr()})
	if !c.DualStack() {
		return rs
	}
	for _, n := range c.Nodes {
		if n.Name != node {
			rs = append(rs, Route{Dst: n.PodCIDR6, Via: n.Address6.Addr(), Dev: NodeLink})
		}
	}
	return append(rs, Route{Dst: c.ServiceCIDR6, Dev: NodeLink, Src: self.Address6.Addr()})
}

// PodRoutes is a pod's main table: the gateway on-link and the default
// route through it; with ipv6, also the IPv6 default route through
// PodGateway6 (link-local, on-link by nature).
func PodRoutes(ipv6 bool) []Route {
	rs := []Route{
		{Dst: netip.PrefixFrom(PodGateway, 32), Dev: PodLink},
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: PodGateway, Dev: PodLink},
	}
	if ipv6 {
		rs = append(rs, Route{Dst: netip.MustParsePrefix("::/0"), Via: PodGateway6, Dev: PodLink})
	}
	return rs
}

// IPv6CIDRs are the IPv6 pod and service CIDRs of the index-th cluster of
// a dual-stack lab: fd00:10:244:<index>::/64 and fd00:10:96:<index>::/112,
// distinct per cluster (globalnet translates IPv4 only, so overlapping
// IPv6 ranges could not be told apart).
func IPv6CIDRs(index int) (pod, service netip.Prefix) {
	pod = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0x02, 0x44, byte(index >> 8), byte(index)}), 64)
	service = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0, 0x96, byte(index >> 8), byte(index)}), 112)
	return pod, service
}

// Third-cluster CIDRs of the default lab: different from the pair c1 and
// c2 share.
var (
	AltPodCIDR     = netip.MustParsePrefix("10.245.0.0/16")
	AltServiceCIDR = netip.MustParsePrefix("10.97.0.0/16")
)

// DefaultTopology is the lab `causeway-lab up` builds by default:
// clusters c1 and c2 with identical pod and service CIDRs (DefaultPodCIDR,
// DefaultServiceCIDR), c3 with AltPodCIDR and AltServiceCIDR, each with
// nodes nodes of which the first is a gateway on DefaultWAN.
func DefaultTopology(prefix string, nodes int) (Topology, error) {
	if nodes < 1 {
		return Topology{}, fmt.Errorf("need at least one node per cluster, got %d", nodes)
	}
	t := Topology{Prefix: prefix, WAN: DefaultWAN}
	for i, s := range []ClusterSpec{
		{Name: "c1", PodCIDR: DefaultPodCIDR, ServiceCIDR: DefaultServiceCIDR},
		{Name: "c2", PodCIDR: DefaultPodCIDR, ServiceCIDR: DefaultServiceCIDR},
		{Name: "c3", PodCIDR: AltPodCIDR, ServiceCIDR: AltServiceCIDR},
	} {
		s.Index, s.Nodes, s.Gateways = i+1, nodes, 1
		c, err := NewCluster(s)
		if err != nil {
			return Topology{}, err
		}
		t.Clusters = append(t.Clusters, c)
	}
	if err := t.Validate(); err != nil {
		return Topology{}, err
	}
	return t, nil
}
