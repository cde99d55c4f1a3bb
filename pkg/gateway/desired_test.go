package gateway

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/cable"
)

const (
	keyA = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
	keyB = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var local = Local{
	ClusterID:   "c1",
	Subnets:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")},
	NodeCIDRs:   []netip.Prefix{netip.MustParsePrefix("172.18.1.0/24"), netip.MustParsePrefix("198.18.0.0/15")},
	CableDriver: "wireguard",
	Port:        4500,
}

func ep(id, ip string, port int32, key string, subnets ...string) *v1alpha1.EndpointSpec {
	return &v1alpha1.EndpointSpec{ClusterID: id, Hostname: id + "-gw", CableDriver: "wireguard",
		PublicIP: ip, Port: port, PublicKey: key, Subnets: subnets}
}

func cl(id string, pods, svcs []string) *v1alpha1.ClusterSpec {
	return &v1alpha1.ClusterSpec{ClusterID: id, PodCIDRs: pods, ServiceCIDRs: svcs}
}

func remote(id string, age int, c *v1alpha1.ClusterSpec, e *v1alpha1.EndpointSpec) Remote {
	at := t0.Add(time.Duration(age) * time.Minute)
	return Remote{ClusterID: id, Cluster: c, ClusterCreated: at, Endpoint: e, EndpointCreated: at}
}

// good3 is a valid remote c3 (10.245/16 + 10.97/16), created at minute 0.
func good3() Remote {
	return remote("c3", 0, cl("c3", []string{"10.245.0.0/16"}, []string{"10.97.0.0/16"}),
		ep("c3", "198.18.3.10", 4500, keyA, "10.245.0.0/16", "10.97.0.0/16"))
}

func TestComputeEndpointValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		ep     *v1alpha1.EndpointSpec
		reason string
	}{
		"default route":        {ep("c4", "198.18.4.10", 4500, keyB, "0.0.0.0/0"), v1alpha1.ReasonInvalidCIDR},
		"local pod cidr":       {ep("c4", "198.18.4.10", 4500, keyB, "10.244.5.0/24"), v1alpha1.ReasonOverlappingCIDR},
		"local service cidr":   {ep("c4", "198.18.4.10", 4500, keyB, "10.0.0.0/8"), v1alpha1.ReasonOverlappingCIDR},
		"other cluster's cidr": {ep("c4", "198.18.4.10", 4500, keyB, "10.245.1.0/24"), v1alpha1.ReasonOverlappingCIDR},
		"local node network":   {ep("c4", "198.18.4.10", 4500, keyB, "172.18.0.0/16"), v1alpha1.ReasonOverlappingCIDR},
		"gateway WAN":          {ep("c4", "198.18.4.10", 4500, keyB, "198.19.0.0/16"), v1alpha1.ReasonCIDRNotAllowed}, // and outside the allowed space first
		"host bits":            {ep("c4", "198.18.4.10", 4500, keyB, "10.246.0.1/16"), v1alpha1.ReasonInvalidCIDR},
		"default route halves": {ep("c4", "198.18.4.10", 4500, keyB, "0.0.0.0/1", "128.0.0.0/1"), v1alpha1.ReasonInvalidCIDR},
		"reserved link-local":  {ep("c4", "198.18.4.10", 4500, keyB, "169.254.0.0/16"), v1alpha1.ReasonInvalidCIDR},
		"clusterset VIP range": {ep("c4", "198.18.4.10", 4500, keyB, "243.0.0.0/16"), v1alpha1.ReasonInvalidCIDR},
		"garbage cidr":         {ep("c4", "198.18.4.10", 4500, keyB, "banana"), v1alpha1.ReasonInvalidCIDR},
		"no subnets":           {ep("c4", "198.18.4.10", 4500, keyB), v1alpha1.ReasonInvalidCIDR},
		"self overlap":         {ep("c4", "198.18.4.10", 4500, keyB, "10.246.0.0/16", "10.246.1.0/24"), v1alpha1.ReasonInvalidCIDR},
		"key not base64":       {ep("c4", "198.18.4.10", 4500, "not-a-key!", "10.246.0.0/16"), v1alpha1.ReasonInvalidKey},
		"key short":            {ep("c4", "198.18.4.10", 4500, "AAAA", "10.246.0.0/16"), v1alpha1.ReasonInvalidKey},
		"key zero":             {ep("c4", "198.18.4.10", 4500, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "10.246.0.0/16"), v1alpha1.ReasonInvalidKey},
		"key missing":          {ep("c4", "198.18.4.10", 4500, "", "10.246.0.0/16"), v1alpha1.ReasonInvalidKey},
		"address garbage":      {ep("c4", "198.18.4.300", 4500, keyB, "10.246.0.0/16"), v1alpha1.ReasonInvalidAddress},
		"address unspecified":  {ep("c4", "0.0.0.0", 4500, keyB, "10.246.0.0/16"), v1alpha1.ReasonInvalidAddress},
		"address loopback":     {ep("c4", "127.0.0.1", 4500, keyB, "10.246.0.0/16"), v1alpha1.ReasonInvalidAddress},
		"address multicast":    {ep("c4", "224.0.0.1", 4500, keyB, "10.246.0.0/16"), v1alpha1.ReasonInvalidAddress},
		"port zero":            {ep("c4", "198.18.4.10", 0, keyB, "10.246.0.0/16"), v1alpha1.ReasonInvalidAddress},
		"port too big":         {ep("c4", "198.18.4.10", 70000, keyB, "10.246.0.0/16"), v1alpha1.ReasonInvalidAddress},
		"health ip outside": {func() *v1alpha1.EndpointSpec {
			e := ep("c4", "198.18.4.10", 4500, keyB, "10.246.0.0/16")
			e.HealthCheckIP = "10.1.1.1"
			return e
		}(), v1alpha1.ReasonInvalidAddress},
		"health ip garbage": {func() *v1alpha1.EndpointSpec {
			e := ep("c4", "198.18.4.10", 4500, keyB, "10.246.0.0/16")
			e.HealthCheckIP = "x"
			return e
		}(), v1alpha1.ReasonInvalidAddress},
		"cluster id mismatch": {ep("c3", "198.18.4.10", 4500, keyB, "10.246.0.0/16"), ReasonClusterIDMismatch},
		"driver mismatch": {func() *v1alpha1.EndpointSpec {
			e := ep("c4", "198.18.4.10", 4500, keyB, "10.246.0.0/16")
			e.CableDriver = "vxlan"
			return e
		}(), ReasonDriverMismatch},
	} {
		t.Run(name, func(t *testing.T) {
			d := Compute(local, []Remote{good3(), remote("c4", 5, nil, tc.ep)})
			st := find(t, d, "c4")
			if st.Endpoint == nil || st.Endpoint.Valid || st.Endpoint.Reason != tc.reason {
				t.Fatalf("c4 endpoint verdict = %+v, want invalid with reason %s", st.Endpoint, tc.reason)
			}
			if st.Endpoint.Message == "" {
				t.Error("refusal without message")
			}
			// Nothing programmed for c4; c3 unaffected.
			if len(d.Connections) != 1 || d.Connections[0].ClusterID != "c3" {
				t.Fatalf("connections = %+v, want only c3", d.Connections)
			}
			if v := find(t, d, "c3"); !v.Endpoint.Valid || !v.Cluster.Valid {
				t.Errorf("c3 affected: %+v %+v", v.Cluster, v.Endpoint)
			}
		})
	}
}

