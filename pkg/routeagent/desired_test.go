package routeagent

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

var (
	nodeW  = netip.MustParseAddr("172.18.1.12")
	nodeG0 = netip.MustParseAddr("172.18.1.10")
	nodeG1 = netip.MustParseAddr("172.18.1.11")
	local  = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")}
	c3     = Remote{ClusterID: "c3", Subnets: []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("10.97.0.0/16")}}
	c4     = Remote{ClusterID: "c4", Subnets: []netip.Prefix{netip.MustParsePrefix("10.246.0.0/16")}}
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// remoteRoutes is d's routes at RouteMetric but the default VIP range's,
// which every node has.
func remoteRoutes(d DesiredState) []Route {
	vipRange := pfx(addrpolicy.DefaultVIPRange)
	return slices.DeleteFunc(routesAt(d, RouteMetric), func(r Route) bool { return r.Dst == vipRange && !r.Via.IsValid() })
}

// routesAt is d's routes with metric m.
func routesAt(d DesiredState, m int) []Route {
	return slices.DeleteFunc(slices.Clone(d.Routes), func(r Route) bool { return r.Metric != m })
}

// fallbacks is the destinations of d's fallback routes, after checking
// that each is an unreachable route.
func fallbacks(t *testing.T, d DesiredState) []string {
	t.Helper()
	var out []string
	for _, r := range routesAt(d, FallbackMetric) {
		if r.Via.IsValid() {
			t.Errorf("fallback route %s has a next hop", r)
		}
		out = append(out, r.Dst.String())
	}
	return out
}

