package gateway

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable"
)

// fuzzLocalID is the local cluster of every FuzzCompute input; remotes may
// use it too (the local cluster's own objects as read from the broker).
const fuzzLocalID = "c1"

// parseComputeSpec reads the FuzzCompute input, one directive per line
// (an id is a remote's broker namespace, i.e. Remote.ClusterID; "=" as a
// published clusterID means the same id, "-" an empty field):
//
//	D <driver> <port>                 local cable driver and tunnel port
//	L <cidr>...                       local pod/service CIDRs
//	G <cidr>...                       local global CIDRs
//	K <id> <cidr>...                  a broker claim (any K line turns globalnet on)
//	P <id> <age> <cidr>...            the broker's CIDR claims of a cluster (any P line turns them on)
//	C <id> <clusterID> <age> <cidr>...  the Cluster's pod CIDRs
//	S <id> <cidr>...                  the Cluster's service CIDRs
//	X <id> <cidr>...                  the Cluster's global CIDRs
//	E <id> <clusterID> <age> <driver> <ip> <port> <key> <healthIP> <subnet>...
//	T <key> <id>                      a broker claim on a tunnel key (any T line turns key claims on)
//
// Unparseable local CIDRs are dropped; everything remote is passed as
// text, garbage included. Ports are parsed as int32 (anything else is 0).
func parseComputeSpec(spec string) (Local, []Remote) {
	loc := Local{ClusterID: fuzzLocalID, CableDriver: string(v1alpha1.CableWireGuard), Port: 4500}
	byID := map[string]*Remote{}
	var order []string
	prefixes := func(ss []string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
			}
		}
		return out
	}
	remote := func(id string) *Remote {
		if r, ok := byID[id]; ok {
			return r
		}
		byID[id] = &Remote{ClusterID: id}
		order = append(order, id)
		return byID[id]
	}
	field := func(id, s string) string {
		switch s {
		case "=":
			return id
		case "-":
			return ""
		}
		return s
	}
	age := func(s string) time.Time {
		n, _ := strconv.Atoi(s)
		return t0.Add(time.Duration(n%10000) * time.Minute)
	}
	cluster := func(r *Remote) *v1alpha1.ClusterSpec {
		if r.Cluster == nil {
			r.Cluster = &v1alpha1.ClusterSpec{ClusterID: r.ClusterID}
			r.ClusterCreated = t0
		}
		return r.Cluster
	}
	for line := range strings.Lines(spec) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch {
		case f[0] == "D" && len(f) >= 3:
			loc.CableDriver = f[1]
			p, _ := strconv.ParseUint(f[2], 10, 16)
			loc.Port = uint16(p)
		case f[0] == "L":
			loc.Subnets = append(loc.Subnets, prefixes(f[1:])...)
		case f[0] == "G":
			loc.GlobalCIDRs = append(loc.GlobalCIDRs, prefixes(f[1:])...)
		case f[0] == "K" && len(f) >= 2:
			if loc.GlobalClaims == nil {
				loc.GlobalClaims = map[string][]netip.Prefix{}
			}
			loc.GlobalClaims[f[1]] = append(loc.GlobalClaims[f[1]], prefixes(f[2:])...)
		case f[0] == "P" && len(f) >= 3:
			if loc.CIDRClaims == nil {
				loc.CIDRClaims = map[string]map[netip.Prefix]time.Time{}
			}
			if loc.CIDRClaims[f[1]] == nil {
				loc.CIDRClaims[f[1]] = map[netip.Prefix]time.Time{}
			}
			for _, p := range prefixes(f[3:]) {
				loc.CIDRClaims[f[1]][p] = age(f[2])
			}
		case f[0] == "T" && len(f) >= 3:
			if loc.KeyOwners == nil {
				loc.KeyOwners = map[string]string{}
			}
			loc.KeyOwners[f[1]] = f[2]
		case f[0] == "C" && len(f) >= 4:
			r := remote(f[1])
			c := cluster(r)
			c.ClusterID = field(f[1], f[2])
			r.ClusterCreated = age(f[3])
			c.PodCIDRs = append(c.PodCIDRs, f[4:]...)
		case f[0] == "S" && len(f) >= 2:
			c := cluster(remote(f[1]))
			c.ServiceCIDRs = append(c.ServiceCIDRs, f[2:]...)
		case f[0] == "X" && len(f) >= 2:
			c := cluster(remote(f[1]))
			c.GlobalCIDRs = append(c.GlobalCIDRs, f[2:]...)
		case f[0] == "E" && len(f) >= 9:
			r := remote(f[1])
			port, _ := strconv.ParseInt(f[6], 10, 32)
			r.Endpoint = &v1alpha1.EndpointSpec{
				ClusterID:     field(f[1], f[2]),
				Hostname:      f[1] + "-gw",
				CableDriver:   v1alpha1.CableDriver(field(f[1], f[4])),
				PublicIP:      field(f[1], f[5]),
				Port:          int32(port),
				PublicKey:     field(f[1], f[7]),
				HealthCheckIP: field(f[1], f[8]),
				Subnets:       f[9:],
			}
			r.EndpointCreated = age(f[3])
		}
	}
	var rs []Remote
	for _, id := range order {
		rs = append(rs, *byID[id])
	}
	return loc, rs
}

