package cable

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ValidationError reports a connection that was not programmed.
type ValidationError struct {
	ClusterID string
	Reason    string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("connection %q rejected: %s", e.ClusterID, e.Reason)
}

// Requirements are the per-driver rules of Validate.
type Requirements struct {
	// PublicKey requires a non-zero public key.
	PublicKey bool
	// IPv4Endpoint rejects IPv6 endpoints (VXLAN: the outer packets are
	// IPv4). Subnets of both families are accepted by every driver.
	IPv4Endpoint bool
}

// Validate splits conns into the connections that can be programmed and
// an error (errors.Join of *ValidationError) for the rest. It holds only
// the safety checks of a driver, per connection: an empty or duplicate
// cluster ID, an invalid endpoint or port 0, a missing key when required,
// no subnets, invalid, non-canonical or default-route subnets — plus one
// across connections: the same subnet in two connections (both are
// rejected), which no driver can program (a WireGuard allowed IP, a route
// or an IPsec policy has one peer). Which remote subnets are accepted,
// overlaps included, is decided before Set by the caller's policy
// (pkg/addrpolicy, in the gateway); Validate does not re-arbitrate, and
// partially overlapping subnets of two connections are programmed
// (longest prefix wins). The returned connections have sorted,
// deduplicated subnets and are sorted by ClusterID. Validate is pure.
func Validate(conns []Connection, req Requirements) ([]Connection, error) {
	var errs []error
	reject := func(id, format string, args ...any) {
		errs = append(errs, &ValidationError{ClusterID: id, Reason: fmt.Sprintf(format, args...)})
	}
	seen := map[string]int{}
	for _, c := range conns {
		seen[c.ClusterID]++
	}
	var ok []Connection
	for _, c := range conns {
		// Unmapped first: ::ffff:0.0.0.0 is the unspecified address too.
		c.Endpoint = netip.AddrPortFrom(c.Endpoint.Addr().Unmap(), c.Endpoint.Port())
		switch {
		case c.ClusterID == "":
			reject(c.ClusterID, "empty cluster ID")
			continue
		case seen[c.ClusterID] > 1:
			reject(c.ClusterID, "duplicate cluster ID")
			continue
		case !c.Endpoint.Addr().IsValid() || c.Endpoint.Addr().IsUnspecified():
			reject(c.ClusterID, "invalid endpoint address %s", c.Endpoint.Addr())
			continue
		case c.Endpoint.Port() == 0:
			reject(c.ClusterID, "endpoint port 0")
			continue
		case req.PublicKey && c.PublicKey.IsZero():
			reject(c.ClusterID, "missing public key")
			continue
		case req.IPv4Endpoint && !c.Endpoint.Addr().Is4():
			reject(c.ClusterID, "IPv6 endpoint %s not supported", c.Endpoint)
			continue
		case len(c.Subnets) == 0:
			reject(c.ClusterID, "no subnets")
			continue
		}
		var bad []string
		subnets := make([]netip.Prefix, 0, len(c.Subnets))
		for _, p := range c.Subnets {
			switch {
			case !p.IsValid():
				bad = append(bad, "invalid subnet")
			case p != p.Masked():
				bad = append(bad, fmt.Sprintf("non-canonical subnet %s", p))
			case p.Bits() == 0:
				bad = append(bad, fmt.Sprintf("default route %s", p))
			default:
				subnets = append(subnets, p)
			}
		}
		if len(bad) > 0 {
			reject(c.ClusterID, "%s", strings.Join(bad, ", "))
			continue
		}
		slices.SortFunc(subnets, comparePrefix)
		c.Subnets = slices.Compact(subnets)
		ok = append(ok, c)
	}
	// The same subnet in two connections: unprogrammable, both rejected.
	owners := map[netip.Prefix][]string{}
	for _, c := range ok {
		for _, p := range c.Subnets {
			owners[p] = append(owners[p], c.ClusterID)
		}
	}
	dup := map[string]bool{}
	for _, c := range ok {
		for _, p := range c.Subnets {
			if len(owners[p]) > 1 && !dup[c.ClusterID] {
				dup[c.ClusterID] = true
				reject(c.ClusterID, "subnet %s is also in the connections of %v", p, slices.DeleteFunc(slices.Clone(owners[p]), func(id string) bool { return id == c.ClusterID }))
			}
		}
	}
	out := ok[:0]
	for _, c := range ok {
		if !dup[c.ClusterID] {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Connection) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	return out, errors.Join(errs...)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// SamePrefixes reports whether a and b hold the same prefixes in any order.
func SamePrefixes(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	x := slices.Clone(a)
	y := slices.Clone(b)
	slices.SortFunc(x, comparePrefix)
	slices.SortFunc(y, comparePrefix)
	return slices.Equal(x, y)
}
