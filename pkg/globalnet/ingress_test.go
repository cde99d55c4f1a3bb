package globalnet

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

	"github.com/causeway-net/causeway/api/v1alpha1"
)

func TestAssignIngress(t *testing.T) {
	a, err := NewIngressAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	ports := func(ps ...string) []v1alpha1.GlobalIngressPort {
		var out []v1alpha1.GlobalIngressPort
		for _, p := range ps {
			var name string
			var n int32
			fmt.Sscanf(strings.Replace(p, ":", " ", 1), "%s %d", &name, &n)
			out = append(out, v1alpha1.GlobalIngressPort{Name: name, Protocol: "TCP", Port: n})
		}
		return out
	}
	pairs := func(s v1alpha1.GlobalIngressSpec) map[string]int32 {
		m := map[string]int32{}
		for _, p := range s.Ports {
			m[fmt.Sprintf("%s:%d", p.Name, p.Port)] = p.GlobalPort
		}
		return m
	}
	cip := netip.MustParseAddr("10.96.0.10")
	s1, err := AssignIngress(a, "ns", "web", v1alpha1.GlobalIngressSpec{}, IngressWant{ClusterIP: cip, Ports: ports("http:80", "https:443")})
	if err != nil || s1.IP == "" || s1.ClusterIP != "10.96.0.10" || len(s1.Ports) != 2 || s1.Ports[0].GlobalPort == s1.Ports[1].GlobalPort {
		t.Fatalf("first allocation %+v, %v", s1, err)
	}
	// A second Service gets other pairs (same IP, other ports, here).
	s2, err := AssignIngress(a, "ns", "api", v1alpha1.GlobalIngressSpec{}, IngressWant{ClusterIP: netip.MustParseAddr("10.96.0.11"), Ports: ports("http:80")})
	if err != nil || (s2.IP == s1.IP && (s2.Ports[0].GlobalPort == s1.Ports[0].GlobalPort || s2.Ports[0].GlobalPort == s1.Ports[1].GlobalPort)) {
		t.Fatalf("second Service %+v, %v (first %+v)", s2, err, s1)
	}
	// Changing the ports keeps the unchanged pairs.
	s1b, err := AssignIngress(a, "ns", "web", s1, IngressWant{ClusterIP: cip, Ports: ports("https:443", "metrics:9090")})
	if err != nil || s1b.IP != s1.IP || pairs(s1b)["https:443"] != pairs(s1)["https:443"] || pairs(s1b)["metrics:9090"] == 0 {
		t.Fatalf("port change %+v -> %+v, %v", s1, s1b, err)
	}
	// Unchanged: the same spec.
	if again, err := AssignIngress(a, "ns", "web", s1b, IngressWant{ClusterIP: cip, Ports: ports("https:443", "metrics:9090")}); err != nil ||
		fmt.Sprint(again) != fmt.Sprint(s1b) {
		t.Fatalf("unchanged Service %+v -> %+v, %v", s1b, again, err)
	}

	// Replay into a fresh allocator (restart): the same holdings, and new
	// allocations do not collide with them.
	b, _ := NewIngressAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	for name, s := range map[string]v1alpha1.GlobalIngressSpec{"web": s1b, "api": s2} {
		if err := ReplayIngress(b, "ns", name, s); err != nil {
			t.Fatal(err)
		}
	}
	s3, err := AssignIngress(b, "ns", "db", v1alpha1.GlobalIngressSpec{}, IngressWant{ClusterIP: netip.MustParseAddr("10.96.0.12"), Ports: ports("pg:5432")})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []v1alpha1.GlobalIngressSpec{s1b, s2} {
		for _, p := range s.Ports {
			if s.IP == s3.IP && p.GlobalPort == s3.Ports[0].GlobalPort {
				t.Errorf("after replay %+v collides with %+v", s3, s)
			}
		}
	}
	if again, err := AssignIngress(b, "ns", "web", s1b, IngressWant{ClusterIP: cip, Ports: ports("https:443", "metrics:9090")}); err != nil ||
		fmt.Sprint(again) != fmt.Sprint(s1b) {
		t.Errorf("after replay %+v -> %+v, %v", s1b, again, err)
	}
}

