package addrpolicy

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// Defaults of the ClusterSet policy's quotas (v1alpha1.MemberQuotas).
const (
	// DefaultQuotaRecords is the number of ServiceExportRecords one member
	// may hold in the broker and that an importer takes from it.
	DefaultQuotaRecords = 10000
	// DefaultQuotaBackends is the number of backends (endpoints over all
	// its records) an importer takes from one member.
	DefaultQuotaBackends = 100000
	// DefaultQuotaGlobalCIDRs is the number of a member's GlobalCIDR
	// claims that count (its oldest).
	DefaultQuotaGlobalCIDRs = 1
	// DefaultQuotaObjects is the number of objects of each other kind a
	// member may hold in its broker namespace.
	DefaultQuotaObjects = 1000
	// DefaultGlobalCIDRBits is the size of one member's global CIDR.
	DefaultGlobalCIDRBits = 24
	// MaxAllowedCIDRs and MaxQuotaGlobalCIDRs are the CRD schema's
	// bounds of spec.allowedCIDRs and spec.quotas.globalCIDRs
	// (v1alpha1.ClusterSetPolicySpec): a policy beyond them could not be
	// stored.
	MaxAllowedCIDRs     = 64
	MaxQuotaGlobalCIDRs = 16
)

// DefaultAllowed returns the address space members may announce by
// default: the private ranges of RFC 1918, the shared address space
// 100.64.0.0/10 (RFC 6598) and the unique local IPv6 addresses fc00::/7
// (RFC 4193), in ComparePrefix order. The globalnet supernet is allowed
// besides.
func DefaultAllowed() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("fc00::/7"),
	}
}

// classE is the former class E 240.0.0.0/4, reserved as remote space but
// home of the clusterset's own ranges (supernet, VIP range, the route
// agent's overlay addresses 241.0.0.0/8).
var classE = netip.MustParsePrefix("240.0.0.0/4")

// Quotas bound one member (v1alpha1.MemberQuotas with defaults).
type Quotas struct {
	// Records is the number of ServiceExportRecords a member may hold in
	// the broker and an importer takes from it.
	Records int
	// Backends is the number of backends an importer takes from one
	// member over all its records.
	Backends int
	// GlobalCIDRs is the number of a member's global CIDR claims that
	// count: its oldest ones.
	GlobalCIDRs int
	// Objects is the number of objects of every other kind a member may
	// hold in its broker namespace, each kind alone.
	Objects int
}

// Policy is the ClusterSet's policy (v1alpha1.ClusterSetPolicySpec) as
// every daemon uses it: parsed, checked, with every default applied.
// ParsePolicy makes one; DefaultPolicy is the policy of an empty spec.
type Policy struct {
	// Allowed is the address space a member's pod and service CIDRs must
	// lie in; its global CIDRs lie in Supernet.
	Allowed []netip.Prefix
	// VIPRange and VIPRangeIPv6 are the clusterset VIP ranges: no remote
	// subnet or address may meet them.
	VIPRange, VIPRangeIPv6 netip.Prefix
	// Supernet holds the members' global CIDRs, each a block of exactly
	// GlobalCIDRBits.
	Supernet       netip.Prefix
	GlobalCIDRBits int
	Quotas         Quotas
}

// DefaultPolicy is the policy of an empty ClusterSetPolicySpec.
func DefaultPolicy() Policy {
	p, err := ParsePolicy(v1alpha1.ClusterSetPolicySpec{})
	if err != nil {
		panic(err) // the defaults are consistent: TestDefaultPolicy
	}
	return p
}

// IsZero reports whether p was never set (a zero Policy, not a parsed
// one).
func (p Policy) IsZero() bool { return !p.VIPRange.IsValid() }

