package mcs

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/nat"
)

// globalRecord is c2's export of a two-port Service with two backends,
// one ready.
func globalRecord(headless bool) ExportRecord {
	r := ExportRecord{
		ClusterID:        "c2",
		ServiceNamespace: "gn",
		ServiceName:      "web",
		Type:             mcsv1beta1.ClusterSetIP,
		Ports: []causewayv1alpha1.RecordPort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
			{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090},
		},
		ClusterIPs: []string{"10.96.0.10"},
		Endpoints: []causewayv1alpha1.RecordEndpoints{{AddressType: "IPv4",
			Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "grpc", Port: 9000}, {Name: "http", Port: 8080}},
			Backends: []causewayv1alpha1.RecordBackend{
				{Address: "10.244.0.5", Hostname: "a", Ready: true, Serving: true},
				{Address: "10.244.0.6", Hostname: "b"},
			}}},
	}
	if headless {
		r.Type, r.ClusterIPs = mcsv1beta1.Headless, nil
	}
	return r
}

// dualRecord is globalRecord of a dual-stack Service: an IPv6 ClusterIP
// and one ready IPv6 backend besides.
func dualRecord(headless bool) ExportRecord {
	r := globalRecord(headless)
	r.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	if !headless {
		r.ClusterIPs = append(r.ClusterIPs, "fd00:10:96:2::10")
	}
	r.Endpoints = append(r.Endpoints, causewayv1alpha1.RecordEndpoints{AddressType: "IPv6",
		Ports:    r.Endpoints[0].Ports,
		Backends: []causewayv1alpha1.RecordBackend{{Address: "fd00:10:244:2::5", Hostname: "a", Ready: true, Serving: true}}})
	return r
}

// dualTunnel is what a dual-stack globalnet cluster's Endpoint announces:
// its global CIDR and its IPv6 pod and service CIDRs.
var dualTunnel = []netip.Prefix{netip.MustParsePrefix("242.0.2.0/24"),
	netip.MustParsePrefix("fd00:10:244:2::/64"), netip.MustParsePrefix("fd00:10:96:2::/112")}

func withGlobals(r ExportRecord) ExportRecord {
	SetGlobalAddresses(&r, GlobalIngressSpec{IP: "242.0.2.2",
		Ports: []causewayv1alpha1.GlobalIngressPort{
			{Name: "http", Protocol: "TCP", Port: 80, GlobalPort: 1024},
			{Name: "grpc", Protocol: "TCP", Port: 9090, GlobalPort: 1025},
		},
		Pods: []causewayv1alpha1.GlobalPodAddress{{PodIP: "10.244.0.5", GlobalIP: "242.0.2.252"}},
	})
	return r
}

// backendsString renders a source as "addr ports ready/serving" lines.
func backendsString(src SourceEndpoints) string {
	var b []string
	for _, e := range src.Backends {
		b = append(b, fmt.Sprintf("%s %v %v/%v", e.Address, e.Ports, e.Ready, e.Serving))
	}
	return strings.Join(b, "; ")
}