func TestComputeStates(t *testing.T) {
	g0 := &Gateway{Hostname: "n0", NodeIP: nodeG0}
	for name, tc := range map[string]struct {
		in         Inputs
		wantPeer   netip.Addr // invalid: no peer
		wantRoutes []string   // at RouteMetric
		// wantFallbacks are the destinations of the unreachable routes at
		// FallbackMetric: every node's, the gateway node's too.
		wantFallbacks []string
		wantSkip      []string
		wantLoose     bool
		noOverlay     bool
	}{
		"worker routes via the gateway's overlay address": {
			in:            Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Remotes: []Remote{c3, c4}},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"10.97.0.0/16 via 241.18.1.10 metric 100", "10.245.0.0/16 via 241.18.1.10 metric 100", "10.246.0.0/16 via 241.18.1.10 metric 100", "unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.97.0.0/16", "10.245.0.0/16", "10.246.0.0/16", "242.0.0.0/8"},
			wantLoose:     true,
		},
		"the active gateway node has no routes (pkg/cable owns them)": {
			in:            Inputs{NodeName: "n0", NodeIP: nodeG0, Gateway: g0, Remotes: []Remote{c3}},
			wantRoutes:    []string{"unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.97.0.0/16", "10.245.0.0/16", "242.0.0.0/8"},
		},
		"gateway recognised by address when the hostname differs": {
			in:            Inputs{NodeName: "n0.example", NodeIP: nodeG0, Gateway: g0, Remotes: []Remote{c3}},
			wantRoutes:    []string{"unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.97.0.0/16", "10.245.0.0/16", "242.0.0.0/8"},
		},
		"no gateway known: unreachable routes": {
			in:            Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c3}},
			wantRoutes:    []string{"unreachable 10.97.0.0/16 metric 100", "unreachable 10.245.0.0/16 metric 100", "unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.97.0.0/16", "10.245.0.0/16", "242.0.0.0/8"},
		},
		"no remotes: overlay only": {
			in:            Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"242.0.0.0/8"},
		},
		"bad remote subnets are skipped, others kept": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Params: Params{LocalCIDRs: local}, Remotes: []Remote{
				{ClusterID: "bad", Subnets: []netip.Prefix{pfx("0.0.0.0/0"), pfx("10.244.5.0/24"), pfx("10.9.1.1/16"), pfx("::ffff:10.0.0.0/104"), pfx("::/0"), {}}},
				c4,
			}},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"10.246.0.0/16 via 241.18.1.10 metric 100", "unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantSkip:      []string{"0.0.0.0/0", "10.244.5.0/24 overlaps a local", "10.9.1.1/16", "::ffff:10.0.0.0/104", "::/0", "invalid Prefix"},
			wantLoose:     true,
		},
		// IPv6 remote subnets (a dual-stack globalnet cluster's, reached
		// directly) go over the same IPv4 overlay, via the gateway's
		// link-local overlay address.
		"IPv6 remote subnets via the gateway's link-local overlay address": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Remotes: []Remote{
				{ClusterID: "c4", Subnets: []netip.Prefix{pfx("242.0.4.0/24"), pfx("fd00:10:244:4::/64"), pfx("fd00:10:96:4::/112")}}},
				Params: Params{LocalCIDRs: append(slices.Clone(local), pfx("fd00:10:244:1::/64")), VIPRangeIPv6: pfx(addrpolicy.DefaultVIPRangeIPv6)}},
			wantPeer: nodeG0,
			wantRoutes: []string{"242.0.4.0/24 via 241.18.1.10 metric 100", "unreachable 243.0.0.0/12 metric 100", "fd00:10:96:4::/112 via fe80::cb:acff:fe12:10a metric 100",
				"fd00:10:244:4::/64 via fe80::cb:acff:fe12:10a metric 100", "unreachable fd63:6175:7365::/108 metric 100"},
			wantFallbacks: []string{"242.0.0.0/8", "242.0.4.0/24", "fd00:10:96:4::/112", "fd00:10:244:4::/64"},
			wantLoose:     true,
		},
		"IPv6 remote subnets overlapping a local CIDR or the IPv6 VIP range are skipped": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Remotes: []Remote{c4,
				{ClusterID: "c6", Subnets: []netip.Prefix{pfx("fd00:10:244:1::/80"), pfx("fd63:6175:7365::/112")}}},
				Params: Params{LocalCIDRs: append(slices.Clone(local), pfx("fd00:10:244:1::/64")), VIPRangeIPv6: pfx(addrpolicy.DefaultVIPRangeIPv6)}},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"10.246.0.0/16 via 241.18.1.10 metric 100", "unreachable 243.0.0.0/12 metric 100", "unreachable fd63:6175:7365::/108 metric 100"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantSkip:      []string{"c6: fd00:10:244:1::/80 overlaps a local CIDR", "c6: fd63:6175:7365::/112 overlaps the IPv6 VIP range"},
			wantLoose:     true,
		},
		// Arbitration is pkg/addrpolicy's, in the gateway: what is Valid is
		// routed (all of it via the same gateway).
		"overlapping remotes are not re-arbitrated": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Remotes: []Remote{
				c3, {ClusterID: "c5", Subnets: []netip.Prefix{pfx("10.245.1.0/24"), pfx("10.97.0.0/16")}},
			}},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"10.97.0.0/16 via 241.18.1.10 metric 100", "10.245.0.0/16 via 241.18.1.10 metric 100", "10.245.1.0/24 via 241.18.1.10 metric 100", "unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.97.0.0/16", "10.245.0.0/16", "10.245.1.0/24", "242.0.0.0/8"},
			wantLoose:     true,
		},
		"gateway colliding on the overlay address: unreachable": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: &Gateway{Hostname: "x", NodeIP: netip.MustParseAddr("192.18.1.12")},
				Remotes: []Remote{c4}},
			wantRoutes:    []string{"unreachable 10.246.0.0/16 metric 100", "unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantSkip:      []string{"share the overlay address 241.18.1.12"},
		},
		"IPv6 node: rules, the VIP range and the fallbacks only": {
			in:            Inputs{NodeName: "n2", NodeIP: netip.MustParseAddr("fd00::2"), Gateway: g0, Remotes: []Remote{c4}},
			noOverlay:     true,
			wantRoutes:    []string{"unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantSkip:      []string{"not IPv4"},
		},
		"another VIP range, sorted among the remote subnets": {
			in:            Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Params: Params{VIPRange: pfx("10.100.0.0/16")}, Remotes: []Remote{c3}},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"10.97.0.0/16 via 241.18.1.10 metric 100", "unreachable 10.100.0.0/16 metric 100", "10.245.0.0/16 via 241.18.1.10 metric 100"},
			wantFallbacks: []string{"10.97.0.0/16", "10.245.0.0/16", "242.0.0.0/8"},
			wantLoose:     true,
		},
		"the IPv6 VIP range is routed unreachable too": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Remotes: []Remote{c4},
				Params: Params{VIPRangeIPv6: pfx(addrpolicy.DefaultVIPRangeIPv6)}},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"10.246.0.0/16 via 241.18.1.10 metric 100", "unreachable 243.0.0.0/12 metric 100", "unreachable fd63:6175:7365::/108 metric 100"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantLoose:     true,
		},
		"a remote subnet overlapping the VIP range is skipped": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: g0, Remotes: []Remote{c4,
				{ClusterID: "c6", Subnets: []netip.Prefix{pfx("243.1.0.0/16"), pfx("240.0.0.0/4")}}}},
			wantPeer:      nodeG0,
			wantRoutes:    []string{"10.246.0.0/16 via 241.18.1.10 metric 100", "unreachable 243.0.0.0/12 metric 100"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantSkip:      []string{"c6: 243.1.0.0/16 overlaps the VIP range 243.0.0.0/12", "c6: 240.0.0.0/4 overlaps the VIP range"},
			wantLoose:     true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := Compute(tc.in)
			if tc.noOverlay != (d.Overlay == nil) {
				t.Fatalf("overlay %v, want none=%v", d.Overlay, tc.noOverlay)
			}
			if d.Overlay != nil {
				o := d.Overlay
				if o.Device != DefaultDevice || o.VNI != DefaultVNI || o.Port != DefaultPort || o.LocalIP != tc.in.NodeIP ||
					o.Address != OverlayAddr(tc.in.NodeIP) || o.MAC.String() != OverlayMAC(tc.in.NodeIP).String() {
					t.Errorf("overlay %+v", o)
				}
				if got := o.Peer; tc.wantPeer.IsValid() != (got != nil) || got != nil &&
					(got.NodeIP != tc.wantPeer || got.Address != OverlayAddr(tc.wantPeer) || got.MAC.String() != OverlayMAC(tc.wantPeer).String()) {
					t.Errorf("peer %+v, want node %v", got, tc.wantPeer)
				}
				if !slices.Contains(d.Sysctls, Sysctl{Path: "net/ipv4/conf/vx-causeway/rp_filter", Value: "2"}) {
					t.Errorf("no loose rp_filter on the overlay device: %v", d.Sysctls)
				}
			}
			var routes []string
			for _, r := range routesAt(d, RouteMetric) {
				routes = append(routes, r.String())
			}
			if !slices.Equal(routes, tc.wantRoutes) {
				t.Errorf("routes %q, want %q", routes, tc.wantRoutes)
			}
			if got := fallbacks(t, d); !slices.Equal(got, tc.wantFallbacks) {
				t.Errorf("fallback routes to %q, want %q", got, tc.wantFallbacks)
			}
			if len(routesAt(d, RouteMetric))+len(routesAt(d, FallbackMetric)) != len(d.Routes) {
				t.Errorf("routes at other metrics: %v", d.Routes)
			}
			if d.LooseUplinkRPFilter != tc.wantLoose {
				t.Errorf("loose uplink %v, want %v", d.LooseUplinkRPFilter, tc.wantLoose)
			}
			skipped := strings.Join(d.Skipped, "\n")
			if len(d.Skipped) != len(tc.wantSkip) {
				t.Errorf("skipped:\n%s\nwant %d entries", skipped, len(tc.wantSkip))
			}
			for _, w := range tc.wantSkip {
				if !strings.Contains(skipped, w) {
					t.Errorf("skipped:\n%s\nwant one mentioning %q", skipped, w)
				}
			}
			// Rules cover exactly the routed (or unreachable) subnets.
			var ruleSubnets []string
			for _, r := range slices.Concat(d.Rules.Chains["filter"][ChainForward], d.Rules6.Chains["filter"][ChainForward]) {
				if strings.HasPrefix(r, "-d ") {
					ruleSubnets = append(ruleSubnets, strings.Fields(r)[1])
				}
			}
			for _, r := range d.Rules6.Chains["filter"][ChainForward] {
				if !strings.Contains(r, ":") {
					t.Errorf("ip6tables rule for an IPv4 subnet: %q", r)
				}
			}
			if p := d.Overlay; p != nil && p.Peer != nil && p.Peer.Address6.IsValid() != (len(d.Rules6.Chains) > 0) {
				t.Errorf("peer's IPv6 next hop %v with IPv6 rules %v", p.Peer.Address6, d.Rules6.Chains)
			}
			if ipv6 := slices.Contains(d.Sysctls, Sysctl{Path: "net/ipv6/conf/all/forwarding", Value: "1"}); d.Overlay != nil && ipv6 != (len(d.Rules6.Chains) > 0) {
				t.Errorf("IPv6 forwarding %v with IPv6 rules %v", ipv6, d.Rules6.Chains)
			}
			// Rules cover the remote subnets, not the VIP ranges.
			params := tc.in.Params.withDefaults()
			var routed []string
			for _, r := range routesAt(d, RouteMetric) {
				if r.Dst != params.VIPRange && r.Dst != params.VIPRangeIPv6 {
					routed = append(routed, r.Dst.String())
				}
			}
			if d.Overlay != nil && d.Overlay.Peer == nil && len(routed) == 0 {
				routed = ruleSubnets // gateway node: rules, no routes
			}
			if d.Overlay != nil && !slices.Equal(ruleSubnets, routed) {
				t.Errorf("forward rules for %v, routes for %v", ruleSubnets, routed)
			}
		})
	}
}

