package addrpolicy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func pfxs(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// policy16 is the default policy with /16 global CIDRs, those of the
// tables below.
var policy16 = func() Policy {
	p, err := ParsePolicy(v1alpha1.ClusterSetPolicySpec{Globalnet: v1alpha1.GlobalnetPolicy{CIDRBits: 16}})
	if err != nil {
		panic(err)
	}
	return p
}()

// base is this cluster: pods 10.244/16, services 10.96/16, globalnet off,
// global CIDRs of /16.
var base = Config{Policy: policy16, LocalCIDRs: pfxs("10.244.0.0/16", "10.96.0.0/16")}

// cluster is a Cluster object created age minutes after t0.
func cluster(age int, pods, svcs []string) *Cluster {
	return &Cluster{PodCIDRs: pods, ServiceCIDRs: svcs, Created: t0.Add(time.Duration(age) * time.Minute)}
}

func global(age int, globals ...string) *Cluster {
	c := cluster(age, []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}) // same as local: irrelevant
	c.GlobalCIDRs = globals
	return c
}

// dual is a dual-stack globalnet Cluster: reached through globalCIDR for
// IPv4, at its IPv6 pod and service CIDRs directly.
func dual(age int, globalCIDR, pods6, svcs6 string) *Cluster {
	c := global(age, globalCIDR)
	c.PodCIDRs = append(c.PodCIDRs, pods6)
	c.ServiceCIDRs = append(c.ServiceCIDRs, svcs6)
	return c
}

func endpoint(age int, subnets ...string) *Endpoint {
	return &Endpoint{Subnets: subnets, Created: t0.Add(time.Duration(age) * time.Minute)}
}

// both is a cluster whose Cluster and Endpoint (same age) announce cidrs.
func both(id string, age int, cidrs ...string) Remote {
	return Remote{ClusterID: id, Cluster: cluster(age, cidrs, nil), Endpoint: endpoint(age, cidrs...)}
}

func epOnly(id string, age int, subnets ...string) Remote {
	return Remote{ClusterID: id, Endpoint: endpoint(age, subnets...)}
}

func clOnly(id string, c *Cluster) Remote { return Remote{ClusterID: id, Cluster: c} }

// Tunnel public keys of the key rule's tests.
const (
	keyLocal = "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	keyC3    = "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM="
	keyC4    = "BAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQ="
	keyFree  = "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk="
)

// keyed is r with its Endpoint announcing key.
func keyed(r Remote, key string) Remote {
	e := *r.Endpoint
	e.PublicKey = key
	r.Endpoint = &e
	return r
}

const ok = v1alpha1.ReasonValid

// verdicts renders decisions as "id/C" and "id/E" → reason ("-" when
// absent), the form the table states its expectations in.
func verdicts(ds []Decision) map[string]string {
	m := map[string]string{}
	r := func(v *Verdict) string {
		if v == nil {
			return "-"
		}
		return v.Reason
	}
	for _, d := range ds {
		m[d.ClusterID+"/C"] = r(d.Cluster)
		m[d.ClusterID+"/E"] = r(d.Endpoint)
	}
	return m
}