func TestComputeValidConnection(t *testing.T) {
	r := good3()
	r.Endpoint.HealthCheckIP = "10.245.0.1"
	r.Endpoint.Subnets = []string{"10.97.0.0/16", "10.245.0.0/16"}
	own := remote("c1", 0, cl("c1", []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}),
		ep("c1", "198.18.1.10", 4500, keyB, "10.244.0.0/16", "10.96.0.0/16"))
	d := Compute(local, []Remote{r, own})
	key, _ := cable.ParseKey(keyA)
	want := []cable.Connection{{
		ClusterID: "c3", Endpoint: netip.MustParseAddrPort("198.18.3.10:4500"), PublicKey: key,
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")},
	}}
	if !reflect.DeepEqual(d.Connections, want) {
		t.Fatalf("connections = %+v\nwant %+v", d.Connections, want)
	}
	if got := d.HealthTargets["c3"]; got != netip.MustParseAddr("10.245.0.1") {
		t.Errorf("health target = %v", got)
	}
	// The own cluster is mirrored as valid and never a connection.
	if st := find(t, d, "c1"); !st.Cluster.Valid || !st.Endpoint.Valid {
		t.Errorf("own cluster = %+v %+v", st.Cluster, st.Endpoint)
	}
}

func TestComputeClusterValidation(t *testing.T) {
	for name, tc := range map[string]struct {
		c      *v1alpha1.ClusterSpec
		reason string
	}{
		"default route pods":  {cl("c4", []string{"0.0.0.0/0"}, []string{"10.98.0.0/16"}), v1alpha1.ReasonInvalidCIDR},
		"overlaps local":      {cl("c4", []string{"10.244.0.0/16"}, []string{"10.98.0.0/16"}), v1alpha1.ReasonOverlappingCIDR},
		"overlaps c3 (older)": {cl("c4", []string{"10.246.0.0/16"}, []string{"10.97.0.0/24"}), v1alpha1.ReasonOverlappingCIDR},
		"id mismatch":         {cl("c9", []string{"10.246.0.0/16"}, []string{"10.98.0.0/16"}), ReasonClusterIDMismatch},
	} {
		t.Run(name, func(t *testing.T) {
			e := ep("c4", "198.18.4.10", 4500, keyB, "10.246.0.0/16", "10.98.0.0/16")
			d := Compute(local, []Remote{good3(), remote("c4", 5, tc.c, e)})
			st := find(t, d, "c4")
			if st.Cluster.Valid || st.Cluster.Reason != tc.reason {
				t.Fatalf("cluster verdict = %+v, want reason %s", st.Cluster, tc.reason)
			}
			// The Endpoint of an invalid cluster is refused too.
			if st.Endpoint.Valid {
				t.Fatalf("endpoint of invalid cluster accepted: %+v", st.Endpoint)
			}
			if len(d.Connections) != 1 || d.Connections[0].ClusterID != "c3" {
				t.Fatalf("connections = %+v, want only c3", d.Connections)
			}
		})
	}
}