// ParsePolicy checks spec and applies the defaults of every empty field.
// It refuses a policy whose ranges could not work together: a VIP range
// or supernet in reserved space (the former class E 240.0.0.0/4 excepted)
// or the supernet overlapping the IPv4 VIP range, an allowed CIDR in
// reserved space, a global CIDR size outside the supernet's /bits…/29.
// The VIP ranges may lie inside the allowed space (the default IPv6 one
// does, in fc00::/7): member CIDRs meeting them are refused on their own.
func ParsePolicy(spec v1alpha1.ClusterSetPolicySpec) (Policy, error) {
	p := Policy{Allowed: DefaultAllowed()}
	if len(spec.AllowedCIDRs) > 0 {
		p.Allowed = nil
		for _, s := range spec.AllowedCIDRs {
			a, err := parseCanonical(s)
			if err != nil {
				return Policy{}, fmt.Errorf("allowed CIDR: %w", err)
			}
			if r, ok := reservedOverlap(a); ok {
				return Policy{}, fmt.Errorf("allowed CIDR %s overlaps the reserved range %s", a, r)
			}
			p.Allowed = append(p.Allowed, a)
		}
		slices.SortFunc(p.Allowed, ComparePrefix)
		p.Allowed = slices.Compact(p.Allowed)
	}
	var err error
	if p.VIPRange, err = parseOr(spec.VIPRange, DefaultVIPRange, "VIP range"); err != nil {
		return Policy{}, err
	}
	if p.VIPRangeIPv6, err = parseOr(spec.VIPRangeIPv6, DefaultVIPRangeIPv6, "IPv6 VIP range"); err != nil {
		return Policy{}, err
	}
	if p.Supernet, err = parseOr(spec.Globalnet.Supernet, DefaultSupernet, "globalnet supernet"); err != nil {
		return Policy{}, err
	}
	p.GlobalCIDRBits = int(orDefault(spec.Globalnet.CIDRBits, DefaultGlobalCIDRBits))
	q := spec.Quotas
	p.Quotas = Quotas{
		Records:     int(orDefault(q.ServiceExportRecords, DefaultQuotaRecords)),
		Backends:    int(orDefault(q.Backends, DefaultQuotaBackends)),
		GlobalCIDRs: int(orDefault(q.GlobalCIDRs, DefaultQuotaGlobalCIDRs)),
		Objects:     int(orDefault(q.Objects, DefaultQuotaObjects)),
	}
	switch {
	case !p.VIPRange.Addr().Is4():
		return Policy{}, fmt.Errorf("VIP range %s is not IPv4", p.VIPRange)
	case !p.VIPRangeIPv6.Addr().Is6() || p.VIPRangeIPv6.Addr().Is4In6():
		return Policy{}, fmt.Errorf("IPv6 VIP range %s is not IPv6", p.VIPRangeIPv6)
	case !p.Supernet.Addr().Is4():
		return Policy{}, fmt.Errorf("globalnet supernet %s is not IPv4", p.Supernet)
	case p.GlobalCIDRBits < p.Supernet.Bits() || p.GlobalCIDRBits > 29:
		return Policy{}, fmt.Errorf("global CIDR size /%d must lie between the supernet's /%d and /29", p.GlobalCIDRBits, p.Supernet.Bits())
	case p.GlobalCIDRBits-p.Supernet.Bits() > 20:
		return Policy{}, fmt.Errorf("global CIDR size /%d: more than 2^20 global CIDRs in the supernet %s", p.GlobalCIDRBits, p.Supernet)
	case p.VIPRange.Overlaps(p.Supernet):
		return Policy{}, fmt.Errorf("VIP range %s overlaps the globalnet supernet %s", p.VIPRange, p.Supernet)
	case p.Quotas.Records < 1 || p.Quotas.Backends < 1 || p.Quotas.GlobalCIDRs < 1 || p.Quotas.Objects < 1:
		return Policy{}, fmt.Errorf("quotas %+v: every quota is at least 1", p.Quotas)
	case p.Quotas.GlobalCIDRs > MaxQuotaGlobalCIDRs:
		return Policy{}, fmt.Errorf("global CIDR quota %d: at most %d", p.Quotas.GlobalCIDRs, MaxQuotaGlobalCIDRs)
	case len(spec.AllowedCIDRs) > MaxAllowedCIDRs:
		return Policy{}, fmt.Errorf("%d allowed CIDRs: at most %d", len(spec.AllowedCIDRs), MaxAllowedCIDRs)
	}
	for _, r := range []struct {
		what string
		p    netip.Prefix
	}{{"VIP range", p.VIPRange}, {"IPv6 VIP range", p.VIPRangeIPv6}, {"globalnet supernet", p.Supernet}} {
		if err := checkOwnRange(r.what, r.p); err != nil {
			return Policy{}, err
		}
	}
	return p, nil
}

