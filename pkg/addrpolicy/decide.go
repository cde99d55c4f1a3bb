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
		// d is the decision refused whole when the claim loses.
		d *Decision
	}
	out := make([]Decision, 0, len(rs))
	var claims []claim
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
		if c := r.Cluster; c != nil {
			if c.Refused != "" {
				cv = &Verdict{Message: c.Refused}
			} else {
				d.Cluster = cfg.checkCluster(r.ClusterID, c)
				cv = d.Cluster
			}
		}
		if e := r.Endpoint; e != nil {
			d.Endpoint = cfg.checkEndpoint(r.ClusterID, e, cv)
		}
		out = append(out, d)
		switch {
		case cv != nil && cv.Valid:
			claims = append(claims, claim{r.ClusterID, r.Cluster.Created, cv.Subnets, nil})
		case cv == nil && d.Endpoint != nil && d.Endpoint.Valid:
			claims = append(claims, claim{r.ClusterID, r.Endpoint.Created, d.Endpoint.Subnets, nil})
		}
	}
	// out is sorted by cluster ID and complete: point the claims at it.
	for k := range claims {
		n, _ := slices.BinarySearchFunc(out, claims[k].id, func(d Decision, id string) int { return strings.Compare(d.ClusterID, id) })
		claims[k].d = &out[n]
	}

	// Remotes against each other: oldest first, ties by cluster ID (unique
	// here, so the order is total).
	slices.SortFunc(claims, func(a, b claim) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.id, b.id))
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

// checkCluster applies the per-object rules to a Cluster.
func (cfg Config) checkCluster(id string, c *Cluster) *Verdict {
	cidrs := slices.Concat(c.PodCIDRs, c.ServiceCIDRs)
	global := len(c.GlobalCIDRs) > 0
	if global {
		cidrs = c.GlobalCIDRs
	}
	subs, v := cfg.parse(cidrs)
	if v != nil {
		return v
	}
	if global && cfg.Claims != nil {
		owned := cfg.Claims[id]
		for _, p := range subs {
			if !slices.ContainsFunc(owned, func(q netip.Prefix) bool { return within(p, q) }) {
				return refuse(v1alpha1.ReasonUnclaimedGlobalCIDR, "global CIDR %s is not claimed by cluster %q in the broker", p, id)
			}
		}
	}
	if v := cfg.checkSpace(id, subs); v != nil {
		return v
	}
	return accept(subs)
}

// checkEndpoint applies the per-object rules to an Endpoint, then checks
// it against its Cluster's verdict cv (nil: no Cluster object).
func (cfg Config) checkEndpoint(id string, e *Endpoint, cv *Verdict) *Verdict {
	subs, v := cfg.parse(e.Subnets)
	if v != nil {
		return v
	}
	if v := cfg.checkSpace(id, subs); v != nil {
		return v
	}
	if hc := e.HealthCheckIP; hc.IsValid() && !Contains(subs, hc) {
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

// parse applies the syntax rules and returns the canonical, sorted,
// deduplicated prefixes, or a refusal.
func (cfg Config) parse(cidrs []string) ([]netip.Prefix, *Verdict) {
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
		if v := cfg.checkPrefix(s, p); v != nil {
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

// checkPrefix is the syntax and reserved-space rule for one parsed CIDR
// whose text was s.
func (cfg Config) checkPrefix(s string, p netip.Prefix) *Verdict {
	minBits := cfg.MinBits4
	if p.Addr().Is6() {
		minBits = cfg.MinBits6
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
	case p.Overlaps(cfg.VIPRange):
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s overlaps the clusterset VIP range %s", p, cfg.VIPRange)
	case p.Overlaps(cfg.VIPRangeIPv6):
		return refuse(v1alpha1.ReasonInvalidCIDR, "%s overlaps the IPv6 clusterset VIP range %s", p, cfg.VIPRangeIPv6)
	case within(p, cfg.Supernet):
		return nil
	}
	for _, r := range cfg.Reserved {
		if p.Overlaps(r) {
			return refuse(v1alpha1.ReasonInvalidCIDR, "%s overlaps the reserved range %s", p, r)
		}
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
