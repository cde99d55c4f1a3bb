package nat

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
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

	SetRemote = "remote" // interval set of remote clusters' global CIDRs
	// SetRemoteEgress is the remote clusters' egress addresses
	// (Config.RemoteEgress) as /32s: only SNAT sources, never a
	// connection's destination.
	SetRemoteEgress = "remote-egress"
	SetLocal        = "local"   // interval set of this cluster's global CIDRs
	MapPodIn        = "pod-in"  // global IP : pod IP
	MapPodOut       = "pod-out" // pod IP : global IP
	// MapPodEgress is pod IP : the global egress IP of the pod's
	// namespace (Config.PodEgress): the SNAT source of its traffic to
	// remote clusters instead of the cluster-wide egress range.
	MapPodEgress = "pod-egress"
)

// Protocols the stateless port rewrite handles (Ingress.Protocol), in
// rendering order. nft rewrites the TCP and UDP checksums (pseudo-header
// and port) and recomputes SCTP's CRC32c. Read only.
var Protocols = []string{"tcp", "udp", "sctp"}

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

// PodEgress is a pod of a namespace with its own global egress IP: the
// pod's connections to remote clusters leave with Global as their
// source instead of one of Config.Egress.
type PodEgress struct{ Pod, Global netip.Addr }

// Config is the whole desired translation of the active gateway.
type Config struct {
	// LocalGlobal is this cluster's global CIDR(s): sources in it are
	// never SNATed.
	LocalGlobal []netip.Prefix
	// Remote is the remote clusters' global CIDRs, reached through the
	// tunnel. Only traffic to them is SNATed or rewritten back.
	Remote []netip.Prefix
	// RemoteEgress is the remote clusters' SNAT source addresses (IPv4,
	// each inside Remote): traffic from them is a reply path, never a
	// new connection to translate.
	RemoteEgress []netip.Addr
	// Egress is the SNAT source range (Layout.Egress): ascending,
	// contiguous. Empty: no egress SNAT.
	Egress  []netip.Addr
	Ingress []Ingress
	Pods    []PodIngress
	// PodEgress are the pods SNATed to their namespace's global egress
	// IP (one entry per pod; a pod of Pods keeps its own global IP).
	PodEgress []PodEgress
	// Device, when set, is the tunnel device: the table then translates
	// only what arrives through it (ingress) or leaves through it
	// (reply, egress). A table a killed gateway left behind touches
	// nothing once its device is gone (the embedded WireGuard device
	// dies with its process): the node's pods reach remotes through the
	// new active's overlay untouched. Every rule carries it, so a change
	// is a full sync. The gateway always sets it; "" matches any device.
	Device string
}

func (c Config) equal(o Config) bool {
	return slices.Equal(c.LocalGlobal, o.LocalGlobal) && slices.Equal(c.Remote, o.Remote) && slices.Equal(c.RemoteEgress, o.RemoteEgress) && slices.Equal(c.Egress, o.Egress) &&
		slices.Equal(c.Ingress, o.Ingress) && slices.Equal(c.Pods, o.Pods) && slices.Equal(c.PodEgress, o.PodEgress) && c.Device == o.Device
}

