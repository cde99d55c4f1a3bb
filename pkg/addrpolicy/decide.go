package addrpolicy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

func refuse(reason, format string, args ...any) *Verdict {
	return &Verdict{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func accept(subs []netip.Prefix) *Verdict {
	return &Verdict{Valid: true, Reason: v1alpha1.ReasonValid, Message: "accepted", Subnets: subs}
}

// Decide applies the rules of the package comment to remotes and returns
// one Decision per remote, sorted by cluster ID. A cluster ID given more
// than once has all its objects refused (ReasonInvalidCluster): the policy
// cannot tell which announcement is the cluster's.
func Decide(cfg Config, remotes []Remote) []Decision {
	cfg = cfg.WithDefaults()
	rs := slices.Clone(remotes)
	slices.SortStableFunc(rs, func(a, b Remote) int { return strings.Compare(a.ClusterID, b.ClusterID) })

	type claim struct {
		id      string
		created time.Time
		subs    []netip.Prefix
		// d is the decision refused whole when the claim loses, or,
		// for a direct claim, whose verdicts lose subs.
		d *Decision
		// direct: the IPv6 CIDRs of a globalnet cluster (rule 8), left
		// out rather than refused when the claim loses.
		direct bool
	}
	// settled are a cluster's direct CIDRs settled one by one against
	// the broker's CIDR claims (rule 7, cfg.CIDRClaims not nil).
	type settled struct {
		id   string
		subs []netip.Prefix
	}
	out := make([]Decision, 0, len(rs))
	var claims []claim
	var direct []settled
	for i := 0; i < len(rs); {
		j := i + 1
		for j < len(rs) && rs[j].ClusterID == rs[i].ClusterID {
			j++
		}
		if j-i > 1 {
			d := Decision{ClusterID: rs[i].ClusterID}
			for _, r := range rs[i:j] {
				if r.Cluster != nil && r.Cluster.Refused == "" {
					d.Cluster = refuse(v1alpha1.ReasonInvalidCluster, "cluster %q announced %d times", r.ClusterID, j-i)
				}
				if r.Endpoint != nil {
					d.Endpoint = refuse(v1alpha1.ReasonInvalidCluster, "cluster %q announced %d times", r.ClusterID, j-i)
				}
			}
			out = append(out, d)
			i = j
			continue
		}
		r := rs[i]
		i = j
		d := Decision{ClusterID: r.ClusterID}
		// cv is the Cluster's verdict as its Endpoint sees it; nil when
		// there is no Cluster object.
		var cv *Verdict
		var direct6 []netip.Prefix
		global := r.Cluster != nil && len(r.Cluster.GlobalCIDRs) > 0
		if c := r.Cluster; c != nil {
			if c.Refused != "" {
				cv = &Verdict{Message: c.Refused}
			} else {
				d.Cluster, direct6 = cfg.checkCluster(r.ClusterID, c)
				cv = d.Cluster
			}
		}
		if e := r.Endpoint; e != nil {
			d.Endpoint = cfg.checkEndpoint(r.ClusterID, e, cv, global)
			if v := cfg.checkKey(r.ClusterID, e.PublicKey); d.Endpoint.Valid && v != nil {
				d.Endpoint = v
			}
		}
		out = append(out, d)
		switch {
		case cv != nil && cv.Valid && cfg.CIDRClaims != nil:
			// Global CIDRs are settled as a whole, by the Cluster's
			// age; every direct CIDR by its own claim.
			mine := slices.Clone(cv.Subnets)
			if global {
				own := slices.DeleteFunc(mine, func(p netip.Prefix) bool { return slices.Contains(direct6, p) })
				claims = append(claims, claim{id: r.ClusterID, created: r.Cluster.Created, subs: own})
				mine = direct6
			}
			if len(mine) > 0 {
				direct = append(direct, settled{id: r.ClusterID, subs: mine})
			}
		case cv != nil && cv.Valid:
			own := slices.DeleteFunc(slices.Clone(cv.Subnets), func(p netip.Prefix) bool { return slices.Contains(direct6, p) })
			claims = append(claims, claim{id: r.ClusterID, created: r.Cluster.Created, subs: own})
			if len(direct6) > 0 {
				claims = append(claims, claim{id: r.ClusterID, created: r.Cluster.Created, subs: direct6, direct: true})
			}
		case cv == nil && d.Endpoint != nil && d.Endpoint.Valid && cfg.CIDRClaims != nil:
			// An Endpoint alone: its subnets in the supernet as a
			// whole, by the Endpoint's age; the others by their claims.
			var inSupernet, mine []netip.Prefix
			for _, p := range d.Endpoint.Subnets {
				if within(p, cfg.Policy.Supernet) {
					inSupernet = append(inSupernet, p)
				} else {
					mine = append(mine, p)
				}
			}
			if len(inSupernet) > 0 {
				claims = append(claims, claim{id: r.ClusterID, created: r.Endpoint.Created, subs: inSupernet})
			}
			if len(mine) > 0 {
				direct = append(direct, settled{id: r.ClusterID, subs: mine})
			}
		case cv == nil && d.Endpoint != nil && d.Endpoint.Valid:
			claims = append(claims, claim{id: r.ClusterID, created: r.Endpoint.Created, subs: d.Endpoint.Subnets})
		}
	}
	// out is sorted by cluster ID and complete: point the claims at it.
	find := func(id string) *Decision {
		n, _ := slices.BinarySearchFunc(out, id, func(d Decision, id string) int { return strings.Compare(d.ClusterID, id) })
		return &out[n]
	}
	for k := range claims {
		claims[k].d = find(claims[k].id)
	}

	// Direct CIDRs against the broker's record: each on its own, so the
	// order does not matter.
	for _, s := range direct {
		var lost []netip.Prefix
		var reason string
		var whys []string
		for _, p := range s.subs {
			r, why := cfg.settle(s.id, p)
			if r == "" {
				continue
			}
			if reason == "" {
				reason = r
			}
			lost = append(lost, p)
			whys = append(whys, why)
		}
		if len(lost) > 0 {
			leaveOut(find(s.id), lost, reason, strings.Join(whys, "; "))
		}
	}

	// Remotes against each other: oldest first, ties by cluster ID (unique
	// here), a cluster's own claim before its direct one: the order is
	// total.
	slices.SortFunc(claims, func(a, b claim) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.id, b.id), cmp.Compare(boolInt(a.direct), boolInt(b.direct)))
	})
	var held []claim
	for _, c := range claims {
		conflict := ""
	search:
		for _, p := range c.subs {
			for _, h := range held {
				for _, q := range h.subs {
					if p.Overlaps(q) {
						why := "older"
						if h.created.Equal(c.created) {
							why = "as old, lower cluster ID"
						}
						conflict = fmt.Sprintf("subnet %s overlaps %s of cluster %q (%s)", p, q, h.id, why)
						break search
					}
				}
			}
		}
		if conflict == "" {
			held = append(held, c)
			continue
		}
		d := c.d
		if c.direct {
			leaveOut(d, c.subs, v1alpha1.ReasonOverlappingCIDR, conflict)
			continue
		}
		if d.Cluster != nil {
			d.Cluster = refuse(v1alpha1.ReasonOverlappingCIDR, "%s", conflict)
			if d.Endpoint != nil && d.Endpoint.Valid {
				d.Endpoint = refuse(v1alpha1.ReasonInvalidCluster, "cluster %q is invalid: %s", d.ClusterID, conflict)
			}
		} else {
			d.Endpoint = refuse(v1alpha1.ReasonOverlappingCIDR, "%s", conflict)
		}
	}
	return out
}

