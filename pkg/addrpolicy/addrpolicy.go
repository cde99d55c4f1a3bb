// Package addrpolicy is the one authority on which subnets of which remote
// cluster this cluster accepts, and the one evaluator of the ClusterSet's
// policy (Policy, from the broker's v1alpha1.ClusterSetPolicy: allowed
// address space, VIP ranges, globalnet supernet and block size, quotas).
// It is pure: no I/O, no clock, no logging.
//
// The gateway (pkg/gateway) calls Decide once per sync with what the broker
// holds and publishes the verdicts as Valid conditions on the mirrored
// Cluster and Endpoint objects; everything downstream (the cable driver,
// the route agent, the MCS controller) consumes the accepted subnets as
// published and keeps only safety checks of its own: none of them
// re-arbitrates overlaps.
//
// The rules, in the order they are applied (the first one that fails
// refuses the object):
//
//  1. Syntax (ReasonInvalidCIDR): every CIDR parses, is written in
//     canonical form (netip.Prefix.String of itself: no host bits, no
//     spaces, lower case), is not an IPv4-mapped IPv6 prefix, is not the
//     default route and is at least MinBits4 (IPv4) / MinBits6 (IPv6) long
//     — a split of the default route (0.0.0.0/1 + 128.0.0.0/1) is as
//     harmful as the default route itself; it does not overlap a
//     clusterset VIP range; two CIDRs of one object do not overlap (exact
//     duplicates are merged); an object announces at least one CIDR.
//  2. Space (ReasonCIDRNotAllowed, ReasonInvalidCIDR): a global CIDR is a
//     block of exactly the policy's size inside the supernet; every other
//     CIDR lies inside the policy's allowed space (Policy.Allowed), not
//     in the supernet and not in a reserved range (DefaultReserved). An
//     Endpoint's subnet may be either kind.
//  3. Claims (ReasonUnclaimedGlobalCIDR): with globalnet on (Config.Claims
//     not nil) every global CIDR a Cluster announces, and every subnet of
//     an Endpoint inside the supernet, lies inside a global CIDR the
//     broker holds a claim for in that cluster's name.
//  4. Local and assigned space (ReasonOverlappingCIDR): no CIDR overlaps
//     this cluster's pod, service, global or node networks, nor a global
//     CIDR the broker assigned to another cluster.
//  5. The Endpoint follows its Cluster: when the Cluster object exists, an
//     Endpoint is refused if the Cluster is (ReasonInvalidCluster) and each
//     of its subnets must lie inside the Cluster's CIDRs
//     (ReasonInvalidCIDR). Without a Cluster object the Endpoint stands on
//     its own. An Endpoint's health-check address lies inside its subnets
//     (ReasonInvalidAddress).
//  6. Keys (ReasonKeyInUse): with key claims on (Config.KeyOwners not
//     nil) an Endpoint announcing a public key is refused unless the
//     broker holds the claim on that key in its cluster's name: a key
//     claimed by another cluster, or by nobody, is in use elsewhere or not
//     proven to be the announcer's. The claim is first come, first served
//     (the API server's unique names), so a cluster copying another's
//     published key never displaces the tunnel to its owner. A refused
//     Endpoint holds no subnets against the other remotes (rule 7).
//  7. Remotes against each other (ReasonOverlappingCIDR,
//     ReasonCIDRNotClaimed). With the broker's CIDR claims
//     (Config.CIDRClaims not nil: one CIDRClaim object per pod or service
//     CIDR a member announces directly, created when it first claimed
//     it, immutable while held, deleted when released or on leave) the
//     overlap is settled once, by that record, CIDR by CIDR: each direct
//     CIDR of a remote is as old as the oldest claim of its cluster that
//     contains it (none: ReasonCIDRNotClaimed) and loses to any other
//     cluster's claim overlapping it that is older (an exact tie: the
//     lower cluster ID wins) — announced or not, valid or not: a claim is the broker's
//     record, and a newer claim never takes a CIDR away from an older
//     one. A lost CIDR is left out: the Cluster's verdict lacks it, the
//     Endpoint's subnets inside it are not routed, the messages say what
//     was left out and why, and the object is refused (with the reason of
//     its first lost CIDR) only when it loses all its CIDRs. An old
//     member adding a CIDR that overlaps a newer member's claimed one
//     therefore gets nothing for it and keeps the rest. Global CIDRs are
//     settled as a whole, as below, by the age of their Cluster (they
//     cannot overlap a direct CIDR: rule 2); an Endpoint without a
//     Cluster object settles its subnets outside the supernet by the
//     claims, those inside it as a whole by its own age.
//     Without the record (Config.CIDRClaims nil) a cluster's claim is its
//     Cluster's CIDRs (its Endpoint's subnets when it has no Cluster
//     object), aged by the creation time of that object. Claims are
//     settled oldest first, ties broken by the lower cluster ID: a claim
//     overlapping an accepted one is refused whole. A refused object
//     claims nothing. Either way a working tunnel is never broken by a
//     newcomer, and every cluster of the ClusterSet reaches the same
//     verdicts.
//
// With globalnet, a Cluster that announces global CIDRs is reached through
// them for IPv4: they are its CIDRs for every rule above, its Endpoint must
// announce subnets inside them, and its IPv4 pod and service CIDRs are not
// looked at (they may overlap anybody's, and need no claim).
//
//  8. Globalnet is IPv4 only, so a globalnet Cluster's IPv6 pod and
//     service CIDRs are its direct CIDRs: reached as they are, through the
//     tunnel, they are checked like any CIDR (rules 1, 2 and 4) and settled
//     against the other remotes (rule 7: by their claims, or without the
//     record with the Cluster's age as a claim of their own). When they
//     fail, only they are left out: the
//     Cluster and its Endpoint stay Valid for their global CIDRs, the
//     verdicts' Subnets lack the IPv6 CIDRs (and the Endpoint's IPv6
//     subnets inside them), and the messages say what was left out and
//     why — overlapping IPv6 space is never routed, and never breaks the
//     cluster's IPv4 path. Export records follow the same split
//     (ReachedThroughGlobal): IPv4 through global IP:port, IPv6 at the
//     Service's own IPv6 addresses.
//
// Decide's result depends on the set of its inputs, never on their order.
//
// CheckRecord (record.go) applies the same space to what a remote writes
// in its export records: every address importers send traffic to lies
// inside the subnets Decide accepted for that cluster, nothing names a
// reserved range, and ports and sizes are bounded. CapWeights (weight.go)
// bounds what a remote's claimed ready endpoints, which nobody can check,
// weigh against the other exporters of a ClusterSetIP Service: at most
// RemoteWeightFactor (9) times their sum, so at most 90 % of the VIP's
// connections.
//
// CIDRClaimName (claimname.go) is the broker object name of a CIDRClaim,
// the DNS-safe form of its CIDR.
//
// The seed corpora of FuzzDecide and FuzzCheckRecord (testdata/fuzz) run
// with every go test; go test -fuzz FuzzDecide ./pkg/addrpolicy/ explores
// further.
package addrpolicy