// FuzzCompute checks, for any remote Cluster and Endpoint specs, that
// Compute does not panic, that its result does not depend on the order of
// the remotes, that every connection is to a remote whose Endpoint is
// Valid, with canonical, non-default subnets announced by that Endpoint,
// overlapping neither the local subnets nor another connection's, that
// the local cluster is never a connection (its own objects are Valid),
// and that the cable driver's own checks accept every connection. The
// seed corpus is in testdata/fuzz/FuzzCompute (run by a plain go test).
func FuzzCompute(f *testing.F) {
	f.Add("L 10.244.0.0/16 10.96.0.0/16\n" +
		"C c3 = 0 10.245.0.0/16\nS c3 10.97.0.0/16\n" +
		"E c3 = 0 wireguard 198.18.3.10 4500 " + keyA + " - 10.245.0.0/16 10.97.0.0/16\n")
	f.Fuzz(func(t *testing.T, spec string) {
		loc, remotes := parseComputeSpec(spec)
		want := Compute(loc, remotes)
		checkDesired(t, loc, remotes, want)
		rng := rand.New(rand.NewPCG(uint64(len(spec)), 2))
		for range 4 {
			rs := append([]Remote(nil), remotes...)
			rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
			if got := Compute(loc, rs); !reflect.DeepEqual(got, want) {
				t.Fatalf("order changed the result:\n%+v\nwant\n%+v", got, want)
			}
		}
	})
}