// checkCluster applies the per-object rules to a Cluster. Of a globalnet
// Cluster it also returns the IPv6 pod and service CIDRs it is reached at
// directly (rule 8), part of the verdict's Subnets; when they fail a rule
// they are left out of the verdict instead, and its message says why.
func (cfg Config) checkCluster(id string, c *Cluster) (*Verdict, []netip.Prefix) {
	cidrs := slices.Concat(c.PodCIDRs, c.ServiceCIDRs)
	global := len(c.GlobalCIDRs) > 0
	if global {
		cidrs = c.GlobalCIDRs
	}
	space := spaceDirect
	if global {
		space = spaceGlobal
	}
	subs, v := cfg.parse(cidrs, space)
	if v != nil {
		return v, nil
	}
	if global && cfg.Claims != nil {
		owned := cfg.Claims[id]
		for _, p := range subs {
			if !slices.ContainsFunc(owned, func(q netip.Prefix) bool { return within(p, q) }) {
				return refuse(v1alpha1.ReasonUnclaimedGlobalCIDR, "global CIDR %s is not claimed by cluster %q in the broker", p, id), nil
			}
		}
	}
	if v := cfg.checkSpace(id, subs); v != nil {
		return v, nil
	}
	verdict := accept(subs)
	if !global {
		return verdict, nil
	}
	var direct6 []string
	for _, s := range slices.Concat(c.PodCIDRs, c.ServiceCIDRs) {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is6() {
			direct6 = append(direct6, s) // globalnet does not translate it
		}
	}
	if len(direct6) == 0 {
		return verdict, nil
	}
	slices.Sort(direct6) // messages do not depend on the object's order
	direct, v := cfg.parse(direct6, spaceDirect)
	if v == nil {
		v = cfg.checkSpace(id, direct)
	}
	if v != nil {
		verdict.Message = fmt.Sprintf("accepted; IPv6 CIDRs %v left out: %s", direct6, v.Message)
		return verdict, nil
	}
	verdict.Subnets = slices.SortedFunc(slices.Values(slices.Concat(subs, direct)), ComparePrefix)
	return verdict, direct
}