func TestComputeEndpointOutsideCluster(t *testing.T) {
	r := good3()
	r.Endpoint.Subnets = []string{"10.245.0.0/16", "10.200.0.0/16"}
	st := find(t, Compute(local, []Remote{r}), "c3")
	if st.Endpoint.Valid || st.Endpoint.Reason != v1alpha1.ReasonInvalidCIDR {
		t.Fatalf("endpoint announcing a subnet its cluster lacks: %+v", st.Endpoint)
	}
}

// Two remotes overlapping each other: the older keeps working, the newer
// is refused, whatever the order of input or the cluster IDs.
func TestComputeRemoteOverlapOldestWins(t *testing.T) {
	old := remote("zz", 0, nil, ep("zz", "198.18.5.10", 4500, keyA, "10.250.0.0/16"))
	young := remote("aa", 10, nil, ep("aa", "198.18.6.10", 4500, keyB, "10.250.128.0/17"))
	for i := 0; i < 10; i++ {
		in := []Remote{old, young}
		rand.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		d := Compute(local, in)
		if len(d.Connections) != 1 || d.Connections[0].ClusterID != "zz" {
			t.Fatalf("connections = %+v, want only the older zz", d.Connections)
		}
		if v := find(t, d, "aa").Endpoint; v.Valid || v.Reason != v1alpha1.ReasonOverlappingCIDR {
			t.Fatalf("younger verdict = %+v", v)
		}
	}
	// Same age: the lower cluster ID wins (deterministic).
	young.EndpointCreated = old.EndpointCreated
	d := Compute(local, []Remote{old, young})
	if len(d.Connections) != 1 || d.Connections[0].ClusterID != "aa" {
		t.Fatalf("tie: connections = %+v, want aa", d.Connections)
	}
	// An invalid older object does not block a valid newer one.
	old.Endpoint.PublicKey = "bogus"
	young.EndpointCreated = t0.Add(time.Hour)
	d = Compute(local, []Remote{old, young})
	if len(d.Connections) != 1 || d.Connections[0].ClusterID != "aa" {
		t.Fatalf("invalid older blocks: connections = %+v", d.Connections)
	}
}