// The fallbacks sit under every other route to a remote: the agent's own
// (RouteMetric) and pkg/cable's on the gateway node (metric 0; IPv6
// routes without a metric get the kernel's 1024).
func TestFallbackMetricIsTheLastResort(t *testing.T) {
	for _, m := range []int{0, RouteMetric, 1024} {
		if FallbackMetric <= m {
			t.Errorf("FallbackMetric %d does not lose to metric %d", FallbackMetric, m)
		}
	}
}

// Which remote subnets get a fallback: exactly those routed (or, on the
// gateway node, routed by pkg/cable) — the Valid remotes' — and the
// globalnet supernet, on every node; never a refused remote's, nor
// anything the agent's safety checks leave out.
func TestComputeFallbacks(t *testing.T) {
	localEP := endpoint("c1", "n0", nodeG0.String(), "10.244.0.0/16")
	accepted := endpoint("c3", "g", "", "10.245.0.0/16", "10.97.0.0/16")
	setValid(accepted, true)
	// A refused remote announcing someone else's addresses: an
	// unreachable route for them would cut this cluster off them.
	refused := endpoint("c4", "g", "", "8.8.8.0/24")
	setValid(refused, false)
	pending := endpoint("c5", "g", "", "10.247.0.0/16") // not judged yet
	eps := []v1alpha1.Endpoint{*localEP, *accepted, *refused, *pending}
	for _, node := range []Node{{ClusterID: "c1", Name: "n2", IP: nodeW}, {ClusterID: "c1", Name: "n0", IP: nodeG0}} {
		in, _ := InputsFromEndpoints(node, eps, Params{LocalCIDRs: local})
		d := Compute(in)
		if got, want := fallbacks(t, d), []string{"10.97.0.0/16", "10.245.0.0/16", "242.0.0.0/8"}; !slices.Equal(got, want) {
			t.Errorf("%s: fallbacks %q, want %q", node.Name, got, want)
		}
	}

	for name, tc := range map[string]struct {
		in            Inputs
		wantRoutes    []string // destinations at RouteMetric, VIP range left out
		wantFallbacks []string
		wantSkip      []string
	}{
		"a subnet holding this node's address is neither routed nor a fallback": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: &Gateway{Hostname: "n0", NodeIP: nodeG0},
				Remotes: []Remote{c4, {ClusterID: "c6", Subnets: []netip.Prefix{pfx("172.18.1.0/24")}}}},
			wantRoutes:    []string{"10.246.0.0/16"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantSkip:      []string{"c6: 172.18.1.0/24 contains the node address 172.18.1.12"},
		},
		"a subnet holding the gateway node's address neither": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: &Gateway{Hostname: "n0", NodeIP: nodeG0},
				Remotes: []Remote{c4, {ClusterID: "c6", Subnets: []netip.Prefix{pfx("172.18.1.10/32")}}}},
			wantRoutes:    []string{"10.246.0.0/16"},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
			wantSkip:      []string{"c6: 172.18.1.10/32 contains the node address 172.18.1.10"},
		},
		"the gateway node: fallbacks only": {
			in:            Inputs{NodeName: "n0", NodeIP: nodeG0, Gateway: &Gateway{Hostname: "n0", NodeIP: nodeG0}, Remotes: []Remote{c4}},
			wantFallbacks: []string{"10.246.0.0/16", "242.0.0.0/8"},
		},
		"the policy's supernet": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c4},
				Params: Params{Supernet: pfx("100.99.0.0/16")}},
			wantRoutes:    []string{"10.246.0.0/16"},
			wantFallbacks: []string{"10.246.0.0/16", "100.99.0.0/16"},
		},
		"a supernet overlapping a local CIDR gets no fallback": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c4},
				Params: Params{Supernet: pfx("10.0.0.0/8"), LocalCIDRs: local}},
			wantRoutes:    []string{"10.246.0.0/16"},
			wantFallbacks: []string{"10.246.0.0/16"},
			wantSkip:      []string{"globalnet supernet 10.0.0.0/8 overlaps a local CIDR: no fallback route"},
		},
		"a supernet holding this node's address gets none either": {
			in: Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c4},
				Params: Params{Supernet: pfx("172.16.0.0/12")}},
			wantRoutes:    []string{"10.246.0.0/16"},
			wantFallbacks: []string{"10.246.0.0/16"},
			wantSkip:      []string{"globalnet supernet 172.16.0.0/12 contains the node address 172.18.1.12: no fallback route"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			d := Compute(tc.in)
			var routes []string
			for _, r := range remoteRoutes(d) {
				routes = append(routes, r.Dst.String())
			}
			if !slices.Equal(routes, tc.wantRoutes) {
				t.Errorf("routes to %q, want %q", routes, tc.wantRoutes)
			}
			if got := fallbacks(t, d); !slices.Equal(got, tc.wantFallbacks) {
				t.Errorf("fallbacks %q, want %q", got, tc.wantFallbacks)
			}
			if !slices.Equal(d.Skipped, tc.wantSkip) {
				t.Errorf("skipped %q, want %q", d.Skipped, tc.wantSkip)
			}
		})
	}
}

