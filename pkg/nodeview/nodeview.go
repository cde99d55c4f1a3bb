// Package nodeview is what one node holds for Causeway, as the daemons'
// `inspect` command prints it (JSON) and causewayctl reads it through
// pods/exec: links and addresses, routes of every table, policy rules,
// neighbours and FDB, WireGuard peers, IPsec SAs, Causeway's nftables
// tables and iptables chains with their counters, and the pinned VIP
// maps. Package inspect fills it from the kernel; this package has the
// types, lookups and the conversion of the VIP table to and from the
// datapath's form (package vip).
package nodeview

import (
	"strings"
	"time"
)

// Node is one node's view.
type Node struct {
	// Hostname is the node's kernel hostname (in the lab, the host's).
	Hostname string    `json:"hostname"`
	Time     time.Time `json:"time"`
	// Sysctls are the forwarding and reverse-path settings Causeway
	// depends on, by name ("net.ipv4.ip_forward": "1").
	Sysctls    map[string]string `json:"sysctls"`
	Links      []Link            `json:"links"`
	Routes     []Route           `json:"routes"`
	Rules      []Rule            `json:"rules"`
	Neighbours []Neighbour       `json:"neighbours"`
	FDB        []FDBEntry        `json:"fdb"`
	WireGuard  []WireGuardDevice `json:"wireguard"`
	IPsec      []IPsecSA         `json:"ipsec"`
	// Nftables are the nftables tables whose name starts with
	// "causeway", as `nft list table` prints them (with counters).
	Nftables []NftTable `json:"nftables"`
	// Iptables are the iptables chains whose name starts with
	// "CAUSEWAY-" and the rules of other chains that jump to them, with
	// their counters.
	Iptables []IptablesChain `json:"iptables"`
	// VIPs are the entries of the VIP datapath's pinned maps (none when
	// the node has no pinned maps).
	VIPs []VIP `json:"vips"`
	// Errors name the parts that could not be read, and why.
	Errors []string `json:"errors,omitempty"`
}

// Link is a network device.
type Link struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"` // "veth", "vxlan", "wireguard", "tun", "device", …
	MTU    int    `json:"mtu"`
	Up     bool   `json:"up"`
	Master string `json:"master,omitempty"`
	// Addrs are the link's addresses in CIDR form.
	Addrs []string `json:"addrs,omitempty"`
	// VXLAN: the VNI and UDP port.
	VNI  int `json:"vni,omitempty"`
	Port int `json:"port,omitempty"`
	// Counters.
	RxBytes   uint64 `json:"rxBytes"`
	TxBytes   uint64 `json:"txBytes"`
	RxPackets uint64 `json:"rxPackets"`
	TxPackets uint64 `json:"txPackets"`
}

// Route is a route of any table.
type Route struct {
	Table  int    `json:"table"`
	Type   string `json:"type"` // "unicast", "unreachable", "local", …
	Dst    string `json:"dst"`
	Gw     string `json:"gw,omitempty"`
	Dev    string `json:"dev,omitempty"`
	Src    string `json:"src,omitempty"`
	Proto  int    `json:"proto"`
	Metric int    `json:"metric,omitempty"`
	MTU    int    `json:"mtu,omitempty"`
}

// Rule is a policy routing rule.
type Rule struct {
	Family   string `json:"family"` // "inet" or "inet6"
	Priority int    `json:"priority"`
	Table    int    `json:"table"`
	Src      string `json:"src,omitempty"`
	Dst      string `json:"dst,omitempty"`
	Mark     string `json:"mark,omitempty"` // "0x10/0xff"
}

// Neighbour is a neighbour (ARP/NDP) entry that resolves an address
// (NOARP entries are left out, as ip neigh does).
type Neighbour struct {
	Dev   string `json:"dev"`
	IP    string `json:"ip"`
	MAC   string `json:"mac,omitempty"`
	State string `json:"state"`
}

// FDBEntry is a forwarding entry with a remote (VXLAN: MAC → remote
// node).
type FDBEntry struct {
	Dev string `json:"dev"`
	MAC string `json:"mac"`
	Dst string `json:"dst"`
}

// WireGuardDevice is a WireGuard device and its peers.
type WireGuardDevice struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"` // "Linux kernel" or "userspace"
	PublicKey  string          `json:"publicKey"`
	ListenPort int             `json:"listenPort"`
	Peers      []WireGuardPeer `json:"peers"`
}

// WireGuardPeer is one peer of a WireGuard device.
type WireGuardPeer struct {
	PublicKey  string   `json:"publicKey"`
	Endpoint   string   `json:"endpoint,omitempty"`
	AllowedIPs []string `json:"allowedIPs"`
	// LastHandshake is zero before the first handshake.
	LastHandshake time.Time `json:"lastHandshake"`
	// HandshakeAgeSeconds is -1 before the first handshake.
	HandshakeAgeSeconds float64 `json:"handshakeAgeSeconds"`
	RxBytes             int64   `json:"rxBytes"`
	TxBytes             int64   `json:"txBytes"`
}

// IPsecSA is a kernel (xfrm) security association.
type IPsecSA struct {
	Src     string `json:"src"`
	Dst     string `json:"dst"`
	Proto   string `json:"proto"`
	Mode    string `json:"mode"`
	SPI     string `json:"spi"`
	Bytes   uint64 `json:"bytes"`
	Packets uint64 `json:"packets"`
}

// NftTable is one nftables table as `nft list table` prints it.
type NftTable struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	Text   string `json:"text"`
}

// IptablesChain is a Causeway chain of one iptables table, or, with
// Jumps, the builtin chain rules that lead to Causeway's chains.
type IptablesChain struct {
	Family string `json:"family"` // "ipv4" or "ipv6"
	Table  string `json:"table"`
	Chain  string `json:"chain"`
	// Rules are the chain's rules as iptables-save -c prints them
	// ("[packets:bytes] -A CHAIN …").
	Rules []string `json:"rules"`
}

// VIP is one entry of the VIP datapath's maps.
type VIP struct {
	VIP      string       `json:"vip"` // address
	Port     uint16       `json:"port"`
	Protocol string       `json:"protocol"` // "TCP" or "UDP"
	Backends []VIPBackend `json:"backends"`
	// AffinitySeconds is the ClientIP session affinity timeout (0: none).
	AffinitySeconds uint32 `json:"affinitySeconds,omitempty"`
}

// VIPBackend is one backend and its weight.
type VIPBackend struct {
	Address string `json:"address"` // ip:port
	Weight  uint32 `json:"weight"`
}

// Link returns the link named name.
func (n *Node) Link(name string) (Link, bool) {
	for _, l := range n.Links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}

// JumpsTo reports whether a builtin chain of the node's iptables jumps to
// chain.
func (n *Node) JumpsTo(chain string) bool {
	for _, c := range n.Iptables {
		if strings.HasPrefix(c.Chain, "CAUSEWAY-") {
			continue
		}
		for _, r := range c.Rules {
			if strings.Contains(r+" ", " -j "+chain+" ") {
				return true
			}
		}
	}
	return false
}

// Nft returns the nftables table family/name.
func (n *Node) Nft(family, name string) (NftTable, bool) {
	for _, t := range n.Nftables {
		if t.Family == family && t.Name == name {
			return t, true
		}
	}
	return NftTable{}, false
}
