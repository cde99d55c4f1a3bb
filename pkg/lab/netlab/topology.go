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
var (
	PodGateway  = netip.MustParseAddr("169.254.1.1")
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
	Nodes       []Node
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
	return c, nil
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

// Route is one IPv4 route a node or pod namespace should have in its main
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
	return rs
}

// PodRoutes is a pod's main table: the gateway on-link and the default
// route through it.
func PodRoutes() []Route {
	return []Route{
		{Dst: netip.PrefixFrom(PodGateway, 32), Dev: PodLink},
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Via: PodGateway, Dev: PodLink},
	}
}

// Third-cluster CIDRs of the default lab: different from the pair c1 and
// c2 share.
var (
	AltPodCIDR     = netip.MustParsePrefix("10.245.0.0/16")
	AltServiceCIDR = netip.MustParsePrefix("10.97.0.0/16")
)

// DefaultTopology is the lab `causewayctl lab up` builds by default:
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
