package nat

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// TableName is the one nftables table globalnet owns (family ip). Nothing
// else of the node's ruleset is ever read or written.
const TableName = "causeway-globalnet"

// Chain and set names inside TableName.
const (
	ChainIngress = "ingress" // filter, prerouting, raw - 10: global → ClusterIP / pod
	ChainReply   = "reply"   // filter, postrouting, srcnat + 10: back to global
	ChainEgress  = "egress"  // nat, postrouting, srcnat - 10: SNAT to an egress IP
	ChainCanary  = "canary"  // empty; its absence means someone removed the table

	SetRemote = "remote"  // interval set of remote clusters' global CIDRs
	SetLocal  = "local"   // interval set of this cluster's global CIDRs
	MapPodIn  = "pod-in"  // global IP : pod IP
	MapPodOut = "pod-out" // pod IP : global IP
)

// protocols the stateless port rewrite handles (Ingress.Protocol), in
// rendering order. nft rewrites the TCP and UDP checksums (pseudo-header
// and port) and recomputes SCTP's CRC32c. Read only.
var protocols = []string{"tcp", "udp", "sctp"}

// Per-protocol map names, e.g. "tcp-in-addr".
const (
	suffixInAddr  = "-in-addr"  // global IP . global port : ClusterIP
	suffixInPort  = "-in-port"  // ClusterIP . global port : service port
	suffixOutPort = "-out-port" // ClusterIP . service port : global port
	suffixOutAddr = "-out-addr" // ClusterIP . global port : global IP
)

// Ingress is one exported service port: packets to Global are rewritten
// to Target (the Service's ClusterIP:port) before conntrack, replies from
// Target to remote clusters back to Global.
type Ingress struct {
	Protocol string // "tcp", "udp" or "sctp"
	Global   netip.AddrPort
	Target   netip.AddrPort
}

// PodIngress is a headless Service's backing pod reachable 1:1 at Global;
// the pod's traffic to remote clusters leaves with Global as its source.
type PodIngress struct{ Global, Pod netip.Addr }

// Config is the whole desired translation of the active gateway.
type Config struct {
	// LocalGlobal is this cluster's global CIDR(s): sources in it are
	// never SNATed.
	LocalGlobal []netip.Prefix
	// Remote is the remote clusters' global CIDRs, reached through the
	// tunnel. Only traffic to them is SNATed or rewritten back.
	Remote []netip.Prefix
	// Egress is the SNAT source range (Layout.Egress): ascending,
	// contiguous. Empty: no egress SNAT.
	Egress  []netip.Addr
	Ingress []Ingress
	Pods    []PodIngress
}

func (c Config) equal(o Config) bool {
	return slices.Equal(c.LocalGlobal, o.LocalGlobal) && slices.Equal(c.Remote, o.Remote) && slices.Equal(c.Egress, o.Egress) &&
		slices.Equal(c.Ingress, o.Ingress) && slices.Equal(c.Pods, o.Pods)
}

// clone copies c's slices, so a caller reusing them cannot change what
// Table believes it applied.
func (c Config) clone() Config {
	return Config{LocalGlobal: slices.Clone(c.LocalGlobal), Remote: slices.Clone(c.Remote), Egress: slices.Clone(c.Egress),
		Ingress: slices.Clone(c.Ingress), Pods: slices.Clone(c.Pods)}
}

// Validate reports whether c would be accepted by Table.Sync (the same
// checks, without touching the kernel).
func (c Config) Validate() error {
	_, err := c.compile()
	return err
}

// ErrConfig is wrapped by every validation error of a Config.
var ErrConfig = errors.New("invalid globalnet config")

// desired is a validated Config as nftables elements: the chains are
// fixed except for the SNAT range, so two desired values differ in snat
// (a full sync) or in elements only (an incremental one).
type desired struct {
	snat string // "a-b", or "" for no egress SNAT
	// elems: set or map name → packed key → packed value (0 for sets).
	// Every set and map of the table has an entry, possibly empty. Keys
	// and values are packed integers (see elemKinds) so that compiling
	// and diffing 10 000s of elements stays in the low milliseconds.
	elems map[string]map[uint64]uint32
}