// clone copies c's slices, so a caller reusing them cannot change what
// Table believes it applied.
func (c Config) clone() Config {
	return Config{LocalGlobal: slices.Clone(c.LocalGlobal), Remote: slices.Clone(c.Remote), RemoteEgress: slices.Clone(c.RemoteEgress), Egress: slices.Clone(c.Egress),
		Ingress: slices.Clone(c.Ingress), Pods: slices.Clone(c.Pods), PodEgress: slices.Clone(c.PodEgress), Device: c.Device}
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
// fixed except for the SNAT range and the device, so two desired values
// differ in snat or device (a full sync) or in elements only (an
// incremental one).
type desired struct {
	snat   string // "a-b", or "" for no egress SNAT
	device string // Config.Device
	// elems: set or map name → its elements sorted by key, keys unique.
	// Every set and map of the table has an entry, possibly empty. Keys
	// and values are packed integers (see elemKinds) and diffs are merges
	// of sorted slices, so compiling and diffing 10 000s of elements stays
	// in the low milliseconds.
	elems map[string][]elem
}

// elem is one packed element: key and value (0 for sets).
type elem struct {
	k uint64
	v uint32
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
	k := map[string]elemKind{SetRemote: kindPrefix, SetRemoteEgress: kindPrefix, SetLocal: kindPrefix, MapPodIn: kindAddrAddr, MapPodOut: kindAddrAddr, MapPodEgress: kindAddrAddr}
	for _, p := range Protocols {
		k[p+suffixInAddr] = kindAddrPortAddr
		k[p+suffixInPort] = kindAddrPortPort
		k[p+suffixOutPort] = kindAddrPortPort
		k[p+suffixOutAddr] = kindAddrPortAddr
	}
	return k
}

func setNames() []string {
	names := []string{SetRemote, SetRemoteEgress, SetLocal, MapPodIn, MapPodOut, MapPodEgress}
	for _, p := range Protocols {
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

// compile validates c and turns it into elements. It refuses a Config
// whose maps would be ambiguous: the allocator's invariant (all global
// ports of one ClusterIP on one global IP, distinct) is checked here, so
// a caller bug cannot make a reply leave with the wrong global address.
func (c Config) compile() (*desired, error) {
	if !validDevice(c.Device) {
		return nil, fmt.Errorf("%w: device %q: want at most 15 letters, digits, '.', '_' or '-'", ErrConfig, c.Device)
	}
	d := &desired{elems: map[string][]elem{}, device: c.Device}
	for _, set := range []struct {
		name string
		in   []netip.Prefix
	}{{SetRemote, c.Remote}, {SetLocal, c.LocalGlobal}} {
		ps, err := disjoint(set.in)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, set.name, err)
		}
		for _, p := range ps {
			d.elems[set.name] = append(d.elems[set.name], elem{k: uint64(addrIndex(p.Addr()))<<8 | uint64(p.Bits())})
		}
	}
	// The remote clusters' egress addresses, each inside a remote CIDR.
	remotePs, _ := disjoint(c.Remote) // validated above
	for _, a := range c.RemoteEgress {
		if !a.Is4() || !slices.ContainsFunc(remotePs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			return nil, fmt.Errorf("%w: remote egress address %s is not an IPv4 address of a remote CIDR", ErrConfig, a)
		}
		d.elems[SetRemoteEgress] = append(d.elems[SetRemoteEgress], elem{k: uint64(addrIndex(a))<<8 | 32})
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
	byProto := map[string]*[4][]elem{}
	for _, p := range Protocols {
		var es [4][]elem
		for i := range es {
			es[i] = make([]elem, 0, perProto[p])
		}
		byProto[p] = &es
	}
	for _, in := range c.Ingress {
		es, ok := byProto[in.Protocol]
		if !ok {
			return nil, fmt.Errorf("%w: ingress %s: protocol %q (want one of %v)", ErrConfig, in.Global, in.Protocol, Protocols)
		}
		if !in.Global.Addr().Is4() || !in.Target.Addr().Is4() || in.Global.Port() == 0 || in.Target.Port() == 0 {
			return nil, fmt.Errorf("%w: ingress %s %s -> %s: want IPv4 addresses and non-zero ports", ErrConfig, in.Protocol, in.Global, in.Target)
		}
		gip, gport := in.Global.Addr(), in.Global.Port()
		if !local(gip) {
			return nil, fmt.Errorf("%w: ingress %s %s is not in the local global CIDRs %v", ErrConfig, in.Protocol, in.Global, c.LocalGlobal)
		}
		cip, cport := in.Target.Addr(), in.Target.Port()
		es[0] = append(es[0], elem{packAddrPort(gip, gport), addrIndex(cip)})
		es[1] = append(es[1], elem{packAddrPort(cip, gport), uint32(cport)})
		es[2] = append(es[2], elem{packAddrPort(cip, cport), uint32(gport)})
		es[3] = append(es[3], elem{packAddrPort(cip, gport), addrIndex(gip)})
	}
	for _, p := range Protocols {
		for i, suffix := range []string{suffixInAddr, suffixInPort, suffixOutPort, suffixOutAddr} {
			d.elems[p+suffix] = byProto[p][i]
		}
	}
	for _, p := range c.Pods {
		if !p.Global.Is4() || !p.Pod.Is4() {
			return nil, fmt.Errorf("%w: pod %s <-> %s: want IPv4", ErrConfig, p.Global, p.Pod)
		}
		if !local(p.Global) {
			return nil, fmt.Errorf("%w: pod %s <-> %s: global IP not in the local global CIDRs %v", ErrConfig, p.Global, p.Pod, c.LocalGlobal)
		}
		d.elems[MapPodIn] = append(d.elems[MapPodIn], elem{uint64(addrIndex(p.Global)), addrIndex(p.Pod)})
		d.elems[MapPodOut] = append(d.elems[MapPodOut], elem{uint64(addrIndex(p.Pod)), addrIndex(p.Global)})
	}
	for _, p := range c.PodEgress {
		if !p.Global.Is4() || !p.Pod.Is4() {
			return nil, fmt.Errorf("%w: pod egress %s -> %s: want IPv4", ErrConfig, p.Pod, p.Global)
		}
		if !local(p.Global) {
			return nil, fmt.Errorf("%w: pod egress %s -> %s: global IP not in the local global CIDRs %v", ErrConfig, p.Pod, p.Global, c.LocalGlobal)
		}
		d.elems[MapPodEgress] = append(d.elems[MapPodEgress], elem{uint64(addrIndex(p.Pod)), addrIndex(p.Global)})
	}
	kinds := elemKinds()
	for _, name := range setNames() {
		es, conflict := sortUnique(d.elems[name])
		if conflict != nil {
			return nil, fmt.Errorf("%w: %s: %s (every ClusterIP's global ports must be distinct and on one global IP, every pod and global IP 1:1)",
				ErrConfig, name, conflict.describe(kinds[name]))
		}
		d.elems[name] = es
	}
	// A global IP is either 1:1, carries ports or is a namespace's
	// egress source, never two of them.
	pods := d.elems[MapPodIn]
	for _, proto := range Protocols {
		for _, e := range d.elems[proto+suffixInAddr] {
			if i, ok := slices.BinarySearchFunc(pods, e.k>>16, func(p elem, k uint64) int { return cmp.Compare(p.k, k) }); ok {
				return nil, fmt.Errorf("%w: global IP %s is 1:1 for pod %s and carries %s ports", ErrConfig, addrFromIndex(uint32(e.k>>16)), addrFromIndex(pods[i].v), proto)
			}
		}
	}
	if len(d.elems[MapPodEgress]) > 0 {
		used := map[uint32]string{}
		for _, e := range pods {
			used[uint32(e.k)] = "1:1 for a pod"
		}
		for _, proto := range Protocols {
			for _, e := range d.elems[proto+suffixInAddr] {
				used[uint32(e.k>>16)] = "carrying " + proto + " ports"
			}
		}
		for _, e := range d.elems[MapPodEgress] {
			if use, ok := used[e.v]; ok {
				return nil, fmt.Errorf("%w: global IP %s is a namespace's egress source and %s", ErrConfig, addrFromIndex(e.v), use)
			}
		}
	}
	return d, nil
}

// validDevice reports whether name is "" or an interface name nft can
// match unquoted-safe (Linux allows up to 15 bytes).
func validDevice(name string) bool {
	if len(name) > 15 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// keyConflict is one key given two values.
type keyConflict struct {
	k    uint64
	a, b uint32
}

func (c *keyConflict) describe(kind elemKind) string {
	return fmt.Sprintf("key %s has two values, %s and %s",
		strings.Join(keyFields(kind, c.k), " . "), strings.Join(valueFields(kind, c.a), " . "), strings.Join(valueFields(kind, c.b), " . "))
}

// keyFields is the packed key k as nft writes it, one string per
// concatenated field (a knftables.Element's Key).
func keyFields(kind elemKind, k uint64) []string {
	switch kind {
	case kindPrefix:
		return []string{netip.PrefixFrom(addrFromIndex(uint32(k>>8)), int(k&0xff)).String()}
	case kindAddrAddr:
		return []string{addrFromIndex(uint32(k)).String()}
	default:
		return []string{addrFromIndex(uint32(k >> 16)).String(), strconv.Itoa(int(k & 0xffff))}
	}
}

// valueFields is the packed value v as nft writes it (a
// knftables.Element's Value); nil for a set.
func valueFields(kind elemKind, v uint32) []string {
	switch kind {
	case kindPrefix:
		return nil
	case kindAddrPortPort:
		return []string{strconv.Itoa(int(v))}
	default:
		return []string{addrFromIndex(v).String()}
	}
}

// sortUnique sorts es by key in place and drops exact duplicates; a key
// with two values is a conflict.
func sortUnique(es []elem) ([]elem, *keyConflict) {
	sortElems(es)
	out := es[:0]
	for _, e := range es {
		if n := len(out); n > 0 && out[n-1].k == e.k {
			if out[n-1].v != e.v {
				return nil, &keyConflict{k: e.k, a: min(out[n-1].v, e.v), b: max(out[n-1].v, e.v)}
			}
			continue
		}
		out = append(out, e)
	}
	return out, nil
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

// sortElems sorts es by key (keys use at most 48 bits) with an LSD radix
// sort over bytes, skipping bytes all keys share: several times faster
// than a comparison sort at 10 000s of elements, which is what a Sync at
// that size spends most of its Go time on.
func sortElems(es []elem) {
	if len(es) < 256 {
		slices.SortFunc(es, func(a, b elem) int { return cmp.Compare(a.k, b.k) })
		return
	}
	src, dst := es, make([]elem, len(es))
	for shift := 0; shift < 48; shift += 8 {
		var count [256]int
		for _, e := range src {
			count[byte(e.k>>shift)]++
		}
		if count[byte(src[0].k>>shift)] == len(src) {
			continue
		}
		pos := 0
		for i, c := range count {
			count[i] = pos
			pos += c
		}
		for _, e := range src {
			b := byte(e.k >> shift)
			dst[count[b]] = e
			count[b]++
		}
		src, dst = dst, src
	}
	if &src[0] != &es[0] {
		copy(es, src)
	}
}

// addrIndex is an IPv4 address as the integer elements pack.
func addrIndex(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addrFromIndex(i uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
}