// settle is rule 7 for one direct CIDR p of cluster id under the
// broker's CIDR claims: p is as old as the oldest claim of id containing
// it, and loses to any other cluster's claim overlapping it that is
// older, or as old with a lower cluster ID (claim times have whole
// seconds: two members joining together must not both lose). It
// returns why p is left out (reason and message), or ""
// when it is kept. A claim loses only to older ones, so a newer claim
// never takes a CIDR away; only the release of an older claim gives one.
func (cfg Config) settle(id string, p netip.Prefix) (reason, why string) {
	var age time.Time
	claimed := false
	for q, at := range cfg.CIDRClaims[id] {
		if within(p, q) && (!claimed || at.Before(age)) {
			age, claimed = at, true
		}
	}
	if !claimed {
		return v1alpha1.ReasonCIDRNotClaimed, fmt.Sprintf("%s is not claimed by cluster %q in the broker", p, id)
	}
	// The oldest rival claim (then by cluster ID, then by CIDR) names
	// the conflict, whatever the maps' order.
	var rival string
	var rq netip.Prefix
	var rat time.Time
	for owner, cs := range cfg.CIDRClaims {
		if owner == id {
			continue
		}
		for q, at := range cs {
			if !q.Overlaps(p) || at.After(age) || (at.Equal(age) && owner > id) {
				continue
			}
			if rival == "" || cmp.Or(at.Compare(rat), strings.Compare(owner, rival), ComparePrefix(q, rq)) < 0 {
				rival, rq, rat = owner, q, at
			}
		}
	}
	if rival == "" {
		return "", ""
	}
	if rat.Equal(age) {
		return v1alpha1.ReasonOverlappingCIDR, fmt.Sprintf("%s overlaps %s, claimed in the broker at the same time (%s) by cluster %q, whose ID sorts first",
			p, rq, age.UTC().Format(time.RFC3339), rival)
	}
	return v1alpha1.ReasonOverlappingCIDR, fmt.Sprintf("%s (claimed %s) overlaps %s, claimed earlier by cluster %q in the broker (%s)",
		p, age.UTC().Format(time.RFC3339), rq, rival, rat.UTC().Format(time.RFC3339))
}

// leaveOut takes lost CIDRs (rules 7 and 8: a cluster's direct CIDRs
// unclaimed or lost to an older claim, a globalnet cluster's direct IPv6
// CIDRs) out of
// its verdicts, which stay Valid while they keep a CIDR: its Cluster no
// longer claims them, its Endpoint's subnets inside them are not routed,
// and each message says what was left out and why. A verdict left with
// nothing is refused with reason (its Endpoint with ReasonInvalidCluster
// when it is the Cluster).
func leaveOut(d *Decision, lost []netip.Prefix, reason, why string) {
	inside := func(p netip.Prefix) bool {
		return slices.ContainsFunc(lost, func(q netip.Prefix) bool { return within(p, q) })
	}
	if v := d.Cluster; v != nil && v.Valid {
		v.Subnets = slices.DeleteFunc(v.Subnets, inside)
		v.Message = fmt.Sprintf("accepted; CIDRs %v left out: %s", lost, why)
		if len(v.Subnets) == 0 {
			d.Cluster = refuse(reason, "%s", why)
			if d.Endpoint != nil && d.Endpoint.Valid {
				d.Endpoint = refuse(v1alpha1.ReasonInvalidCluster, "cluster %q is invalid: %s", d.ClusterID, why)
			}
		}
	}
	if v := d.Endpoint; v != nil && v.Valid {
		var out []netip.Prefix
		for _, p := range v.Subnets {
			if inside(p) {
				out = append(out, p)
			}
		}
		switch {
		case len(out) == len(v.Subnets):
			d.Endpoint = refuse(reason, "%s", why)
		case len(out) > 0:
			v.Subnets = slices.DeleteFunc(v.Subnets, inside)
			v.Message = fmt.Sprintf("accepted; subnets %v left out: %s", out, why)
		}
	}
}