// elemKind says how a set's or map's packed keys and values print.
type elemKind int

const (
	kindPrefix       elemKind = iota // key addr<<8|bits, no value
	kindAddrAddr                     // key addr, value addr
	kindAddrPortAddr                 // key addr<<16|port, value addr
	kindAddrPortPort                 // key addr<<16|port, value port
)

func elemKinds() map[string]elemKind {
	k := map[string]elemKind{SetRemote: kindPrefix, SetLocal: kindPrefix, MapPodIn: kindAddrAddr, MapPodOut: kindAddrAddr}
	for _, p := range protocols {
		k[p+suffixInAddr] = kindAddrPortAddr
		k[p+suffixInPort] = kindAddrPortPort
		k[p+suffixOutPort] = kindAddrPortPort
		k[p+suffixOutAddr] = kindAddrPortAddr
	}
	return k
}

func setNames() []string {
	names := []string{SetRemote, SetLocal, MapPodIn, MapPodOut}
	for _, p := range protocols {
		names = append(names, p+suffixInAddr, p+suffixInPort, p+suffixOutPort, p+suffixOutAddr)
	}
	return names
}

func packAddrPort(a netip.Addr, port uint16) uint64 { return uint64(addrIndex(a))<<16 | uint64(port) }

// elementCount is the number of elements of d.
func (d *desired) elementCount() int {
	n := 0
	for _, m := range d.elems {
		n += len(m)
	}
	return n
}

// strings is d's elements as nft prints them (key → value, "" for sets).
func (d *desired) strings() map[string]map[string]string {
	kinds := elemKinds()
	out := map[string]map[string]string{}
	for name, m := range d.elems {
		out[name] = map[string]string{}
		for k, v := range m {
			var b strings.Builder
			writeKey(&b, kinds[name], k)
			key := b.String()
			b.Reset()
			writeValue(&b, kinds[name], v)
			out[name][key] = b.String()
		}
	}
	return out
}