// With the broker's CIDR claims an older cluster adding a CIDR late,
// overlapping a newer cluster's claimed one, gets nothing for it: the
// newer cluster keeps it, the older keeps its other CIDRs. The claims
// are read as cidrClaims reads the broker's objects, forgeries dropped.
func TestComputeCIDRClaims(t *testing.T) {
	claim := func(ns, name, cidr, id string, age int) v1alpha1.CIDRClaim {
		c := v1alpha1.CIDRClaim{Spec: v1alpha1.CIDRClaimSpec{CIDR: cidr, ClusterID: id}}
		c.Namespace, c.Name, c.CreationTimestamp.Time = ns, name, t0.Add(time.Duration(age)*time.Minute)
		return c
	}
	lc := local
	lc.CIDRClaims = cidrClaims([]v1alpha1.CIDRClaim{
		claim("cluster-old", "10.2.0.0-16", "10.2.0.0/16", "old", 0),
		claim("cluster-old", "10.5.0.0-16", "10.5.0.0/16", "old", 100),
		claim("cluster-new", "10.5.0.0-16", "10.5.0.0/16", "new", 50),
		// Forgeries, none of which counts: an old claim in another
		// member's name, a name that is not the CIDR's, outside a
		// member namespace.
		claim("cluster-old", "10.6.0.0-16", "10.6.0.0/16", "new", 0),
		claim("cluster-old", "10.5.0.0-17", "10.5.0.0/16", "old", 0),
		claim("default", "10.5.0.0-16", "10.5.0.0/16", "old", 0),
	})
	if got := len(lc.CIDRClaims["old"]) + len(lc.CIDRClaims["new"]); got != 3 || len(lc.CIDRClaims) != 2 {
		t.Fatalf("claims read = %v, want the 3 honest ones", lc.CIDRClaims)
	}
	old := remote("old", 0, cl("old", []string{"10.2.0.0/16", "10.5.0.0/16"}, nil), ep("old", "198.18.5.10", 4500, keyA, "10.2.0.0/16", "10.5.0.0/16"))
	young := remote("new", 50, cl("new", []string{"10.5.0.0/16"}, nil), ep("new", "198.18.6.10", 4500, keyB, "10.5.0.0/16"))
	d := Compute(lc, []Remote{old, young})
	got := map[string][]netip.Prefix{}
	for _, c := range d.Connections {
		got[c.ClusterID] = c.Subnets
	}
	want := map[string][]netip.Prefix{"old": {netip.MustParsePrefix("10.2.0.0/16")}, "new": {netip.MustParsePrefix("10.5.0.0/16")}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("connections %v, want %v", got, want)
	}
	if v := find(t, d, "old").Cluster; !v.Valid || !strings.Contains(v.Message, "left out: 10.5.0.0/16") || !strings.Contains(v.Message, `claimed earlier by cluster "new"`) {
		t.Errorf("old cluster's verdict %+v, want Valid saying 10.5.0.0/16 was left out for new's older claim", v)
	}
	// Without a claim the CIDR is not routed at all.
	lc.CIDRClaims = map[string]map[netip.Prefix]time.Time{}
	d = Compute(lc, []Remote{young})
	if v := find(t, d, "new").Cluster; v.Valid || v.Reason != v1alpha1.ReasonCIDRNotClaimed || len(d.Connections) != 0 {
		t.Errorf("unclaimed: cluster %+v, connections %v", v, d.Connections)
	}
}