func TestSourceFromRecordGlobalnet(t *testing.T) {
	global := []netip.Prefix{netip.MustParsePrefix("242.0.2.0/24")}
	flat := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("10.244.0.0/16")}
	tunnel := func(subnets []netip.Prefix) Reach { return Reach{Tunnel: true, Subnets: subnets} }
	for _, tc := range []struct {
		name    string
		rec     ExportRecord
		typ     mcsv1beta1.ServiceImportType
		local   bool
		reach   Reach
		want    string
		wantWhy string // substring of the reason; "" = reachable
		// refused: substring of addrpolicy.CheckRecord's refusal of the
		// remote record ("" = accepted).
		refused string
	}{
		{name: "remote ClusterSetIP with globals uses the global IP:ports", rec: withGlobals(globalRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(global), want: "242.0.2.2 map[grpc:1025 http:1024] true/true"},
		{name: "local ClusterSetIP keeps its ClusterIP", rec: withGlobals(globalRecord(false)), local: true,
			typ: mcsv1beta1.ClusterSetIP, want: "10.96.0.10 map[grpc:9090 http:80] true/true"},
		{name: "remote ClusterSetIP without globals, flat tunnel", rec: globalRecord(false),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(flat), want: "10.96.0.10 map[grpc:9090 http:80] true/true"},
		{name: "remote without globals outside the subnets: refused", rec: globalRecord(false),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(global),
			refused: "AddressOutsideClaim: clusterIP 10.96.0.10 is outside the subnets cluster \"c2\" is reached through [242.0.2.0/24] (the record carries no global address of its family)"},
		{name: "no tunnel: not ready even with globals", rec: withGlobals(globalRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: Reach{NoTunnel: "its gateway endpoint is not valid"},
			want: "242.0.2.2 map[grpc:1025 http:1024] false/false", wantWhy: "no tunnel to cluster c2: its gateway endpoint is not valid"},
		{name: "globals outside a tunnel's subnets: refused", rec: withGlobals(globalRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(flat), refused: `port "http" global IP 242.0.2.2 is outside`},
		{name: "remote headless with globals: only pods with a global IP", rec: withGlobals(globalRecord(true)),
			typ: mcsv1beta1.Headless, reach: tunnel(global), want: "242.0.2.252 map[grpc:9000 http:8080] true/true"},
		{name: "local headless keeps pod IPs", rec: withGlobals(globalRecord(true)), local: true,
			typ: mcsv1beta1.Headless, want: "10.244.0.5 map[grpc:9000 http:8080] true/true; 10.244.0.6 map[grpc:9000 http:8080] false/false"},
		{name: "remote headless without globals over a global tunnel: refused", rec: globalRecord(true),
			typ: mcsv1beta1.Headless, reach: tunnel(global), refused: "backend 10.244.0.5 is outside"},
		// Dual-stack under globalnet: IPv4 through the global IP:port,
		// IPv6 directly (addrpolicy.ReachedThroughGlobal).
		{name: "dual-stack ClusterSetIP with globals: global IPv4 pair and the IPv6 ClusterIP", rec: withGlobals(dualRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(dualTunnel),
			want: "242.0.2.2 map[grpc:1025 http:1024] true/true; fd00:10:96:2::10 map[grpc:9090 http:80] true/true"},
		{name: "dual-stack ClusterSetIP over a tunnel without IPv6: the IPv6 ClusterIP left out", rec: withGlobals(dualRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(global), want: "242.0.2.2 map[grpc:1025 http:1024] true/true"},
		{name: "dual-stack IPv6 ClusterIP outside the tunnel's IPv6 subnets: refused", rec: withGlobals(dualRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(append(slices.Clone(global), netip.MustParsePrefix("fd00:10:244:2::/64"))),
			refused: "clusterIP fd00:10:96:2::10 is outside"},
		{name: "local dual-stack ClusterSetIP keeps both ClusterIPs", rec: withGlobals(dualRecord(false)), local: true,
			typ: mcsv1beta1.ClusterSetIP, want: "10.96.0.10 map[grpc:9090 http:80] true/true; fd00:10:96:2::10 map[grpc:9090 http:80] true/true"},
		{name: "dual-stack headless with globals: IPv4 pods at their global IP, IPv6 pods directly", rec: withGlobals(dualRecord(true)),
			typ: mcsv1beta1.Headless, reach: tunnel(dualTunnel),
			want: "242.0.2.252 map[grpc:9000 http:8080] true/true; fd00:10:244:2::5 map[grpc:9000 http:8080] true/true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Aggregate(&tc.rec) // as the exporter publishes it
			if !tc.local {
				err := addrpolicy.CheckRecord(addrpolicy.Config{}, &tc.rec, tc.reach.Claim(tc.rec.ClusterID))
				if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
					t.Fatalf("CheckRecord = %v, want refused %q", err, tc.refused)
				}
				if err != nil {
					return
				}
			}
			src := SourceFromRecord(tc.rec, tc.typ, tc.local)
			why := ""
			if !tc.local {
				src, why = Reachable(src, tc.rec, tc.reach)
			}
			if got := backendsString(src); got != tc.want {
				t.Errorf("backends\n got %s\nwant %s", got, tc.want)
			}
			if tc.wantWhy == "" && why != "" || tc.wantWhy != "" && !strings.Contains(why, tc.wantWhy) {
				t.Errorf("reason %q, want %q", why, tc.wantWhy)
			}
		})
	}
}

func TestAllocateGlobal(t *testing.T) {
	a, err := NewGlobalAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	ports := func(ps ...string) []causewayv1alpha1.GlobalIngressPort {
		var out []causewayv1alpha1.GlobalIngressPort
		for _, p := range ps {
			var name string
			var n int32
			fmt.Sscanf(strings.Replace(p, ":", " ", 1), "%s %d", &name, &n)
			out = append(out, causewayv1alpha1.GlobalIngressPort{Name: name, Protocol: "TCP", Port: n})
		}
		return out
	}
	pairs := func(s GlobalIngressSpec) map[string]int32 {
		m := map[string]int32{}
		for _, p := range s.Ports {
			m[fmt.Sprintf("%s:%d", p.Name, p.Port)] = p.GlobalPort
		}
		return m
	}
	cip := netip.MustParseAddr("10.96.0.10")
	s1, err := AllocateGlobal(a, "ns", "web", GlobalIngressSpec{}, GlobalWant{ClusterIP: cip, Ports: ports("http:80", "https:443")})
	if err != nil || s1.IP == "" || s1.ClusterIP != "10.96.0.10" || len(s1.Ports) != 2 || s1.Ports[0].GlobalPort == s1.Ports[1].GlobalPort {
		t.Fatalf("first allocation %+v, %v", s1, err)
	}
	// A second Service gets other pairs (same IP, other ports, here).
	s2, err := AllocateGlobal(a, "ns", "api", GlobalIngressSpec{}, GlobalWant{ClusterIP: netip.MustParseAddr("10.96.0.11"), Ports: ports("http:80")})
	if err != nil || (s2.IP == s1.IP && (s2.Ports[0].GlobalPort == s1.Ports[0].GlobalPort || s2.Ports[0].GlobalPort == s1.Ports[1].GlobalPort)) {
		t.Fatalf("second Service %+v, %v (first %+v)", s2, err, s1)
	}
	// Changing the ports keeps the unchanged pairs.
	s1b, err := AllocateGlobal(a, "ns", "web", s1, GlobalWant{ClusterIP: cip, Ports: ports("https:443", "metrics:9090")})
	if err != nil || s1b.IP != s1.IP || pairs(s1b)["https:443"] != pairs(s1)["https:443"] || pairs(s1b)["metrics:9090"] == 0 {
		t.Fatalf("port change %+v -> %+v, %v", s1, s1b, err)
	}
	// Unchanged: the same spec.
	if again, err := AllocateGlobal(a, "ns", "web", s1b, GlobalWant{ClusterIP: cip, Ports: ports("https:443", "metrics:9090")}); err != nil ||
		fmt.Sprint(again) != fmt.Sprint(s1b) {
		t.Fatalf("unchanged Service %+v -> %+v, %v", s1b, again, err)
	}

	// Replay into a fresh allocator (restart): the same holdings, and new
	// allocations do not collide with them.
	b, _ := NewGlobalAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	for name, s := range map[string]GlobalIngressSpec{"web": s1b, "api": s2} {
		if err := ReserveGlobal(b, "ns", name, s); err != nil {
			t.Fatal(err)
		}
	}
	s3, err := AllocateGlobal(b, "ns", "db", GlobalIngressSpec{}, GlobalWant{ClusterIP: netip.MustParseAddr("10.96.0.12"), Ports: ports("pg:5432")})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []GlobalIngressSpec{s1b, s2} {
		for _, p := range s.Ports {
			if s.IP == s3.IP && p.GlobalPort == s3.Ports[0].GlobalPort {
				t.Errorf("after replay %+v collides with %+v", s3, s)
			}
		}
	}
	if again, err := AllocateGlobal(b, "ns", "web", s1b, GlobalWant{ClusterIP: cip, Ports: ports("https:443", "metrics:9090")}); err != nil ||
		fmt.Sprint(again) != fmt.Sprint(s1b) {
		t.Errorf("after replay %+v -> %+v, %v", s1b, again, err)
	}
}

func TestAllocateGlobalHeadlessAndExhaustion(t *testing.T) {
	// A /29: health check, 3 ingress IPs, 2 egress IPs.
	a, err := NewGlobalAllocator(netip.MustParsePrefix("242.0.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	pod := netip.MustParseAddr
	h1, err := AllocateGlobal(a, "ns", "db", GlobalIngressSpec{}, GlobalWant{Pods: []netip.Addr{pod("10.244.0.1"), pod("10.244.0.2")}})
	if err != nil || len(h1.Pods) != 2 || h1.Pods[0].GlobalIP == h1.Pods[1].GlobalIP || h1.IP != "" {
		t.Fatalf("headless %+v, %v", h1, err)
	}
	// Pod churn: .1 goes, .3 comes; .2 keeps its global IP.
	h2, err := AllocateGlobal(a, "ns", "db", h1, GlobalWant{Pods: []netip.Addr{pod("10.244.0.2"), pod("10.244.0.3")}})
	if err != nil || len(h2.Pods) != 2 || h2.Pods[0] != h1.Pods[1] {
		t.Fatalf("pod churn %+v -> %+v, %v", h1, h2, err)
	}
	// One ingress IP left: a ClusterSetIP Service takes it; two more pods
	// do not fit, and the headless Service keeps exactly what it had.
	web, err := AllocateGlobal(a, "ns", "web", GlobalIngressSpec{}, GlobalWant{ClusterIP: pod("10.96.0.10"), Ports: []causewayv1alpha1.GlobalIngressPort{{Name: "http", Protocol: "TCP", Port: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	h3, err := AllocateGlobal(a, "ns", "db", h2, GlobalWant{Pods: []netip.Addr{pod("10.244.0.2"), pod("10.244.0.3"), pod("10.244.0.4")}})
	if !errors.Is(err, nat.ErrExhausted) || fmt.Sprint(h3) != fmt.Sprint(h2) {
		t.Fatalf("exhausted: %+v, %v", h3, err)
	}
	if _, err := AllocateGlobal(a, "ns", "other", GlobalIngressSpec{}, GlobalWant{Pods: []netip.Addr{pod("10.244.0.9")}}); !errors.Is(err, nat.ErrExhausted) {
		t.Fatalf("nothing left, got %v", err)
	}
	// Nothing was half allocated: releasing web frees exactly one IP.
	ReleaseGlobal(a, "ns", "web", web)
	if got := a.IPsInUse(); got != 2 {
		t.Errorf("IPs in use after releasing web: %d, want 2", got)
	}
	if _, err := AllocateGlobal(a, "ns", "db", h2, GlobalWant{Pods: []netip.Addr{pod("10.244.0.2"), pod("10.244.0.3"), pod("10.244.0.4")}}); err != nil {
		t.Errorf("after release: %v", err)
	}
}

// TestAllocateGlobalRandom drives 12 Services through random port sets,
// pod sets and type changes in a small CIDR (a /28: 11 ingress IPs), with
// replays into a fresh allocator (restarts) in between, and checks after
// every step: no IP:port or whole IP is held twice, a pod's IP never
// carries port pairs, ports kept keep their pair, pods kept keep their
// IP, an exhausted step changes nothing, and the allocator holds exactly
// the IPs the specs name.
func TestAllocateGlobalRandom(t *testing.T) {
	cidr := netip.MustParsePrefix("242.0.5.0/28")
	rng := rand.New(rand.NewPCG(1, 2))
	a, _ := NewGlobalAllocator(cidr)
	held := map[string]GlobalIngressSpec{}
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d", i)
	}
	allPorts := []causewayv1alpha1.GlobalIngressPort{
		{Name: "a", Protocol: "TCP", Port: 1}, {Name: "b", Protocol: "TCP", Port: 2}, {Name: "c", Protocol: "UDP", Port: 3}, {Name: "d", Protocol: "TCP", Port: 4},
	}
	exhausted := 0
	for step := range 2000 {
		if step%250 == 249 { // restart: replay everything in random order
			a, _ = NewGlobalAllocator(cidr)
			order := rng.Perm(len(names))
			for _, i := range order {
				if err := ReserveGlobal(a, "ns", names[i], held[names[i]]); err != nil {
					t.Fatalf("step %d: replay %s: %v", step, names[i], err)
				}
			}
		}
		name := names[rng.IntN(len(names))]
		var want GlobalWant
		if rng.IntN(3) == 0 { // headless
			for p := range 6 {
				if rng.IntN(2) == 0 {
					want.Pods = append(want.Pods, netip.AddrFrom4([4]byte{10, 244, 0, byte(p + 1)}))
				}
			}
		} else {
			want.ClusterIP = netip.MustParseAddr("10.96.0.1")
			for _, p := range allPorts {
				if rng.IntN(2) == 0 {
					want.Ports = append(want.Ports, p)
				}
			}
		}
		before := held[name]
		got, err := AllocateGlobal(a, "ns", name, before, want)
		switch {
		case errors.Is(err, nat.ErrExhausted):
			exhausted++
			if fmt.Sprint(got) != fmt.Sprint(before) {
				t.Fatalf("step %d: exhausted changed %+v to %+v", step, before, got)
			}
		case err != nil:
			t.Fatalf("step %d: %v", step, err)
		default:
			// Stability.
			old := map[portKey]int32{}
			for _, p := range before.Ports {
				old[keyOf(p)] = p.GlobalPort
			}
			for _, p := range got.Ports {
				if gp, ok := old[keyOf(p)]; ok && before.IP == got.IP && gp != p.GlobalPort {
					t.Fatalf("step %d: %s port %s moved %d -> %d", step, name, p.Name, gp, p.GlobalPort)
				}
			}
			oldPods := map[string]string{}
			for _, p := range before.Pods {
				oldPods[p.PodIP] = p.GlobalIP
			}
			for _, p := range got.Pods {
				if g, ok := oldPods[p.PodIP]; ok && g != p.GlobalIP {
					t.Fatalf("step %d: %s pod %s moved %s -> %s", step, name, p.PodIP, g, p.GlobalIP)
				}
			}
			if len(got.Ports) != len(want.Ports) || len(got.Pods) != len(want.Pods) {
				t.Fatalf("step %d: want %+v, got %+v", step, want, got)
			}
			held[name] = got
		}
		// Invariants over every Service.
		pairs, whole := map[string]string{}, map[string]string{}
		for n, s := range held {
			for _, p := range s.Ports {
				k := fmt.Sprintf("%s:%d", s.IP, p.GlobalPort)
				if o, ok := pairs[k]; ok {
					t.Fatalf("step %d: %s held by %s and %s", step, k, o, n)
				}
				pairs[k] = n
				if !cidr.Contains(netip.MustParseAddr(s.IP)) {
					t.Fatalf("step %d: %s outside %s", step, s.IP, cidr)
				}
			}
			for _, p := range s.Pods {
				if o, ok := whole[p.GlobalIP]; ok {
					t.Fatalf("step %d: pod IP %s held by %s and %s", step, p.GlobalIP, o, n)
				}
				whole[p.GlobalIP] = n
			}
		}
		ips := map[string]bool{}
		for k := range pairs {
			ip, _, _ := strings.Cut(k, ":")
			if o, ok := whole[ip]; ok {
				t.Fatalf("step %d: %s carries pairs and is held whole by %s", step, ip, o)
			}
			ips[ip] = true
		}
		// The allocator holds exactly what the specs say: nothing leaked.
		if got, want := a.IPsInUse(), len(ips)+len(whole); got != want {
			t.Fatalf("step %d: allocator has %d IPs in use, the specs %d", step, got, want)
		}
	}
	if exhausted == 0 {
		t.Error("the pool was never exhausted; the test does not exercise rollback")
	}
	t.Logf("%d of 2000 steps exhausted", exhausted)
}

// TestGlobalWantForPodCIDRs: a headless Service's backends get global IPs
// only inside the cluster's pod CIDRs; an address anyone with rights on
// the namespace can put into an EndpointSlice (a node's, the metadata
// service's, another network's) gets none, and without pod CIDRs no
// backend gets one.
func TestGlobalWantForPodCIDRs(t *testing.T) {
	headless := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	ready := discoveryv1.EndpointConditions{Ready: ptrTo(true)}
	slice := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.244.1.5"}, Conditions: ready},
		{Addresses: []string{"10.244.2.7", "172.18.1.11"}, Conditions: ready}, // a pod and a node address
		{Addresses: []string{"169.254.169.254"}, Conditions: ready},
		{Addresses: []string{"10.96.0.10"}, Conditions: ready}, // a ClusterIP
		{Addresses: []string{"8.8.8.8"}, Conditions: ready},
	}}
	for _, tc := range []struct {
		name     string
		podCIDRs []string
		want     []string
	}{
		{name: "pod CIDR", podCIDRs: []string{"10.244.0.0/16"}, want: []string{"10.244.1.5", "10.244.2.7"}},
		{name: "two pod CIDRs", podCIDRs: []string{"10.244.1.0/24", "10.244.2.0/24"}, want: []string{"10.244.1.5", "10.244.2.7"}},
		{name: "narrower", podCIDRs: []string{"10.244.2.0/24"}, want: []string{"10.244.2.7"}},
		{name: "none", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cidrs []netip.Prefix
			for _, c := range tc.podCIDRs {
				cidrs = append(cidrs, netip.MustParsePrefix(c))
			}
			got := GlobalWantFor(headless, []discoveryv1.EndpointSlice{slice}, cidrs)
			var pods []string
			for _, p := range got.Pods {
				pods = append(pods, p.String())
			}
			if !slices.Equal(pods, tc.want) {
				t.Errorf("pods with global IPs %v, want %v", pods, tc.want)
			}
		})
	}
}
