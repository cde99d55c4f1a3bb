package mcs

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"strings"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// DefaultVIPRange is the default clusterset VIP range: 243.0.0.0/12, about
// one million VIPs, ten times the largest benchmark (100 000 imports).
//
// It lies in 240.0.0.0/4, reserved since RFC 1112 and never assigned, so it
// cannot clash with any cluster's pod or service CIDR (RFC 1918, 100.64/10,
// public ranges), with the lab WAN 198.18.0.0/15, or with a destination on
// the Internet; Linux treats it as ordinary unicast. It stays clear of
// globalnet's default supernet 242.0.0.0/8 and leaves 243.16.0.0 -
// 243.255.255.255 free. A VIP never appears on a wire: the eBPF connect
// hook rewrites it to a backend before routing, and a packet that escaped
// would be dropped by routers rather than reach someone else's host.
const DefaultVIPRange = addrpolicy.DefaultVIPRange

// DefaultVIPRangeIPv6 is the default IPv6 clusterset VIP range,
// fd63:6175:7365::/108: 2^20 addresses of the unique local block fd00::/8
// (RFC 4193), never routed on the Internet, routed unreachable on every
// node like the IPv4 range (see addrpolicy.DefaultVIPRangeIPv6).
const DefaultVIPRangeIPv6 = addrpolicy.DefaultVIPRangeIPv6

// maxCandidateBits caps the candidate space of huge (IPv6) ranges.
const maxCandidateBits = 48

// ErrVIPRangeExhausted is matched (errors.Is) by every *VIPExhaustedError.
var ErrVIPRangeExhausted = errors.New("clusterset VIP range exhausted")

// VIPExhaustedError reports that every address of a range is allocated.
type VIPExhaustedError struct {
	Range   netip.Prefix
	Service string
}

func (e *VIPExhaustedError) Error() string {
	return fmt.Sprintf("allocate clusterset VIP for %s: every address of %s is allocated", e.Service, e.Range)
}

// Is makes errors.Is(err, ErrVIPRangeExhausted) true.
func (e *VIPExhaustedError) Is(target error) bool { return target == ErrVIPRangeExhausted }

// VIPRange is the block clusterset VIPs are taken from. The first and the
// last address of the block are never used.
type VIPRange struct {
	prefix netip.Prefix
	size   uint64 // usable addresses
}

// ParseVIPRange parses a CIDR such as DefaultVIPRange. It must be in
// canonical form (no host bits), hold at least one usable address and lie
// in no reserved range but the former class E (addrpolicy.CheckVIPRange).
func ParseVIPRange(s string) (VIPRange, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return VIPRange{}, fmt.Errorf("parse VIP range: %w", err)
	}
	if p.Masked() != p {
		return VIPRange{}, fmt.Errorf("VIP range %s has host bits set (want %s)", p, p.Masked())
	}
	if err := addrpolicy.CheckVIPRange(p); err != nil {
		return VIPRange{}, err
	}
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits > maxCandidateBits {
		hostBits = maxCandidateBits
	}
	total := uint64(1) << hostBits
	if total < 3 {
		return VIPRange{}, fmt.Errorf("VIP range %s is too small: need at least 3 addresses", p)
	}
	return VIPRange{prefix: p, size: total - 2}, nil
}