func TestComputeMSS(t *testing.T) {
	for _, tc := range []struct {
		overlay, tunnel, want int
	}{
		{0, 0, 1380},       // defaults: overlay 1450, WireGuard 1420
		{8951, 1420, 1380}, // jumbo node network, WireGuard WAN
		{1450, 1450, 1410}, // VXLAN cable
		{1400, 1450, 1360}, // small node network
	} {
		d := Compute(Inputs{NodeName: "n2", NodeIP: nodeW, Remotes: []Remote{c4, {ClusterID: "c6", Subnets: []netip.Prefix{pfx("fd00:10:244:6::/64")}}},
			Params: Params{OverlayMTU: tc.overlay, TunnelMTU: tc.tunnel}})
		// IPv6's header is 20 bytes longer: its MSS 20 smaller.
		for _, f := range []struct {
			rules []string
			want  int
		}{{d.Rules.Chains["mangle"][ChainMSS], tc.want}, {d.Rules6.Chains["mangle"][ChainMSS], tc.want - 20}} {
			if len(f.rules) != 2 {
				t.Fatalf("mss rules %q", f.rules)
			}
			for _, r := range f.rules {
				if !strings.HasSuffix(r, " --set-mss "+strconv.Itoa(f.want)) || !strings.Contains(r, "--mss "+strconv.Itoa(f.want+1)+":65535") {
					t.Errorf("overlay %d tunnel %d: rule %q, want set-mss %d only above it", tc.overlay, tc.tunnel, r, f.want)
				}
			}
		}
	}
}

// The desired state depends on the set of inputs, not their order.
func TestComputeOrderIndependent(t *testing.T) {
	remotes := []Remote{c3, c4, {ClusterID: "c5", Subnets: []netip.Prefix{pfx("10.245.1.0/24"), pfx("10.250.0.0/16")}},
		{ClusterID: "c6", Subnets: []netip.Prefix{pfx("0.0.0.0/0")}}}
	in := Inputs{NodeName: "n2", NodeIP: nodeW, Gateway: &Gateway{Hostname: "n0", NodeIP: nodeG0}, Remotes: remotes,
		Params: Params{LocalCIDRs: local}}
	want := Compute(in).String()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		shuffled := slices.Clone(remotes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for i := range shuffled {
			s := slices.Clone(shuffled[i].Subnets)
			rng.Shuffle(len(s), func(a, b int) { s[a], s[b] = s[b], s[a] })
			shuffled[i].Subnets = s
		}
		in.Remotes = shuffled
		if got := Compute(in).String(); got != want {
			t.Fatalf("order changed the desired state:\n%s\nwant\n%s", got, want)
		}
	}
}