// Compute hands the subnet decisions to pkg/addrpolicy with the local
// global CIDRs and the broker's claims; a remote with global CIDRs is
// reached through them only.
func TestComputeGlobalnet(t *testing.T) {
	lg := local
	var err error
	if lg.Policy, err = addrpolicy.ParsePolicy(v1alpha1.ClusterSetPolicySpec{Globalnet: v1alpha1.GlobalnetPolicy{CIDRBits: 16}}); err != nil {
		t.Fatal(err)
	}
	lg.GlobalCIDRs = []netip.Prefix{netip.MustParsePrefix("242.1.0.0/16")}
	lg.GlobalClaims = map[string][]netip.Prefix{
		"c1": {netip.MustParsePrefix("242.1.0.0/16")},
		"c3": {netip.MustParsePrefix("242.3.0.0/16")},
		"c4": {netip.MustParsePrefix("242.4.0.0/16")},
	}
	globalRemote := func(id string, age int, global, subnet string) Remote {
		c := cl(id, []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}) // the same as c1's: irrelevant
		c.GlobalCIDRs = []string{global}
		return remote(id, age, c, ep(id, "198.18.0."+id[1:], 4500, keyA, subnet))
	}
	d := Compute(lg, []Remote{
		globalRemote("c3", 0, "242.3.0.0/16", "242.3.0.0/16"),
		globalRemote("c4", 1, "242.4.0.0/16", "10.4.0.0/16"),  // endpoint outside its global CIDR
		globalRemote("c5", 2, "242.5.0.0/16", "242.5.0.0/16"), // no claim
		globalRemote("c6", 3, "242.1.0.0/24", "242.1.0.0/24"), // a part of the local global CIDR (and c1's claim)
	})
	for id, want := range map[string][2]string{
		"c3": {v1alpha1.ReasonValid, v1alpha1.ReasonValid},
		"c4": {v1alpha1.ReasonValid, v1alpha1.ReasonInvalidCIDR},
		"c5": {v1alpha1.ReasonUnclaimedGlobalCIDR, v1alpha1.ReasonInvalidCluster},
		"c6": {v1alpha1.ReasonInvalidCIDR, v1alpha1.ReasonOverlappingCIDR}, // not a /16; the Endpoint's own check first
	} {
		st := find(t, d, id)
		if st.Cluster.Reason != want[0] || st.Endpoint.Reason != want[1] {
			t.Errorf("%s: cluster %+v, endpoint %+v, want %v", id, st.Cluster, st.Endpoint, want)
		}
	}
	if len(d.Connections) != 1 || d.Connections[0].ClusterID != "c3" ||
		!slices.Equal(d.Connections[0].Subnets, []netip.Prefix{netip.MustParsePrefix("242.3.0.0/16")}) {
		t.Fatalf("connections = %+v, want c3 through its global CIDR", d.Connections)
	}
	// Dual-stack globalnet remotes: IPv6 pod and service CIDRs go into the
	// tunnel as they are (addrpolicy rule 8); c4's overlap c3's older ones
	// and are left out, its global CIDR stays.
	dual := func(id string, age int, pods6, svcs6 string) Remote {
		r := globalRemote(id, age, "242."+id[1:]+".0.0/16", "242."+id[1:]+".0.0/16")
		r.Cluster.PodCIDRs = append(r.Cluster.PodCIDRs, pods6)
		r.Cluster.ServiceCIDRs = append(r.Cluster.ServiceCIDRs, svcs6)
		r.Endpoint.Subnets = append(r.Endpoint.Subnets, pods6, svcs6)
		return r
	}
	d = Compute(lg, []Remote{dual("c3", 0, "fd00:10:244:3::/64", "fd00:10:96:3::/112"), dual("c4", 1, "fd00:10:244:3::/64", "fd00:10:96:4::/112")})
	want := map[string][]netip.Prefix{
		"c3": {netip.MustParsePrefix("242.3.0.0/16"), netip.MustParsePrefix("fd00:10:96:3::/112"), netip.MustParsePrefix("fd00:10:244:3::/64")},
		"c4": {netip.MustParsePrefix("242.4.0.0/16")},
	}
	for _, c := range d.Connections {
		if !slices.Equal(c.Subnets, want[c.ClusterID]) {
			t.Errorf("%s routed %v, want %v", c.ClusterID, c.Subnets, want[c.ClusterID])
		}
		delete(want, c.ClusterID)
	}
	if st := find(t, d, "c4"); len(want) > 0 || !st.Endpoint.Valid || !strings.Contains(st.Endpoint.Message, "subnets [fd00:10:96:4::/112 fd00:10:244:3::/64] left out") {
		t.Errorf("connections missing %v; c4's endpoint %+v", want, st.Endpoint)
	}

	// Without claims (globalnet off ClusterSet-wide) the claim is not
	// checked, but the local global CIDR is still this cluster's.
	lg.GlobalClaims = nil
	d = Compute(lg, []Remote{globalRemote("c5", 2, "242.5.0.0/16", "242.5.0.0/16"), globalRemote("c6", 3, "242.1.0.0/16", "242.1.0.0/16")})
	if st := find(t, d, "c5"); !st.Cluster.Valid || !st.Endpoint.Valid {
		t.Errorf("c5 without claims: %+v %+v", st.Cluster, st.Endpoint)
	}
	if st := find(t, d, "c6"); st.Cluster.Reason != v1alpha1.ReasonOverlappingCIDR {
		t.Errorf("c6 overlapping the local global CIDR: %+v", st.Cluster)
	}
}

// An object refused for its pairing claims no subnets: a younger valid
// cluster with the same CIDRs is accepted.
func TestComputeRefusedClaimsNothing(t *testing.T) {
	bad := good3()
	bad.Cluster.ClusterID = "c9"
	young := remote("c4", 10, cl("c4", []string{"10.245.0.0/16"}, []string{"10.97.0.0/16"}),
		ep("c4", "198.18.4.10", 4500, keyB, "10.245.0.0/16", "10.97.0.0/16"))
	d := Compute(local, []Remote{bad, young})
	if st := find(t, d, "c3"); st.Cluster.Reason != ReasonClusterIDMismatch || st.Endpoint.Reason != v1alpha1.ReasonInvalidCluster {
		t.Fatalf("c3 = %+v %+v", st.Cluster, st.Endpoint)
	}
	if len(d.Connections) != 1 || d.Connections[0].ClusterID != "c4" {
		t.Fatalf("connections = %+v, want c4", d.Connections)
	}
}