import (
	"net/netip"
	"time"
)

// Defaults of Config, documented here rather than buried in the rules.
const (
	// DefaultSupernet is globalnet's default supernet, the range global
	// CIDRs are allocated from (pkg/globalnet's --supernet). It lies in
	// 240.0.0.0/4 and is exempt from the reserved ranges.
	DefaultSupernet = "242.0.0.0/8"
	// DefaultVIPRange is the default clusterset VIP range
	// (pkg/mcs.DefaultVIPRange). VIPs never appear on a wire, so no remote
	// subnet may overlap it.
	DefaultVIPRange = "243.0.0.0/12"
	// DefaultVIPRangeIPv6 is the default IPv6 clusterset VIP range
	// (pkg/mcs.DefaultVIPRangeIPv6): a /108 (2^20 addresses, as many as
	// the IPv4 /12) of the unique local address block fc00::/7 (RFC 4193,
	// the locally assigned half fd00::/8), global ID 63:6175:7365 ("cause"
	// in ASCII). ULAs are never routed on the Internet; like the IPv4
	// range it is routed unreachable on every node and no remote subnet
	// may overlap it.
	DefaultVIPRangeIPv6 = "fd63:6175:7365::/108"
	// MinBits4 is the shortest IPv4 prefix accepted: a /8 (10.0.0.0/8
	// is a real cluster CIDR); anything shorter covers several /8s of
	// other people's space and, split in two /1s, the whole Internet.
	MinBits4 = 8
	// MinBits6 is the shortest IPv6 prefix accepted: a /16.
	MinBits6 = 16
)

// DefaultReserved returns the ranges refused as remote subnets by default:
// "this network" 0.0.0.0/8, loopback 127.0.0.0/8, link-local
// 169.254.0.0/16, multicast 224.0.0.0/4, the former class E 240.0.0.0/4
// (which also holds the route agent's 241.0.0.0/8 overlay addresses and
// the clusterset's own ranges: the supernet is exempt, the VIP range is
// refused on its own), broadcast 255.255.255.255/32, and for IPv6 the
// unspecified and loopback addresses ::/127, IPv4-mapped ::ffff:0:0/96,
// link-local fe80::/10 and multicast ff00::/8.
func DefaultReserved() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("224.0.0.0/4"),
		netip.MustParsePrefix("240.0.0.0/4"),
		netip.MustParsePrefix("255.255.255.255/32"),
		netip.MustParsePrefix("::/127"),
		netip.MustParsePrefix("::ffff:0:0/96"),
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("ff00::/8"),
	}
}