func TestAssignIngressHeadlessAndExhaustion(t *testing.T) {
	// A /29: health check, 3 ingress IPs, 2 egress IPs.
	a, err := NewIngressAllocator(netip.MustParsePrefix("242.0.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	pod := netip.MustParseAddr
	h1, err := AssignIngress(a, "ns", "db", v1alpha1.GlobalIngressSpec{}, IngressWant{Pods: []netip.Addr{pod("10.244.0.1"), pod("10.244.0.2")}})
	if err != nil || len(h1.Pods) != 2 || h1.Pods[0].GlobalIP == h1.Pods[1].GlobalIP || h1.IP != "" {
		t.Fatalf("headless %+v, %v", h1, err)
	}
	// Pod churn: .1 goes, .3 comes; .2 keeps its global IP.
	h2, err := AssignIngress(a, "ns", "db", h1, IngressWant{Pods: []netip.Addr{pod("10.244.0.2"), pod("10.244.0.3")}})
	if err != nil || len(h2.Pods) != 2 || h2.Pods[0] != h1.Pods[1] {
		t.Fatalf("pod churn %+v -> %+v, %v", h1, h2, err)
	}
	// One ingress IP left: a ClusterSetIP Service takes it; two more pods
	// do not fit, and the headless Service keeps exactly what it had.
	web, err := AssignIngress(a, "ns", "web", v1alpha1.GlobalIngressSpec{}, IngressWant{ClusterIP: pod("10.96.0.10"), Ports: []v1alpha1.GlobalIngressPort{{Name: "http", Protocol: "TCP", Port: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	h3, err := AssignIngress(a, "ns", "db", h2, IngressWant{Pods: []netip.Addr{pod("10.244.0.2"), pod("10.244.0.3"), pod("10.244.0.4")}})
	if !errors.Is(err, ErrExhausted) || fmt.Sprint(h3) != fmt.Sprint(h2) {
		t.Fatalf("exhausted: %+v, %v", h3, err)
	}
	if _, err := AssignIngress(a, "ns", "other", v1alpha1.GlobalIngressSpec{}, IngressWant{Pods: []netip.Addr{pod("10.244.0.9")}}); !errors.Is(err, ErrExhausted) {
		t.Fatalf("nothing left, got %v", err)
	}
	// Nothing was half allocated: releasing web frees exactly one IP.
	FreeIngress(a, "ns", "web", web)
	if got := a.IPsInUse(); got != 2 {
		t.Errorf("IPs in use after releasing web: %d, want 2", got)
	}
	if _, err := AssignIngress(a, "ns", "db", h2, IngressWant{Pods: []netip.Addr{pod("10.244.0.2"), pod("10.244.0.3"), pod("10.244.0.4")}}); err != nil {
		t.Errorf("after release: %v", err)
	}
}

// TestAssignIngressRandom drives 12 Services through random port sets,
// pod sets and type changes in a small CIDR (a /28: 11 ingress IPs), with
// replays into a fresh allocator (restarts) in between, and checks after
// every step: no IP:port or whole IP is held twice, a pod's IP never
// carries port pairs, ports kept keep their pair, pods kept keep their
// IP, an exhausted step changes nothing, and the allocator holds exactly
// the IPs the specs name.
func TestAssignIngressRandom(t *testing.T) {
	cidr := netip.MustParsePrefix("242.0.5.0/28")
	rng := rand.New(rand.NewPCG(1, 2))
	a, _ := NewIngressAllocator(cidr)
	held := map[string]v1alpha1.GlobalIngressSpec{}
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d", i)
	}
	allPorts := []v1alpha1.GlobalIngressPort{
		{Name: "a", Protocol: "TCP", Port: 1}, {Name: "b", Protocol: "TCP", Port: 2}, {Name: "c", Protocol: "UDP", Port: 3}, {Name: "d", Protocol: "TCP", Port: 4},
	}
	exhausted := 0
	for step := range 2000 {
		if step%250 == 249 { // restart: replay everything in random order
			a, _ = NewIngressAllocator(cidr)
			order := rng.Perm(len(names))
			for _, i := range order {
				if err := ReplayIngress(a, "ns", names[i], held[names[i]]); err != nil {
					t.Fatalf("step %d: replay %s: %v", step, names[i], err)
				}
			}
		}
		name := names[rng.IntN(len(names))]
		var want IngressWant
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
		got, err := AssignIngress(a, "ns", name, before, want)
		switch {
		case errors.Is(err, ErrExhausted):
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

// TestIngressWantForPodCIDRs: a headless Service's backends get global IPs
// only inside the cluster's pod CIDRs; an address anyone with rights on
// the namespace can put into an EndpointSlice (a node's, the metadata
// service's, another network's) gets none, and without pod CIDRs no
// backend gets one.
func TestIngressWantForPodCIDRs(t *testing.T) {
	headless := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	ready := discoveryv1.EndpointConditions{Ready: new(true)}
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
			got := IngressWantFor(headless, []discoveryv1.EndpointSlice{slice}, cidrs)
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