// compile validates c and turns it into elements. It refuses a Config
// whose maps would be ambiguous: the allocator's invariant (all global
// ports of one ClusterIP on one global IP, distinct) is checked here, so
// a caller bug cannot make a reply leave with the wrong global address.
func (c Config) compile() (*desired, error) {
	d := &desired{elems: map[string]map[uint64]uint32{}}
	for _, n := range setNames() {
		d.elems[n] = map[uint64]uint32{}
	}
	for _, set := range []struct {
		name string
		in   []netip.Prefix
	}{{SetRemote, c.Remote}, {SetLocal, c.LocalGlobal}} {
		ps, err := disjoint(set.in)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, set.name, err)
		}
		for _, p := range ps {
			d.elems[set.name][uint64(addrIndex(p.Addr()))<<8|uint64(p.Bits())] = 0
		}
	}
	// A global address outside our own CIDRs would capture traffic meant
	// for another cluster (or leave unanswerable), so every one must be local.
	localPs, _ := disjoint(c.LocalGlobal) // validated above
	local := func(a netip.Addr) bool {
		for _, p := range localPs {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	if len(c.Egress) > 0 {
		for i, a := range c.Egress {
			if !a.Is4() || !local(a) {
				return nil, fmt.Errorf("%w: egress %s is not an IPv4 address in the local global CIDRs", ErrConfig, a)
			}
			if i > 0 && a != c.Egress[i-1].Next() {
				return nil, fmt.Errorf("%w: egress IPs %v not ascending and contiguous", ErrConfig, c.Egress)
			}
		}
		d.snat = c.Egress[0].String() + "-" + c.Egress[len(c.Egress)-1].String()
	}
	perProto := map[string]int{}
	for _, in := range c.Ingress {
		perProto[in.Protocol]++
	}
	byProto := map[string][4]map[uint64]uint32{}
	for _, p := range protocols {
		var ms [4]map[uint64]uint32
		for i, suffix := range []string{suffixInAddr, suffixInPort, suffixOutPort, suffixOutAddr} {
			ms[i] = make(map[uint64]uint32, perProto[p])
			d.elems[p+suffix] = ms[i]
		}
		byProto[p] = ms
	}
	suffixes := [4]string{suffixInAddr, suffixInPort, suffixOutPort, suffixOutAddr}
	for _, in := range c.Ingress {
		ms, ok := byProto[in.Protocol]
		if !ok {
			return nil, fmt.Errorf("%w: ingress %s: protocol %q (want one of %v)", ErrConfig, in.Global, in.Protocol, protocols)
		}
		if !in.Global.Addr().Is4() || !in.Target.Addr().Is4() || in.Global.Port() == 0 || in.Target.Port() == 0 {
			return nil, fmt.Errorf("%w: ingress %s %s -> %s: want IPv4 addresses and non-zero ports", ErrConfig, in.Protocol, in.Global, in.Target)
		}
		gip, gport := in.Global.Addr(), in.Global.Port()
		if !local(gip) {
			return nil, fmt.Errorf("%w: ingress %s %s is not in the local global CIDRs %v", ErrConfig, in.Protocol, in.Global, c.LocalGlobal)
		}
		cip, cport := in.Target.Addr(), in.Target.Port()
		for i, e := range [4]struct {
			key uint64
			val uint32
		}{
			{packAddrPort(gip, gport), addrIndex(cip)},
			{packAddrPort(cip, gport), uint32(cport)},
			{packAddrPort(cip, cport), uint32(gport)},
			{packAddrPort(cip, gport), addrIndex(gip)},
		} {
			if old, ok := ms[i][e.key]; ok && old != e.val {
				return nil, fmt.Errorf("%w: ingress %s %s -> %s: %s%s has key %s already, with another value (every ClusterIP's global ports must be distinct and on one global IP)",
					ErrConfig, in.Protocol, in.Global, in.Target, in.Protocol, suffixes[i], keyString(kindAddrPortPort, e.key))
			}
			ms[i][e.key] = e.val
		}
	}
	for _, p := range c.Pods {
		if !p.Global.Is4() || !p.Pod.Is4() {
			return nil, fmt.Errorf("%w: pod %s <-> %s: want IPv4", ErrConfig, p.Global, p.Pod)
		}
		if !local(p.Global) {
			return nil, fmt.Errorf("%w: pod %s <-> %s: global IP not in the local global CIDRs %v", ErrConfig, p.Global, p.Pod, c.LocalGlobal)
		}
		for _, e := range []struct {
			name     string
			key, val uint32
		}{
			{MapPodIn, addrIndex(p.Global), addrIndex(p.Pod)},
			{MapPodOut, addrIndex(p.Pod), addrIndex(p.Global)},
		} {
			if old, ok := d.elems[e.name][uint64(e.key)]; ok && old != e.val {
				return nil, fmt.Errorf("%w: pod %s <-> %s: %s has key %s already, mapped to %s", ErrConfig, p.Global, p.Pod, e.name, addrFromIndex(e.key), addrFromIndex(old))
			}
			d.elems[e.name][uint64(e.key)] = e.val
		}
	}
	// A global IP is either 1:1 or carries ports, never both.
	for _, proto := range protocols {
		for key := range d.elems[proto+suffixInAddr] {
			if pod, ok := d.elems[MapPodIn][key>>16]; ok {
				return nil, fmt.Errorf("%w: global IP %s is 1:1 for pod %s and carries %s ports", ErrConfig, addrFromIndex(uint32(key>>16)), addrFromIndex(pod), proto)
			}
		}
	}
	return d, nil
}

// disjoint validates ps (IPv4, canonical), drops duplicates and prefixes
// inside others (an nftables interval set refuses overlaps), and sorts.
func disjoint(ps []netip.Prefix) ([]netip.Prefix, error) {
	s := slices.Clone(ps)
	for _, p := range s {
		if !p.IsValid() || !p.Addr().Is4() || p.Masked() != p {
			return nil, fmt.Errorf("prefix %s: want canonical IPv4", p)
		}
	}
	slices.SortFunc(s, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits() // wider first
	})
	var out []netip.Prefix
	for _, p := range s {
		if n := len(out); n > 0 && out[n-1].Overlaps(p) {
			continue // sorted, wider first: p lies inside out[n-1]
		}
		out = append(out, p)
	}
	return out, nil
}