// Spec is p written back as a ClusterSetPolicySpec with every field set:
// what `causewayctl deploy-broker` stores, so members need no defaults.
func (p Policy) Spec() v1alpha1.ClusterSetPolicySpec {
	spec := v1alpha1.ClusterSetPolicySpec{
		VIPRange: p.VIPRange.String(), VIPRangeIPv6: p.VIPRangeIPv6.String(),
		Globalnet: v1alpha1.GlobalnetPolicy{Supernet: p.Supernet.String(), CIDRBits: int32(p.GlobalCIDRBits)},
		Quotas: v1alpha1.MemberQuotas{ServiceExportRecords: int32(p.Quotas.Records), Backends: int32(p.Quotas.Backends),
			GlobalCIDRs: int32(p.Quotas.GlobalCIDRs), Objects: int32(p.Quotas.Objects)},
	}
	for _, a := range p.Allowed {
		spec.AllowedCIDRs = append(spec.AllowedCIDRs, a.String())
	}
	return spec
}

// IsGlobalCIDR reports whether c is a block the policy lets a member claim
// as its global CIDR: exactly GlobalCIDRBits long, inside the supernet.
func (p Policy) IsGlobalCIDR(c netip.Prefix) bool {
	return c.IsValid() && c.Bits() == p.GlobalCIDRBits && c == c.Masked() && within(c, p.Supernet)
}

// VIPRangeOf is the VIP range of addr's family.
func (p Policy) VIPRangeOf(addr netip.Addr) netip.Prefix {
	if addr.Unmap().Is4() {
		return p.VIPRange
	}
	return p.VIPRangeIPv6
}

// allowed reports whether c lies inside the allowed space.
func (p Policy) allowed(c netip.Prefix) bool {
	return slices.ContainsFunc(p.Allowed, func(a netip.Prefix) bool { return within(c, a) })
}

// CheckVIPRange refuses a clusterset VIP range that could not work: in a
// reserved range other than the former class E (which holds the default
// ranges). pkg/mcs uses it for the ranges it allocates from.
func CheckVIPRange(r netip.Prefix) error { return checkOwnRange("VIP range", r) }

// checkOwnRange refuses one of the ClusterSet's own ranges (VIP ranges,
// supernet) in reserved space other than the former class E.
func checkOwnRange(what string, r netip.Prefix) error {
	if r != r.Masked() {
		return fmt.Errorf("%s %s has host bits set (want %s)", what, r, r.Masked())
	}
	for _, res := range DefaultReserved() {
		if res != classE && res.Overlaps(r) {
			return fmt.Errorf("%s %s overlaps the reserved range %s", what, r, res)
		}
	}
	return nil
}

// reservedOverlap is the first reserved range c overlaps.
func reservedOverlap(c netip.Prefix) (netip.Prefix, bool) {
	for _, r := range DefaultReserved() {
		if r.Overlaps(c) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

func parseOr(s, def, what string) (netip.Prefix, error) {
	if s == "" {
		s = def
	}
	p, err := parseCanonical(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%s: %w", what, err)
	}
	return p, nil
}

// parseCanonical parses a CIDR written in canonical form.
func parseCanonical(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", truncate(s, 60))
	case p.String() != s || p != p.Masked():
		return netip.Prefix{}, fmt.Errorf("%q is not in canonical form %s", truncate(s, 60), p.Masked())
	case p.Bits() == 0:
		return netip.Prefix{}, fmt.Errorf("%s is the default route", p)
	}
	return p, nil
}

func orDefault(v, def int32) int32 {
	if v == 0 {
		return def
	}
	return v
}