func checkDesired(t *testing.T, loc Local, remotes []Remote, d Desired) {
	t.Helper()
	byID := map[string]Remote{}
	for _, r := range remotes {
		byID[r.ClusterID] = r
	}
	states := map[string]ClusterState{}
	for _, st := range d.Clusters {
		states[st.ClusterID] = st
		r := byID[st.ClusterID]
		if (st.Cluster != nil) != (r.Cluster != nil) || (st.Endpoint != nil) != (r.Endpoint != nil) {
			t.Fatalf("cluster %q: verdicts %+v for objects cluster=%v endpoint=%v", st.ClusterID, st, r.Cluster != nil, r.Endpoint != nil)
		}
		if st.ClusterID == loc.ClusterID && (st.Cluster != nil && !st.Cluster.Valid || st.Endpoint != nil && !st.Endpoint.Valid) {
			t.Fatalf("local cluster's own objects refused: %+v", st)
		}
	}
	if len(states) != len(byID) {
		t.Fatalf("%d cluster states for %d remotes", len(states), len(byID))
	}
	var all []netip.Prefix
	owner := map[netip.Prefix]string{}
	seen := map[string]bool{}
	for _, c := range d.Connections {
		where := fmt.Sprintf("connection %q", c.ClusterID)
		if c.ClusterID == loc.ClusterID {
			t.Fatalf("%s: the local cluster became a connection", where)
		}
		if seen[c.ClusterID] {
			t.Fatalf("%s: twice", where)
		}
		seen[c.ClusterID] = true
		st, r := states[c.ClusterID], byID[c.ClusterID]
		if st.Endpoint == nil || !st.Endpoint.Valid || r.Endpoint == nil {
			t.Fatalf("%s: Endpoint not Valid: %+v", where, st.Endpoint)
		}
		if len(c.Subnets) == 0 {
			t.Fatalf("%s: no subnets", where)
		}
		for _, p := range c.Subnets {
			if !p.IsValid() || p != p.Masked() || p.Bits() == 0 {
				t.Fatalf("%s: subnet %s not canonical or default", where, p)
			}
			announced := false
			for _, s := range r.Endpoint.Subnets {
				if q, err := netip.ParsePrefix(s); err == nil && q == p {
					announced = true
				}
			}
			if !announced {
				t.Fatalf("%s: subnet %s not among the Endpoint's %q", where, p, r.Endpoint.Subnets)
			}
			for _, l := range append(append([]netip.Prefix(nil), loc.Subnets...), loc.GlobalCIDRs...) {
				if p.Overlaps(l) {
					t.Fatalf("%s: subnet %s overlaps local %s", where, p, l)
				}
			}
			for _, q := range all {
				if p.Overlaps(q) && owner[q] != c.ClusterID {
					t.Fatalf("%s: subnet %s overlaps %s of %q", where, p, q, owner[q])
				}
			}
			all = append(all, p)
			owner[p] = c.ClusterID
		}
	}
	// With key claims, every connection's key is its cluster's claim, so
	// no two connections share one (the wireguard driver would refuse
	// both).
	if loc.KeyOwners != nil {
		for _, c := range d.Connections {
			if !c.PublicKey.IsZero() && loc.KeyOwners[c.PublicKey.String()] != c.ClusterID {
				t.Fatalf("connection %q: key %s claimed by %q", c.ClusterID, c.PublicKey, loc.KeyOwners[c.PublicKey.String()])
			}
		}
	}
	for id := range d.HealthTargets {
		if !seen[id] {
			t.Fatalf("health target for %q, which is no connection", id)
		}
	}
	// What the gateway hands to the driver passes the driver's checks.
	// (pkg/cable/wireguard, vxlan and ipsec call Validate with these).
	req := cable.Requirements{
		PublicKey:    loc.CableDriver == string(v1alpha1.CableWireGuard) || loc.CableDriver == string(v1alpha1.CableIPsec),
		IPv4Endpoint: loc.CableDriver == string(v1alpha1.CableVXLAN),
	}
	if _, err := cable.Validate(d.Connections, req); err != nil {
		t.Fatalf("the cable driver refuses the connections: %v", err)
	}
}

// With vxlan, a remote's IPv6 subnets are carried beside its IPv4 ones
// (the driver routes them over the IPv4 underlay); only its publicIP
// must be IPv4 (cable.Requirements.IPv4Endpoint). Seed vxlan_globalnet
// found the time the gateway said Valid for an IPv6 subnet the driver
// then refused; now both accept it.
func TestComputeVXLANCarriesIPv6Subnets(t *testing.T) {
	lv := local
	lv.CableDriver, lv.Port = "vxlan", 4789
	e := ep("c3", "198.18.3.10", 4789, "", "10.245.0.0/16", "fd00:3::/64")
	e.CableDriver = "vxlan"
	v6 := ep("c4", "2001:db8::4", 4789, "", "10.246.0.0/16")
	v6.CableDriver = "vxlan"
	d := Compute(lv, []Remote{remote("c3", 0, nil, e), remote("c4", 1, nil, v6)})
	if st := find(t, d, "c3"); !st.Endpoint.Valid {
		t.Fatalf("vxlan with an IPv6 subnet: %+v", st.Endpoint)
	}
	if st := find(t, d, "c4"); st.Endpoint.Valid || st.Endpoint.Reason != v1alpha1.ReasonInvalidAddress {
		t.Fatalf("vxlan with an IPv6 publicIP: %+v", st.Endpoint)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("fd00:3::/64")}
	if len(d.Connections) != 1 || d.Connections[0].ClusterID != "c3" || !cable.SamePrefixes(d.Connections[0].Subnets, want) {
		t.Fatalf("connections = %+v, want c3 with %v", d.Connections, want)
	}
	if _, err := cable.Validate(d.Connections, cable.Requirements{IPv4Endpoint: true}); err != nil {
		t.Fatalf("the vxlan driver refuses what the gateway hands it: %v", err)
	}
}