// checkEndpoint applies the per-object rules to an Endpoint, then checks
// it against its Cluster's verdict cv (nil: no Cluster object). The
// Endpoint of a globalnet Cluster (global) has its IPv6 subnets outside
// cv's Subnets left out (the Cluster's IPv6 CIDRs were, rule 8) rather
// than refused.
func (cfg Config) checkEndpoint(id string, e *Endpoint, cv *Verdict, global bool) *Verdict {
	subnets, note := e.Subnets, ""
	if global && cv != nil && cv.Valid {
		var out []string
		subnets = slices.DeleteFunc(slices.Clone(e.Subnets), func(s string) bool {
			p, err := netip.ParsePrefix(s)
			if err != nil || p.Addr().Is4() || slices.ContainsFunc(cv.Subnets, func(q netip.Prefix) bool { return within(p, q) }) {
				return false
			}
			out = append(out, s)
			return true
		})
		if len(out) > 0 {
			slices.Sort(out)
			note = fmt.Sprintf("accepted; IPv6 subnets %v left out: not among cluster %q's accepted CIDRs (%s)", out, id, cv.Message)
		}
	}
	v := cfg.checkEndpointSubnets(id, subnets, e.HealthCheckIP, cv)
	if v.Valid && note != "" {
		v.Message = note
	}
	return v
}

func (cfg Config) checkEndpointSubnets(id string, subnets []string, hc netip.Addr, cv *Verdict) *Verdict {
	subs, v := cfg.parse(subnets, spaceEither)
	if v != nil {
		return v
	}
	if cv == nil && cfg.Claims != nil {
		owned := cfg.Claims[id]
		for _, p := range subs {
			if within(p, cfg.Policy.Supernet) && !slices.ContainsFunc(owned, func(q netip.Prefix) bool { return within(p, q) }) {
				return refuse(v1alpha1.ReasonUnclaimedGlobalCIDR, "subnet %s of the globalnet supernet is not inside a global CIDR claimed by cluster %q in the broker", p, id)
			}
		}
	}
	if v := cfg.checkSpace(id, subs); v != nil {
		return v
	}
	if hc.IsValid() && !Contains(subs, hc) {
		return refuse(v1alpha1.ReasonInvalidAddress, "healthCheckIP %s is outside the endpoint's subnets", hc)
	}
	switch {
	case cv == nil:
		return accept(subs)
	case !cv.Valid:
		return refuse(v1alpha1.ReasonInvalidCluster, "cluster %q is invalid: %s", id, cv.Message)
	}
	for _, p := range subs {
		if !slices.ContainsFunc(cv.Subnets, func(q netip.Prefix) bool { return within(p, q) }) {
			return refuse(v1alpha1.ReasonInvalidCIDR, "subnet %s is not inside cluster %q's CIDRs %v", p, id, cv.Subnets)
		}
	}
	return accept(subs)
}

// checkKey is the key rule (6): with key claims on, the Endpoint of
// cluster id announcing key must hold the broker's claim on it. nil: the
// key passes.
func (cfg Config) checkKey(id, key string) *Verdict {
	if cfg.KeyOwners == nil || key == "" {
		return nil
	}
	switch owner, ok := cfg.KeyOwners[key]; {
	case !ok:
		return refuse(v1alpha1.ReasonKeyInUse, "public key %s is not claimed by cluster %q in the broker (no TunnelKey)", truncate(key, 60), id)
	case owner != id:
		return refuse(v1alpha1.ReasonKeyInUse, "public key %s is claimed by cluster %q in the broker", truncate(key, 60), owner)
	}
	return nil
}

// space is which part of the address space a CIDR may lie in (rule 2).
type space int

const (
	// spaceDirect: a pod or service CIDR, inside the allowed space.
	spaceDirect space = iota
	// spaceGlobal: a global CIDR, a block of the supernet of the
	// policy's size.
	spaceGlobal
	// spaceEither: an Endpoint's subnet, inside the supernet or else
	// inside the allowed space.
	spaceEither
)