// Config is what the policy knows about this cluster and the ClusterSet.
type Config struct {
	// Policy is the ClusterSet's policy (the allowed space, VIP ranges,
	// supernet). Zero: DefaultPolicy().
	Policy Policy
	// LocalCIDRs are this cluster's pod and service CIDRs.
	LocalCIDRs []netip.Prefix
	// NodeCIDRs are this cluster's node and gateway networks (the
	// networks of the gateway's public and private addresses): a remote
	// claiming them could steer traffic to this cluster's own hosts.
	NodeCIDRs []netip.Prefix
	// GlobalCIDRs are this cluster's own global CIDRs; empty when
	// globalnet is off here.
	GlobalCIDRs []netip.Prefix
	// Claims maps a cluster ID to the global CIDRs the broker holds a
	// claim for in its name (one cluster-scoped object per global CIDR;
	// only the claims within the member's quota, see Policy.Quotas).
	// nil means globalnet is off here and the claim rule is skipped; an
	// empty, non-nil map means nobody owns a global CIDR, so any
	// announced global CIDR is refused.
	Claims map[string][]netip.Prefix
	// CIDRClaims maps a cluster ID to the pod and service CIDRs the
	// broker records it claims (one CIDRClaim object per CIDR in the
	// member's namespace), each with the time it was first claimed (the
	// object's creationTimestamp). Rule 7 ages a remote's direct CIDRs by
	// them. nil means the broker records no CIDR claims: rule 7 then ages
	// a cluster's CIDRs by its Cluster object, as before claims existed;
	// an empty, non-nil map means nobody claims a CIDR, so every direct
	// CIDR is left out (ReasonCIDRNotClaimed).
	CIDRClaims map[string]map[netip.Prefix]time.Time
	// KeyOwners maps a tunnel public key (the text an Endpoint
	// publishes) to the cluster the broker holds its claim for (one
	// cluster-scoped TunnelKey per key, named after it). nil means keys
	// are not claimed here (a driver without keys) and the key rule is
	// skipped; a non-nil map refuses every Endpoint whose key it does not
	// give to that Endpoint's cluster.
	KeyOwners map[string]string
}

// WithDefaults returns c with the default policy when it has none.
func (c Config) WithDefaults() Config {
	if c.Policy.IsZero() {
		c.Policy = DefaultPolicy()
	}
	return c
}

// Remote is what one remote cluster announced in the broker. Either
// object may be absent.
type Remote struct {
	ClusterID string
	Cluster   *Cluster
	Endpoint  *Endpoint
}

// Cluster is the address part of a remote Cluster object.
type Cluster struct {
	PodCIDRs, ServiceCIDRs []string
	// GlobalCIDRs, when not empty, replace PodCIDRs and ServiceCIDRs
	// (globalnet: the cluster is reached through them only).
	GlobalCIDRs []string
	// Created is the object's creation time (its age in overlaps).
	Created time.Time
	// Refused is set by the caller when it refused the object for a
	// reason outside this policy (e.g. a clusterID mismatch): the message.
	// The Cluster then claims nothing, gets no verdict from Decide, and
	// its Endpoint is refused with ReasonInvalidCluster.
	Refused string
}

// Endpoint is the address part of a remote Endpoint object. A caller that
// refused an Endpoint for a reason outside this policy (a bad key or
// address) leaves it out of the Remote: it then claims nothing.
type Endpoint struct {
	Subnets []string
	// PublicKey is the tunnel public key the Endpoint announces; empty
	// for a driver without keys.
	PublicKey string
	// HealthCheckIP, when valid, must lie inside Subnets
	// (ReasonInvalidAddress): it is probed through the tunnel.
	HealthCheckIP netip.Addr
	Created       time.Time
}

// Verdict is the policy's outcome for one object.
type Verdict struct {
	Valid bool
	// Reason is a v1alpha1 Valid-condition reason (ReasonValid when Valid).
	Reason  string
	Message string
	// Subnets are the object's CIDRs in canonical order (sorted,
	// deduplicated) when Valid: a Cluster's accepted CIDRs (its global
	// CIDRs under globalnet), an Endpoint's subnets to route.
	Subnets []netip.Prefix
}

// Decision is the policy's outcome for one remote cluster.
type Decision struct {
	ClusterID string
	// Cluster and Endpoint are nil when the object was absent (or, for
	// the Cluster, refused by the caller).
	Cluster, Endpoint *Verdict
}

// Accepted returns the subnets through which the cluster is reached: its
// Endpoint's subnets when the Endpoint is Valid, else none.
func (d Decision) Accepted() []netip.Prefix {
	if d.Endpoint == nil || !d.Endpoint.Valid {
		return nil
	}
	return d.Endpoint.Subnets
}

// Contains reports whether addr lies inside one of the accepted subnets,
// i.e. whether a remote backend at addr is reachable from here through the
// tunnel to its cluster (accepted as published in a Valid Endpoint's
// spec.subnets, or Decision.Accepted). An IPv4-mapped IPv6 address is
// taken as its IPv4 address; an invalid address is never reachable.
func Contains(accepted []netip.Prefix, addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range accepted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