// MustParseVIPRange is ParseVIPRange for constants; it panics on error.
func MustParseVIPRange(s string) VIPRange {
	r, err := ParseVIPRange(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Prefix is the range's CIDR.
func (r VIPRange) Prefix() netip.Prefix { return r.prefix }

// IsIPv6 tells whether the range holds IPv6 addresses.
func (r VIPRange) IsIPv6() bool { return r.prefix.Addr().Is6() }

// Size is the number of usable addresses (capped at 2^48-2 for IPv6).
func (r VIPRange) Size() uint64 { return r.size }

// Overlaps tells whether p shares an address with the range; use it to
// reject configurations where the range meets a cluster or global CIDR.
func (r VIPRange) Overlaps(p netip.Prefix) bool { return r.prefix.Overlaps(p) }

// Contains tells whether a is a usable address of the range.
func (r VIPRange) Contains(a netip.Addr) bool {
	_, ok := r.index(a)
	return ok
}

// addr returns the i-th usable address, 0 <= i < Size.
func (r VIPRange) addr(i uint64) netip.Addr {
	off := i + 1
	base := r.prefix.Addr()
	if base.Is4() {
		b := base.As4()
		v := binary.BigEndian.Uint32(b[:]) + uint32(off)
		binary.BigEndian.PutUint32(b[:], v)
		return netip.AddrFrom4(b)
	}
	b := base.As16()
	lo := binary.BigEndian.Uint64(b[8:]) + off // host bits <= 48: no carry
	binary.BigEndian.PutUint64(b[8:], lo)
	return netip.AddrFrom16(b)
}

// index is the inverse of addr.
func (r VIPRange) index(a netip.Addr) (uint64, bool) {
	if !r.prefix.IsValid() || !r.prefix.Contains(a) || a.Is4In6() {
		return 0, false
	}
	var off uint64
	if a.Is4() {
		b, base := a.As4(), r.prefix.Addr().As4()
		off = uint64(binary.BigEndian.Uint32(b[:]) - binary.BigEndian.Uint32(base[:]))
	} else {
		b, base := a.As16(), r.prefix.Addr().As16()
		if [8]byte(b[:8]) != [8]byte(base[:8]) {
			return 0, false
		}
		off = binary.BigEndian.Uint64(b[8:]) - binary.BigEndian.Uint64(base[8:])
	}
	if off == 0 || off > r.size {
		return 0, false
	}
	return off - 1, true
}

// start is the index of a Service's first candidate: a hash of
// "<namespace>/<name>". It must never change: allocators in different
// clusters rely on probing in the same order.
func (r VIPRange) start(namespace, name string) uint64 {
	h := sha256.Sum256([]byte(namespace + "/" + name))
	return binary.BigEndian.Uint64(h[:8]) % r.size
}

// Candidates yields every usable address of the range exactly once, in
// the order a Service tries them: first the address at hash(namespace/name),
// then the following ones, wrapping around. Every allocator computes the
// same order, so allocators of one Service converge on the same address and
// allocators of different Services rarely meet.
func (r VIPRange) Candidates(namespace, name string) iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		if r.size == 0 {
			return
		}
		s := r.start(namespace, name)
		for i := range r.size {
			if !yield(r.addr((s + i) % r.size)) {
				return
			}
		}
	}
}

// rank is a's position in the Service's candidate order.
func (r VIPRange) rank(namespace, name string, a netip.Addr) (uint64, bool) {
	i, ok := r.index(a)
	if !ok {
		return 0, false
	}
	s := r.start(namespace, name)
	return (i + r.size - s) % r.size, true
}

// VIPObjectName is the broker object name of the VIPAllocation for a: the
// dotted quad for IPv4 (a valid DNS subdomain), "v6-" and the eight
// four-digit hex groups joined by "-" for IPv6.
func VIPObjectName(a netip.Addr) string {
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	b := a.As16()
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = fmt.Sprintf("%04x", binary.BigEndian.Uint16(b[2*i:]))
	}
	return "v6-" + strings.Join(groups, "-")
}

// ParseVIPObjectName is the inverse of VIPObjectName.
func ParseVIPObjectName(name string) (netip.Addr, error) {
	if rest, ok := strings.CutPrefix(name, "v6-"); ok {
		a, err := netip.ParseAddr(strings.ReplaceAll(rest, "-", ":"))
		if err != nil || !a.Is6() || VIPObjectName(a) != name {
			return netip.Addr{}, fmt.Errorf("parse VIP object name %q: not v6- and eight hex groups", name)
		}
		return a, nil
	}
	a, err := netip.ParseAddr(name)
	if err != nil || !a.Is4() || a.String() != name {
		return netip.Addr{}, fmt.Errorf("parse VIP object name %q: not a dotted IPv4 address", name)
	}
	return a, nil
}