// parse applies the syntax and space rules (1 and 2) and returns the
// canonical, sorted, deduplicated prefixes, or a refusal.
func (cfg Config) parse(cidrs []string, sp space) ([]netip.Prefix, *Verdict) {
	if len(cidrs) == 0 {
		return nil, refuse(v1alpha1.ReasonInvalidCIDR, "no CIDRs")
	}
	subs := make([]netip.Prefix, 0, len(cidrs))
	// In text order, so that the refusal named does not depend on the
	// order the object lists its CIDRs in.
	for _, s := range slices.Sorted(slices.Values(cidrs)) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, refuse(v1alpha1.ReasonInvalidCIDR, "%q is not a CIDR", truncate(s, 60))
		}
		if v := cfg.checkPrefix(s, p, sp); v != nil {
			return nil, v
		}
		subs = append(subs, p)
	}
	slices.SortFunc(subs, ComparePrefix)
	subs = slices.Compact(subs)
	for i := 1; i < len(subs); i++ {
		for k := range i {
			if subs[k].Overlaps(subs[i]) {
				return nil, refuse(v1alpha1.ReasonInvalidCIDR, "%s overlaps %s of the same object", subs[i], subs[k])
			}
		}
	}
	return subs, nil
}

// checkPrefix is the syntax and space rule for one parsed CIDR whose text
// was s.
func (cfg Config) checkPrefix(s string, p netip.Prefix, sp space) *Verdict {
	pol := cfg.Policy
	minBits := MinBits4
	if p.Addr().Is6() {
		minBits = MinBits6
	}
	switch {
	case p.Addr().Is4In6():
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s is an IPv4-mapped IPv6 prefix", p)
	case p != p.Masked():
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s has host bits set", p)
	case p.String() != s:
		return refuse(v1alpha1.ReasonInvalidCIDR, "%q is not in canonical form %s", truncate(s, 60), p)
	case p.Bits() == 0:
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s is the default route", p)
	case p.Bits() < minBits:
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s is shorter than /%d", p, minBits)
	case p.Overlaps(pol.VIPRange):
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s overlaps the clusterset VIP range %s", p, pol.VIPRange)
	case p.Overlaps(pol.VIPRangeIPv6):
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s overlaps the IPv6 clusterset VIP range %s", p, pol.VIPRangeIPv6)
	}
	switch {
	case sp == spaceGlobal && !pol.IsGlobalCIDR(p):
		return refuse(v1alpha1.ReasonInvalidCIDR, "global CIDR %s is not a /%d of the globalnet supernet %s", p, pol.GlobalCIDRBits, pol.Supernet)
	case sp != spaceDirect && within(p, pol.Supernet):
		return nil
	case p.Overlaps(pol.Supernet):
		return refuse(v1alpha1.ReasonCIDRNotAllowed, "%s overlaps the globalnet supernet %s", p, pol.Supernet)
	}
	if r, ok := reservedOverlap(p); ok {
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s overlaps the reserved range %s", p, r)
	}
	if !pol.allowed(p) {
		return refuse(v1alpha1.ReasonCIDRNotAllowed, "%s is outside the ClusterSet's allowed space %v", p, pol.Allowed)
	}
	return nil
}

// checkSpace refuses CIDRs of cluster id overlapping this cluster's or a
// global CIDR assigned to another cluster.
func (cfg Config) checkSpace(id string, subs []netip.Prefix) *Verdict {
	for _, p := range subs {
		for _, q := range cfg.LocalCIDRs {
			if p.Overlaps(q) {
				return refuse(v1alpha1.ReasonOverlappingCIDR, "%s overlaps local %s", p, q)
			}
		}
		for _, q := range cfg.GlobalCIDRs {
			if p.Overlaps(q) {
				return refuse(v1alpha1.ReasonOverlappingCIDR, "%s overlaps local global CIDR %s", p, q)
			}
		}
		for _, q := range cfg.NodeCIDRs {
			if p.Overlaps(q) {
				return refuse(v1alpha1.ReasonOverlappingCIDR, "%s overlaps the local node network %s", p, q)
			}
		}
	}
	// Claims are walked in cluster-ID order so the message is stable.
	owners := make([]string, 0, len(cfg.Claims))
	for owner := range cfg.Claims {
		if owner != id {
			owners = append(owners, owner)
		}
	}
	slices.Sort(owners)
	for _, p := range subs {
		for _, owner := range owners {
			for _, q := range cfg.Claims[owner] {
				if p.Overlaps(q) {
					return refuse(v1alpha1.ReasonOverlappingCIDR, "%s overlaps global CIDR %s claimed by cluster %q", p, q, owner)
				}
			}
		}
	}
	return nil
}

// within reports whether p lies inside q.
func within(p, q netip.Prefix) bool {
	return q.IsValid() && q.Bits() <= p.Bits() && q.Contains(p.Addr())
}

// ComparePrefix orders prefixes by address, then by length: the canonical
// order of Verdict.Subnets.
func ComparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
