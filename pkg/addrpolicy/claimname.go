package addrpolicy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// CIDRClaimName is the broker object name of the CIDRClaim of p (rule
// 7), a valid DNS subdomain: for IPv4 the form of the GlobalCIDR names
// (pkg/globalnet.CIDRObjectName), "10.244.0.0-16" for 10.244.0.0/16; for
// IPv6 "v6-", the eight groups of the address written in full (as
// pkg/mcs.VIPObjectName), "-" and the length:
// "v6-fd00-0010-0244-0001-0000-0000-0000-0000-64" for fd00:10:244:1::/64.
func CIDRClaimName(p netip.Prefix) string {
	if p.Addr().Is4() {
		return p.Addr().String() + "-" + strconv.Itoa(p.Bits())
	}
	b := p.Addr().As16()
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = fmt.Sprintf("%04x", binary.BigEndian.Uint16(b[2*i:]))
	}
	return "v6-" + strings.Join(groups, "-") + "-" + strconv.Itoa(p.Bits())
}

// ParseCIDRClaimName is the inverse of CIDRClaimName: the CIDR a name
// stands for, which is canonical (no host bits, not IPv4-mapped).
func ParseCIDRClaimName(name string) (netip.Prefix, error) {
	s := name
	if rest, ok := strings.CutPrefix(name, "v6-"); ok {
		i := strings.LastIndexByte(rest, '-')
		if i < 0 {
			return netip.Prefix{}, fmt.Errorf("parse CIDRClaim name %q: not v6-<eight groups>-<bits>", name)
		}
		s = strings.ReplaceAll(rest[:i], "-", ":") + "/" + rest[i+1:]
	} else {
		s = strings.Replace(name, "-", "/", 1)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || p.Addr().Is4In6() || p != p.Masked() || CIDRClaimName(p) != name {
		return netip.Prefix{}, fmt.Errorf("parse CIDRClaim name %q: not <IPv4 network>-<bits> or v6-<eight groups>-<bits>", name)
	}
	return p, nil
}

// DirectCIDRs are the CIDRs of subnets (a cluster's pod and service
// CIDRs) that remotes reach directly, each claimed in the broker (rule
// 7): all of them, or under globalnet the IPv6 ones only (the IPv4 ones
// are reached through the global CIDR and claim nothing).
func DirectCIDRs(subnets []netip.Prefix, globalnet bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range subnets {
		if !globalnet || p.Addr().Is6() {
			out = append(out, p)
		}
	}
	return out
}

// ValidPrefixes are the CIDRs of ss that parse, masked; the others are
// skipped (for subnets an object already had checked by Decide).
func ValidPrefixes(ss []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}