// shuffled returns remotes in a random order with every CIDR list shuffled.
func shuffled(rng *rand.Rand, remotes []Remote) []Remote {
	sh := func(s []string) []string {
		s = slices.Clone(s)
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		return s
	}
	out := make([]Remote, len(remotes))
	for i, r := range remotes {
		if r.Cluster != nil {
			c := *r.Cluster
			c.PodCIDRs, c.ServiceCIDRs, c.GlobalCIDRs = sh(c.PodCIDRs), sh(c.ServiceCIDRs), sh(c.GlobalCIDRs)
			r.Cluster = &c
		}
		if r.Endpoint != nil {
			e := *r.Endpoint
			e.Subnets = sh(e.Subnets)
			r.Endpoint = &e
		}
		out[i] = r
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestDecide(t *testing.T) {
	claims := map[string][]netip.Prefix{"c1": pfxs("242.1.0.0/16"), "c2": pfxs("242.2.0.0/16"), "c3": pfxs("242.3.0.0/16")}
	gn := base
	gn.GlobalCIDRs = pfxs("242.1.0.0/16")
	gn.Claims = claims
	// Key claims: c1 (this cluster) holds keyLocal, c3 keyC3, c4 keyC4;
	// nobody keyFree.
	keys := base
	keys.KeyOwners = map[string]string{keyLocal: "c1", keyC3: "c3", keyC4: "c4"}
	for _, tc := range []struct {
		name    string
		cfg     Config
		remotes []Remote
		want    map[string]string // "id/C", "id/E" → reason; only the keys listed are checked
		// accepted, when set, is every cluster's Decision.Accepted.
		accepted map[string][]netip.Prefix
	}{
		{name: "valid cluster and endpoint", cfg: base,
			remotes:  []Remote{{ClusterID: "c2", Cluster: cluster(0, []string{"10.245.0.0/16"}, []string{"10.97.0.0/16"}), Endpoint: endpoint(0, "10.97.0.0/16", "10.245.0.0/16")}},
			want:     map[string]string{"c2/C": ok, "c2/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("10.97.0.0/16", "10.245.0.0/16")}},
		{name: "duplicate CIDRs are merged", cfg: base, remotes: []Remote{both("c2", 0, "10.2.0.0/16", "10.2.0.0/16")},
			want: map[string]string{"c2/C": ok, "c2/E": ok}, accepted: map[string][]netip.Prefix{"c2": pfxs("10.2.0.0/16")}},

		// Syntax.
		{name: "default route", cfg: base, remotes: []Remote{both("c2", 0, "0.0.0.0/0")}, want: map[string]string{"c2/C": v1alpha1.ReasonInvalidCIDR, "c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "IPv6 default route", cfg: base, remotes: []Remote{epOnly("c2", 0, "::/0")}, want: map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "the /1 halves of the default route", cfg: base, remotes: []Remote{epOnly("c2", 0, "0.0.0.0/1", "128.0.0.0/1")}, want: map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "a /7 is too short", cfg: base, remotes: []Remote{epOnly("c2", 0, "12.0.0.0/7")}, want: map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "a /8 is fine", cfg: Config{}, remotes: []Remote{both("c2", 0, "10.0.0.0/8")}, want: map[string]string{"c2/C": ok, "c2/E": ok}},
		{name: "host bits", cfg: base, remotes: []Remote{epOnly("c2", 0, "10.2.0.1/16")}, want: map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "garbage", cfg: base, remotes: []Remote{epOnly("c2", 0, "banana")}, want: map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "not canonical text", cfg: base, remotes: []Remote{epOnly("c2", 0, " 10.2.0.0/16"), epOnly("c3", 0, "FD00:3::/64")},
			want: map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR, "c3/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "no CIDRs", cfg: base, remotes: []Remote{both("c2", 0)}, want: map[string]string{"c2/C": v1alpha1.ReasonInvalidCIDR, "c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "overlap within one object", cfg: base, remotes: []Remote{clOnly("c2", cluster(0, []string{"10.2.0.0/16"}, []string{"10.2.128.0/24"}))},
			want: map[string]string{"c2/C": v1alpha1.ReasonInvalidCIDR, "c2/E": "-"}},
		{name: "IPv6 accepted, too short or mapped refused", cfg: base,
			remotes: []Remote{epOnly("c2", 0, "fd00:2::/64"), epOnly("c3", 0, "fd00::/8"), epOnly("c4", 0, "::ffff:10.4.0.0/112"), epOnly("c5", 0, "fe80::/64")},
			want:    map[string]string{"c2/E": ok, "c3/E": v1alpha1.ReasonInvalidCIDR, "c4/E": v1alpha1.ReasonInvalidCIDR, "c5/E": v1alpha1.ReasonInvalidCIDR}},

		// Reserved ranges, supernet, VIP range.
		{name: "reserved ranges", cfg: base,
			remotes: []Remote{epOnly("r0", 0, "0.1.0.0/16"), epOnly("r1", 0, "127.0.0.0/8"), epOnly("r2", 0, "169.254.0.0/16"),
				epOnly("r3", 0, "239.1.0.0/16"), epOnly("r4", 0, "241.0.0.0/16"), epOnly("r5", 0, "255.255.255.255/32"),
				epOnly("r6", 0, "240.0.0.0/4")},
			want: map[string]string{"r0/E": v1alpha1.ReasonInvalidCIDR, "r1/E": v1alpha1.ReasonInvalidCIDR, "r2/E": v1alpha1.ReasonInvalidCIDR,
				"r3/E": v1alpha1.ReasonInvalidCIDR, "r4/E": v1alpha1.ReasonInvalidCIDR, "r5/E": v1alpha1.ReasonInvalidCIDR, "r6/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "the supernet is exempt, the VIP range is not", cfg: base,
			remotes: []Remote{epOnly("c2", 0, "242.2.0.0/16"), epOnly("c3", 0, "243.0.0.0/16"), epOnly("c4", 0, "243.0.0.0/8"), epOnly("c5", 0, "243.16.0.0/16")},
			want:    map[string]string{"c2/E": ok, "c3/E": v1alpha1.ReasonInvalidCIDR, "c4/E": v1alpha1.ReasonInvalidCIDR, "c5/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "the IPv6 VIP range is refused", cfg: base,
			remotes: []Remote{epOnly("c2", 0, "fd63:6175:7365::/112"), epOnly("c3", 0, "fd63:6175::/32"), epOnly("c4", 0, "fd63:6175:7366::/64")},
			want:    map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR, "c3/E": v1alpha1.ReasonInvalidCIDR, "c4/E": ok}},
		{name: "supernet, VIP range and allowed space come from the ClusterSet policy",
			cfg: Config{Policy: mustPolicy(t, v1alpha1.ClusterSetPolicySpec{AllowedCIDRs: []string{"100.64.0.0/10", "192.0.2.0/24"},
				VIPRange: "100.64.0.0/16", Globalnet: v1alpha1.GlobalnetPolicy{Supernet: "241.0.0.0/8"}})},
			remotes: []Remote{epOnly("c2", 0, "241.2.0.0/16"), epOnly("c3", 0, "100.64.3.0/24"), epOnly("c4", 0, "192.0.2.0/25"),
				epOnly("c5", 0, "242.5.0.0/16"), epOnly("c6", 0, "100.65.0.0/16"), epOnly("c7", 0, "243.0.0.0/16"), epOnly("c8", 0, "10.8.0.0/16")},
			want: map[string]string{"c2/E": ok, "c3/E": v1alpha1.ReasonInvalidCIDR, "c4/E": ok,
				"c5/E": v1alpha1.ReasonInvalidCIDR, "c6/E": ok, "c7/E": v1alpha1.ReasonInvalidCIDR, "c8/E": v1alpha1.ReasonCIDRNotAllowed}},

		// This cluster's space.
		{name: "overlaps a local CIDR", cfg: base, remotes: []Remote{both("c2", 0, "10.244.5.0/24"), epOnly("c3", 0, "10.0.0.0/8")},
			want: map[string]string{"c2/C": v1alpha1.ReasonOverlappingCIDR, "c2/E": v1alpha1.ReasonOverlappingCIDR, "c3/E": v1alpha1.ReasonOverlappingCIDR}},
		{name: "overlaps the local global CIDR", cfg: Config{Policy: policy16, GlobalCIDRs: pfxs("242.1.0.0/16")}, remotes: []Remote{epOnly("c4", 0, "242.1.128.0/17"), both("c5", 0, "10.5.0.0/16")},
			want: map[string]string{"c4/E": v1alpha1.ReasonOverlappingCIDR, "c5/C": ok, "c5/E": ok}},

		// The Endpoint follows its Cluster.
		{name: "endpoint outside its cluster", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Cluster: cluster(0, []string{"10.245.0.0/16"}, nil), Endpoint: endpoint(0, "10.245.0.0/16", "10.200.0.0/16")}},
			want:    map[string]string{"c2/C": ok, "c2/E": v1alpha1.ReasonInvalidCIDR}, accepted: map[string][]netip.Prefix{"c2": nil}},
		{name: "endpoint of an invalid cluster", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Cluster: cluster(0, []string{"0.0.0.0/0"}, nil), Endpoint: endpoint(0, "10.2.0.0/16")}},
			want:    map[string]string{"c2/C": v1alpha1.ReasonInvalidCIDR, "c2/E": v1alpha1.ReasonInvalidCluster}},
		{name: "cluster refused by the caller claims nothing", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Cluster: &Cluster{PodCIDRs: []string{"10.2.0.0/16"}, Refused: "clusterID mismatch"}, Endpoint: endpoint(0, "10.2.0.0/16")},
				both("c3", 5, "10.2.0.0/16")},
			want: map[string]string{"c2/C": "-", "c2/E": v1alpha1.ReasonInvalidCluster, "c3/C": ok, "c3/E": ok}},
		{name: "endpoint subset of its cluster", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Cluster: cluster(0, []string{"10.2.0.0/16"}, []string{"10.102.0.0/16"}), Endpoint: endpoint(0, "10.2.4.0/24")}},
			want:    map[string]string{"c2/C": ok, "c2/E": ok}, accepted: map[string][]netip.Prefix{"c2": pfxs("10.2.4.0/24")}},

		{name: "health-check address outside the subnets claims nothing", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Endpoint: &Endpoint{Subnets: []string{"10.2.0.0/16"}, HealthCheckIP: netip.MustParseAddr("10.9.0.1"), Created: t0}},
				epOnly("c3", 5, "10.2.0.0/16"),
				{ClusterID: "c4", Endpoint: &Endpoint{Subnets: []string{"10.4.0.0/16"}, HealthCheckIP: netip.MustParseAddr("10.4.0.1"), Created: t0}}},
			want: map[string]string{"c2/E": v1alpha1.ReasonInvalidAddress, "c3/E": ok, "c4/E": ok}},

		// Remotes against each other.
		{name: "oldest wins whatever the IDs", cfg: base, remotes: []Remote{both("zz", 0, "10.250.0.0/16"), both("aa", 10, "10.250.128.0/17")},
			want: map[string]string{"zz/C": ok, "zz/E": ok, "aa/C": v1alpha1.ReasonOverlappingCIDR, "aa/E": v1alpha1.ReasonInvalidCluster}},
		{name: "same age: lower cluster ID wins", cfg: base, remotes: []Remote{both("zz", 0, "10.250.0.0/16"), both("aa", 0, "10.250.128.0/17")},
			want: map[string]string{"aa/C": ok, "aa/E": ok, "zz/C": v1alpha1.ReasonOverlappingCIDR, "zz/E": v1alpha1.ReasonInvalidCluster}},
		{name: "endpoints without clusters", cfg: base, remotes: []Remote{epOnly("c2", 3, "10.2.0.0/16"), epOnly("c3", 2, "10.2.1.0/24")},
			want: map[string]string{"c3/E": ok, "c2/E": v1alpha1.ReasonOverlappingCIDR}},
		{name: "an invalid older object claims nothing", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Cluster: cluster(0, []string{"10.2.0.0/16", "0.0.0.0/0"}, nil)}, both("c3", 9, "10.2.0.0/16")},
			want:    map[string]string{"c2/C": v1alpha1.ReasonInvalidCIDR, "c3/C": ok, "c3/E": ok}},
		{name: "a refused claim holds nothing (chain)", cfg: base,
			remotes: []Remote{both("a", 0, "10.1.0.0/16"), both("b", 1, "10.1.0.0/24", "10.3.0.0/16"), both("c", 2, "10.3.0.0/24")},
			want:    map[string]string{"a/C": ok, "b/C": v1alpha1.ReasonOverlappingCIDR, "b/E": v1alpha1.ReasonInvalidCluster, "c/C": ok, "c/E": ok}},
		{name: "the cluster's age counts, not its endpoint's", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Cluster: cluster(0, []string{"10.2.0.0/16"}, nil), Endpoint: endpoint(50, "10.2.0.0/16")},
				{ClusterID: "c3", Cluster: cluster(10, []string{"10.2.0.0/16"}, nil), Endpoint: endpoint(10, "10.2.0.0/16")}},
			want: map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": v1alpha1.ReasonOverlappingCIDR}},
		{name: "duplicate cluster ID", cfg: base, remotes: []Remote{both("c2", 0, "10.2.0.0/16"), both("c2", 1, "10.3.0.0/16"), both("c3", 5, "10.2.0.0/16")},
			want: map[string]string{"c2/C": v1alpha1.ReasonInvalidCluster, "c2/E": v1alpha1.ReasonInvalidCluster, "c3/C": ok, "c3/E": ok}},

		// Globalnet.
		{name: "globalnet: claimed global CIDRs, overlapping pod CIDRs allowed", cfg: gn,
			remotes: []Remote{{ClusterID: "c2", Cluster: global(0, "242.2.0.0/16"), Endpoint: endpoint(0, "242.2.0.0/16")},
				{ClusterID: "c3", Cluster: global(1, "242.3.0.0/16"), Endpoint: endpoint(1, "242.3.0.0/16")}},
			want:     map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": ok, "c3/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16"), "c3": pfxs("242.3.0.0/16")}},
		{name: "globalnet: a part of a claim is no global CIDR, an endpoint may announce one", cfg: gn,
			remotes: []Remote{clOnly("c2", global(0, "242.2.0.0/17")), {ClusterID: "c3", Cluster: global(0, "242.3.0.0/16"), Endpoint: endpoint(0, "242.3.0.0/24")}},
			want:    map[string]string{"c2/C": v1alpha1.ReasonInvalidCIDR, "c3/C": ok, "c3/E": ok}},
		{name: "globalnet: a global CIDR is a block of the policy's size in the supernet", cfg: Config{Claims: map[string][]netip.Prefix{"c2": pfxs("242.0.2.0/24"), "c3": pfxs("242.3.0.0/16"), "c4": pfxs("10.4.0.0/24")}},
			remotes: []Remote{clOnly("c2", global(0, "242.0.2.0/24")), clOnly("c3", global(0, "242.3.0.0/16")), clOnly("c4", global(0, "10.4.0.0/24"))},
			want:    map[string]string{"c2/C": ok, "c3/C": v1alpha1.ReasonInvalidCIDR, "c4/C": v1alpha1.ReasonInvalidCIDR}},
		{name: "globalnet: unclaimed or another's claim", cfg: gn,
			remotes: []Remote{clOnly("c4", global(0, "242.4.0.0/16")), clOnly("c5", global(0, "242.3.0.0/16")), clOnly("c2", global(0, "242.2.0.0/16", "242.9.0.0/16"))},
			want: map[string]string{"c4/C": v1alpha1.ReasonUnclaimedGlobalCIDR, "c5/C": v1alpha1.ReasonUnclaimedGlobalCIDR,
				"c2/C": v1alpha1.ReasonUnclaimedGlobalCIDR}},
		{name: "globalnet off clusterset-wide: claims not checked", cfg: base,
			remotes: []Remote{{ClusterID: "c4", Cluster: global(0, "242.4.0.0/16"), Endpoint: endpoint(0, "242.4.0.0/16")}},
			want:    map[string]string{"c4/C": ok, "c4/E": ok}},
		{name: "globalnet: empty claims refuse every global CIDR", cfg: Config{Policy: policy16, Claims: map[string][]netip.Prefix{}},
			remotes: []Remote{clOnly("c4", global(0, "242.4.0.0/16"))}, want: map[string]string{"c4/C": v1alpha1.ReasonUnclaimedGlobalCIDR}},
		{name: "globalnet: the endpoint must stay inside the global CIDRs", cfg: gn,
			remotes: []Remote{{ClusterID: "c2", Cluster: global(0, "242.2.0.0/16"), Endpoint: endpoint(0, "10.2.0.0/16")}},
			want:    map[string]string{"c2/C": ok, "c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "globalnet: a plain cluster may not take another's claim", cfg: gn,
			remotes: []Remote{both("c9", 0, "242.3.0.0/24"), both("c8", 0, "242.8.0.0/16")},
			want:    map[string]string{"c9/C": v1alpha1.ReasonCIDRNotAllowed, "c9/E": v1alpha1.ReasonOverlappingCIDR, "c8/C": v1alpha1.ReasonCIDRNotAllowed, "c8/E": v1alpha1.ReasonInvalidCluster}},
		{name: "the allowed space bounds pod and service CIDRs", cfg: base,
			remotes: []Remote{both("c2", 0, "8.0.0.0/8"), both("c3", 0, "198.18.0.0/15"), both("c4", 0, "100.64.0.0/10"), both("c5", 0, "172.16.0.0/12"),
				{ClusterID: "c6", Cluster: cluster(0, []string{"10.6.0.0/16"}, []string{"11.0.0.0/8"}), Endpoint: endpoint(0, "10.6.0.0/16")}},
			want: map[string]string{"c2/C": v1alpha1.ReasonCIDRNotAllowed, "c2/E": v1alpha1.ReasonCIDRNotAllowed, "c3/C": v1alpha1.ReasonCIDRNotAllowed,
				"c4/C": ok, "c5/C": ok, "c6/C": v1alpha1.ReasonCIDRNotAllowed, "c6/E": v1alpha1.ReasonInvalidCluster}},
		{name: "an endpoint alone is bounded by the allowed space and its claims", cfg: gn,
			remotes: []Remote{epOnly("c2", 0, "8.0.0.0/8"), epOnly("c3", 0, "242.3.0.0/16"), epOnly("c4", 0, "242.4.0.0/16")},
			want:    map[string]string{"c2/E": v1alpha1.ReasonCIDRNotAllowed, "c3/E": ok, "c4/E": v1alpha1.ReasonUnclaimedGlobalCIDR}},
		{name: "globalnet: the VIP range is no global CIDR", cfg: Config{Claims: map[string][]netip.Prefix{"c2": pfxs("243.0.0.0/16")}},
			remotes: []Remote{clOnly("c2", global(0, "243.0.0.0/16"))}, want: map[string]string{"c2/C": v1alpha1.ReasonInvalidCIDR}},
		// Globalnet, dual-stack (rule 8): IPv6 reached directly.
		{name: "globalnet: IPv6 pod and service CIDRs are reached directly", cfg: gn,
			remotes: []Remote{{ClusterID: "c2", Cluster: dual(0, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112"),
				Endpoint: endpoint(0, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112")}},
			want:     map[string]string{"c2/C": ok, "c2/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16", "fd00:10:96:2::/112", "fd00:10:244:2::/64")}},
		{name: "globalnet: overlapping IPv6 CIDRs, the newer cluster's are left out, its IPv4 stays", cfg: gn,
			remotes: []Remote{
				{ClusterID: "c2", Cluster: dual(0, "242.2.0.0/16", "fd00:10:244::/64", "fd00:10:96:2::/112"), Endpoint: endpoint(0, "242.2.0.0/16", "fd00:10:244::/64", "fd00:10:96:2::/112")},
				{ClusterID: "c3", Cluster: dual(1, "242.3.0.0/16", "fd00:10:244::/64", "fd00:10:96:3::/112"), Endpoint: endpoint(1, "242.3.0.0/16", "fd00:10:244::/64", "fd00:10:96:3::/112")}},
			want: map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": ok, "c3/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16", "fd00:10:96:2::/112", "fd00:10:244::/64"),
				"c3": pfxs("242.3.0.0/16")}},
		{name: "globalnet: IPv6 CIDRs overlapping the local ones are left out", cfg: withLocal(gn, "fd00:10:244:2::/64"),
			remotes: []Remote{{ClusterID: "c2", Cluster: dual(0, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112"),
				Endpoint: endpoint(0, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112")}},
			want:     map[string]string{"c2/C": ok, "c2/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16")}},
		{name: "globalnet: reserved IPv6 CIDRs are left out", cfg: gn,
			remotes: []Remote{{ClusterID: "c2", Cluster: dual(0, "242.2.0.0/16", "fe80::/64", "fd00:10:96:2::/112"),
				Endpoint: endpoint(0, "242.2.0.0/16", "fe80::/64", "fd00:10:96:2::/112")}},
			want:     map[string]string{"c2/C": ok, "c2/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16")}},
		{name: "globalnet: a plain cluster overlapping an older direct IPv6 claim is refused", cfg: gn,
			remotes: []Remote{{ClusterID: "c2", Cluster: dual(0, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112"),
				Endpoint: endpoint(0, "242.2.0.0/16", "fd00:10:244:2::/64")}, both("c4", 1, "10.4.0.0/16", "fd00:10:244:2::/80")},
			want:     map[string]string{"c2/C": ok, "c2/E": ok, "c4/C": v1alpha1.ReasonOverlappingCIDR},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16", "fd00:10:244:2::/64")}},
		{name: "globalnet: an older plain cluster takes the IPv6 space, the globalnet one keeps IPv4", cfg: gn,
			remotes: []Remote{both("c4", 0, "10.4.0.0/16", "fd00:10:244:2::/80"), {ClusterID: "c2", Cluster: dual(1, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112"),
				Endpoint: endpoint(1, "242.2.0.0/16", "fd00:10:244:2::/64")}},
			want:     map[string]string{"c2/C": ok, "c2/E": ok, "c4/C": ok, "c4/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16"), "c4": pfxs("10.4.0.0/16", "fd00:10:244:2::/80")}},
		{name: "globalnet: an endpoint of IPv6 subnets only, all left out, is refused", cfg: gn,
			remotes: []Remote{both("c4", 0, "10.4.0.0/16", "fd00:10:244:2::/80"), {ClusterID: "c2", Cluster: dual(1, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112"),
				Endpoint: endpoint(1, "fd00:10:244:2::/64")}},
			want: map[string]string{"c2/C": ok, "c2/E": v1alpha1.ReasonOverlappingCIDR, "c4/C": ok}},
		// The broker's CIDR claims (rule 7 with Config.CIDRClaims).
		{name: "claims: an old cluster adding an overlapping CIDR late loses it, keeps the rest", cfg: withClaims(base, "c2 0 10.2.0.0/16", "c2 100 10.5.0.0/16", "c3 50 10.5.0.0/16"),
			remotes:  []Remote{both("c2", 0, "10.2.0.0/16", "10.5.0.0/16"), both("c3", 50, "10.5.0.0/16")},
			want:     map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": ok, "c3/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("10.2.0.0/16"), "c3": pfxs("10.5.0.0/16")}},
		{name: "claims: an old cluster whose only CIDR is claimed later than a newer cluster's is refused", cfg: withClaims(base, "c2 100 10.5.0.0/16", "c3 50 10.5.128.0/17"),
			remotes: []Remote{both("c2", 0, "10.5.0.0/16"), both("c3", 50, "10.5.128.0/17")},
			want:    map[string]string{"c2/C": v1alpha1.ReasonOverlappingCIDR, "c2/E": v1alpha1.ReasonInvalidCluster, "c3/C": ok, "c3/E": ok}},
		{name: "claims: an unclaimed CIDR is left out, a cluster without claims refused", cfg: withClaims(base, "c2 0 10.2.0.0/16"),
			remotes:  []Remote{both("c2", 0, "10.2.0.0/16", "10.6.0.0/16"), both("c3", 0, "10.3.0.0/16")},
			want:     map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": v1alpha1.ReasonCIDRNotClaimed, "c3/E": v1alpha1.ReasonInvalidCluster},
			accepted: map[string][]netip.Prefix{"c2": pfxs("10.2.0.0/16")}},
		{name: "claims: an exact tie, the lower cluster ID wins", cfg: withClaims(base, "c2 5 10.5.0.0/16", "c3 5 10.5.0.0/24", "c3 5 10.3.0.0/16"),
			remotes:  []Remote{both("c2", 0, "10.5.0.0/16"), both("c3", 1, "10.5.0.0/24", "10.3.0.0/16")},
			want:     map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": ok, "c3/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("10.5.0.0/16"), "c3": pfxs("10.3.0.0/16")}},
		{name: "claims: a claim not announced still holds its space", cfg: withClaims(base, "c2 0 10.5.0.0/16", "c3 1 10.5.0.0/16"),
			remotes: []Remote{both("c2", 0, "10.2.0.0/16"), both("c3", 1, "10.5.0.0/16")},
			want:    map[string]string{"c2/C": v1alpha1.ReasonCIDRNotClaimed, "c3/C": v1alpha1.ReasonOverlappingCIDR}},
		{name: "claims: an endpoint alone is settled by the claims too", cfg: withClaims(base, "c2 100 10.5.0.0/16", "c2 0 10.2.0.0/16", "c3 50 10.5.0.0/16"),
			remotes:  []Remote{epOnly("c2", 0, "10.5.0.0/16", "10.2.0.0/16"), epOnly("c4", 0, "10.4.0.0/16"), both("c3", 50, "10.5.0.0/16")},
			want:     map[string]string{"c2/E": ok, "c3/C": ok, "c3/E": ok, "c4/E": v1alpha1.ReasonCIDRNotClaimed},
			accepted: map[string][]netip.Prefix{"c2": pfxs("10.2.0.0/16"), "c3": pfxs("10.5.0.0/16")}},
		{name: "claims: a globalnet cluster's IPv4 pod and service CIDRs are not looked at, its IPv6 ones are claimed", cfg: withClaims(gn, "c2 9 fd00:10:244:2::/64", "c3 1 fd00:10:96:3::/112", "c3 1 fd00:10:96:2::/120"),
			remotes: []Remote{{ClusterID: "c2", Cluster: dual(0, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112"), Endpoint: endpoint(0, "242.2.0.0/16", "fd00:10:244:2::/64", "fd00:10:96:2::/112")},
				{ClusterID: "c3", Cluster: dual(1, "242.3.0.0/16", "fd00:10:96:3::/112", "fd00:10:96:2::/120"), Endpoint: endpoint(1, "242.3.0.0/16", "fd00:10:96:3::/112", "fd00:10:96:2::/120")}},
			want: map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": ok, "c3/E": ok},
			accepted: map[string][]netip.Prefix{"c2": pfxs("242.2.0.0/16", "fd00:10:244:2::/64"),
				"c3": pfxs("242.3.0.0/16", "fd00:10:96:2::/120", "fd00:10:96:3::/112")}},
		// Keys (rule 6).
		{name: "keys: each endpoint with its own claimed key", cfg: keys,
			remotes: []Remote{keyed(both("c3", 1, "10.3.0.0/16"), keyC3), keyed(both("c4", 2, "10.4.0.0/16"), keyC4)},
			want:    map[string]string{"c3/C": ok, "c3/E": ok, "c4/C": ok, "c4/E": ok}},
		{name: "keys: a squatter of another cluster's key is refused, the owner keeps its tunnel", cfg: keys,
			// c0 sorts first and is older: neither rescues it.
			remotes: []Remote{keyed(both("c0", 0, "10.10.0.0/16"), keyC3), keyed(both("c3", 1, "10.3.0.0/16"), keyC3)},
			want:    map[string]string{"c0/C": ok, "c0/E": v1alpha1.ReasonKeyInUse, "c3/C": ok, "c3/E": ok}},
		{name: "keys: a squatter of this cluster's key is refused", cfg: keys,
			remotes: []Remote{keyed(epOnly("c2", 0, "10.2.0.0/16"), keyLocal)},
			want:    map[string]string{"c2/E": v1alpha1.ReasonKeyInUse}},
		{name: "keys: an unclaimed key is refused while keys are claimed", cfg: keys,
			remotes: []Remote{keyed(epOnly("c2", 0, "10.2.0.0/16"), keyFree)},
			want:    map[string]string{"c2/E": v1alpha1.ReasonKeyInUse}},
		{name: "keys: not checked without claims", cfg: base,
			remotes: []Remote{keyed(epOnly("c2", 0, "10.2.0.0/16"), keyFree)},
			want:    map[string]string{"c2/E": ok}},
		{name: "keys: an endpoint without a key (vxlan) is not checked", cfg: keys,
			remotes: []Remote{epOnly("c2", 0, "10.2.0.0/16")},
			want:    map[string]string{"c2/E": ok}},
		{name: "keys: an endpoint refused for its key claims no subnets", cfg: keys,
			// c2 is older and overlaps c3; refused for its key, it
			// does not take c3's subnets.
			remotes: []Remote{keyed(epOnly("c2", 0, "10.3.0.0/16"), keyC3), keyed(epOnly("c3", 1, "10.3.0.0/16"), keyC3)},
			want:    map[string]string{"c2/E": v1alpha1.ReasonKeyInUse, "c3/E": ok}},
		{name: "keys: a bad CIDR is reported before the key", cfg: keys,
			remotes: []Remote{keyed(epOnly("c2", 0, "0.0.0.0/0"), keyFree)},
			want:    map[string]string{"c2/E": v1alpha1.ReasonInvalidCIDR}},
		{name: "a plain cluster may not announce the supernet", cfg: base,
			remotes: []Remote{{ClusterID: "c2", Cluster: global(0, "242.2.0.0/16"), Endpoint: endpoint(0, "242.2.0.0/16")}, both("c3", 1, "242.2.0.0/24")},
			want:    map[string]string{"c2/C": ok, "c2/E": ok, "c3/C": v1alpha1.ReasonCIDRNotAllowed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := Decide(tc.cfg, tc.remotes)
			got := verdicts(want)
			for k, w := range tc.want {
				if got[k] != w {
					t.Errorf("%s = %s, want %s (decisions %s)", k, got[k], w, render(want))
				}
			}
			for _, d := range want {
				for _, v := range []*Verdict{d.Cluster, d.Endpoint} {
					if v != nil && (v.Valid != (v.Reason == ok) || v.Message == "" || v.Valid != (len(v.Subnets) > 0)) {
						t.Errorf("%s: inconsistent verdict %+v", d.ClusterID, v)
					}
				}
				if a, ok := tc.accepted[d.ClusterID]; ok && !slices.Equal(d.Accepted(), a) {
					t.Errorf("%s accepted %v, want %v", d.ClusterID, d.Accepted(), a)
				}
			}
			checkInvariants(t, tc.cfg, tc.remotes, want)
			// The verdicts depend on the set of inputs, not their order.
			rng := rand.New(rand.NewPCG(uint64(len(tc.name)), 7))
			for range 50 {
				in := shuffled(rng, tc.remotes)
				if got := Decide(tc.cfg, in); !reflect.DeepEqual(got, want) {
					t.Fatalf("order changed the decisions:\n%s\nwant\n%s", render(got), render(want))
				}
			}
		})
	}
}

// checkInvariants holds for any input: what is accepted is routable.
func checkInvariants(t *testing.T, cfg Config, remotes []Remote, ds []Decision) {
	t.Helper()
	cfg = cfg.WithDefaults()
	keyOf := map[string]string{}
	for _, r := range remotes {
		if r.Endpoint != nil {
			keyOf[r.ClusterID] = r.Endpoint.PublicKey
		}
	}
	for i, d := range ds {
		if i > 0 && ds[i-1].ClusterID >= d.ClusterID {
			t.Errorf("decisions not sorted by unique cluster ID: %s after %s", d.ClusterID, ds[i-1].ClusterID)
		}
		if d.Cluster != nil && d.Cluster.Valid && d.Endpoint != nil && d.Endpoint.Valid {
			for _, p := range d.Endpoint.Subnets {
				if !slices.ContainsFunc(d.Cluster.Subnets, func(q netip.Prefix) bool { return within(p, q) }) {
					t.Errorf("%s: endpoint subnet %s outside its cluster's %v", d.ClusterID, p, d.Cluster.Subnets)
				}
			}
		}
		if e := d.Endpoint; e != nil && e.Valid && cfg.KeyOwners != nil {
			if k := keyOf[d.ClusterID]; k != "" && cfg.KeyOwners[k] != d.ClusterID {
				t.Errorf("%s: endpoint accepted with key %s claimed by %q", d.ClusterID, k, cfg.KeyOwners[k])
			}
		}
		for _, p := range d.Accepted() {
			if p.Bits() == 0 || p != p.Masked() || p.Overlaps(cfg.Policy.VIPRange) || p.Overlaps(cfg.Policy.VIPRangeIPv6) {
				t.Errorf("%s: accepted %s", d.ClusterID, p)
			}
			if slices.ContainsFunc(cfg.LocalCIDRs, p.Overlaps) || slices.ContainsFunc(cfg.GlobalCIDRs, p.Overlaps) {
				t.Errorf("%s: accepted %s overlapping local space", d.ClusterID, p)
			}
			if !within(p, cfg.Policy.Supernet) && (slices.ContainsFunc(DefaultReserved(), p.Overlaps) || !cfg.Policy.allowed(p)) {
				t.Errorf("%s: accepted %s, reserved or outside the allowed space", d.ClusterID, p)
			}
			if cfg.CIDRClaims != nil && !within(p, cfg.Policy.Supernet) && !slices.ContainsFunc(slices.Collect(maps.Keys(cfg.CIDRClaims[d.ClusterID])), func(q netip.Prefix) bool { return within(p, q) }) {
				t.Errorf("%s: accepted %s, claimed by no CIDR claim of its cluster", d.ClusterID, p)
			}
			for _, o := range ds[i+1:] {
				for _, q := range o.Accepted() {
					if p.Overlaps(q) {
						t.Errorf("accepted %s of %s overlaps accepted %s of %s", p, d.ClusterID, q, o.ClusterID)
					}
				}
			}
		}
	}
}

func render(ds []Decision) string {
	var b strings.Builder
	v := func(v *Verdict) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf("%s %v (%s)", v.Reason, v.Subnets, v.Message)
	}
	for _, d := range ds {
		fmt.Fprintf(&b, "%s: cluster %s; endpoint %s\n", d.ClusterID, v(d.Cluster), v(d.Endpoint))
	}
	return b.String()
}

func TestContains(t *testing.T) {
	acc := pfxs("10.2.0.0/16", "242.2.0.0/24")
	for addr, want := range map[string]bool{
		"10.2.3.4": true, "10.3.0.1": false, "242.2.0.255": true, "242.2.1.0": false,
		"::ffff:10.2.0.1": true, "fd00::1": false,
	} {
		if got := Contains(acc, netip.MustParseAddr(addr)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", addr, got, want)
		}
	}
	if Contains(acc, netip.Addr{}) || Contains(nil, netip.MustParseAddr("10.2.0.1")) {
		t.Error("invalid address or no subnets reachable")
	}
}

func TestWithDefaults(t *testing.T) {
	c := Config{}.WithDefaults()
	if !reflect.DeepEqual(c.Policy, DefaultPolicy()) {
		t.Fatalf("defaults %+v", c)
	}
}

func mustPolicy(t testing.TB, spec v1alpha1.ClusterSetPolicySpec) Policy {
	t.Helper()
	p, err := ParsePolicy(spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withClaims is cfg with the broker's CIDR claims, each "<id> <age in
// minutes> <cidr>" (none: an empty, non-nil record).
func withClaims(cfg Config, claims ...string) Config {
	cfg.CIDRClaims = map[string]map[netip.Prefix]time.Time{}
	for _, c := range claims {
		f := strings.Fields(c)
		var age int
		fmt.Sscan(f[1], &age)
		if cfg.CIDRClaims[f[0]] == nil {
			cfg.CIDRClaims[f[0]] = map[netip.Prefix]time.Time{}
		}
		cfg.CIDRClaims[f[0]][netip.MustParsePrefix(f[2])] = t0.Add(time.Duration(age) * time.Minute)
	}
	return cfg
}

// withLocal is cfg with more local CIDRs.
func withLocal(cfg Config, cidrs ...string) Config {
	cfg.LocalCIDRs = append(slices.Clone(cfg.LocalCIDRs), pfxs(cidrs...)...)
	return cfg
}