func TestComputeVXLANPort(t *testing.T) {
	lv := local
	lv.CableDriver = "vxlan"
	e := ep("c3", "198.18.3.10", 4789, "", "10.245.0.0/16")
	e.CableDriver = "vxlan"
	st := find(t, Compute(lv, []Remote{remote("c3", 0, nil, e)}), "c3")
	if st.Endpoint.Valid || st.Endpoint.Reason != v1alpha1.ReasonInvalidAddress {
		t.Fatalf("vxlan with another port: %+v", st.Endpoint)
	}
	e.Port = 4500
	d := Compute(lv, []Remote{remote("c3", 0, nil, e)})
	if len(d.Connections) != 1 || !d.Connections[0].PublicKey.IsZero() {
		t.Fatalf("vxlan connection = %+v", d.Connections)
	}
}

// An ipsec remote needs the public key its pair's pre-shared key is
// derived from, like a WireGuard one.
func TestComputeIPsecKey(t *testing.T) {
	li := local
	li.CableDriver, li.Port = "ipsec", 500
	e := ep("c3", "198.18.3.10", 500, "", "10.245.0.0/16")
	e.CableDriver = "ipsec"
	if st := find(t, Compute(li, []Remote{remote("c3", 0, nil, e)}), "c3"); st.Endpoint.Valid || st.Endpoint.Reason != v1alpha1.ReasonInvalidKey {
		t.Fatalf("ipsec without a public key: %+v", st.Endpoint)
	}
	e.PublicKey = keyA
	d := Compute(li, []Remote{remote("c3", 0, nil, e)})
	if len(d.Connections) != 1 || d.Connections[0].PublicKey.String() != keyA {
		t.Fatalf("ipsec connection = %+v", d.Connections)
	}
}

func TestVerdictCondition(t *testing.T) {
	c := Verdict{Reason: v1alpha1.ReasonInvalidKey, Message: "m"}.Condition(3)
	if c.Type != "Valid" || c.Status != "False" || c.ObservedGeneration != 3 || c.Reason != "InvalidKey" {
		t.Fatalf("condition = %+v", c)
	}
	if valid.Condition(1).Status != "True" {
		t.Fatal("valid condition not True")
	}
}

// TestComputeKeySquat: c0 (older, and first by ID) announces c3's key,
// which the broker's claims give c3: c0's Endpoint is refused
// (KeyInUse), c3 keeps its connection, the driver sees no shared key. A
// vxlan gateway does not check keys.
func TestComputeKeySquat(t *testing.T) {
	squat := remote("c0", -10, cl("c0", []string{"10.250.0.0/16"}, []string{"10.98.0.0/16"}),
		ep("c0", "198.18.0.99", 4500, keyA, "10.250.0.0/16"))
	keyed := local
	keyed.KeyOwners = map[string]string{keyA: "c3"}
	d := Compute(keyed, []Remote{squat, good3()})
	if st := find(t, d, "c0"); st.Endpoint.Valid || st.Endpoint.Reason != v1alpha1.ReasonKeyInUse || !strings.Contains(st.Endpoint.Message, `"c3"`) {
		t.Errorf("c0 endpoint = %+v, want KeyInUse naming c3", st.Endpoint)
	}
	if st := find(t, d, "c3"); !st.Endpoint.Valid {
		t.Errorf("c3 endpoint = %+v, want Valid", st.Endpoint)
	}
	if len(d.Connections) != 1 || d.Connections[0].ClusterID != "c3" {
		t.Errorf("connections = %+v, want c3's only", d.Connections)
	}

	vx := keyed
	vx.CableDriver, vx.Port = "vxlan", 4789
	e0, e3 := *squat.Endpoint, *good3().Endpoint
	e0.CableDriver, e0.Port, e3.CableDriver, e3.Port = "vxlan", 4789, "vxlan", 4789
	d = Compute(vx, []Remote{remote("c0", -10, nil, &e0), remote("c3", 0, nil, &e3)})
	if len(d.Connections) != 2 {
		t.Errorf("vxlan: connections = %+v, want both (no keys)", d.Connections)
	}
}

func find(t *testing.T, d Desired, id string) ClusterState {
	t.Helper()
	for _, c := range d.Clusters {
		if c.ClusterID == id {
			return c
		}
	}
	t.Fatalf("cluster %s missing from %+v", id, d.Clusters)
	return ClusterState{}
}
