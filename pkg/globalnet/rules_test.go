package globalnet

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/nat"
)

func TestRules(t *testing.T) {
	layout, err := ClusterLayout(netip.MustParsePrefix("242.0.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	age := 0
	gi := func(name string, spec v1alpha1.GlobalIngressSpec) v1alpha1.GlobalIngress {
		age++ // each object younger than the one before
		return v1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name,
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))}, Spec: spec}
	}
	now := metav1.NowMicro()
	in := []v1alpha1.GlobalIngress{
		gi("web", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.10", IP: "242.0.1.2", Ports: []v1alpha1.GlobalIngressPort{
			{Name: "http", Protocol: "TCP", Port: 80, GlobalPort: 1024}, {Name: "dns", Protocol: "UDP", Port: 53, GlobalPort: 1025}}}),
		gi("gone", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.11", IP: "242.0.1.2", ReleasedAt: &now, Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 80, GlobalPort: 1026}}}),
		gi("foreign", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.12", IP: "242.0.2.2", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 80, GlobalPort: 1027}}}),
		gi("health", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.13", IP: "242.0.1.1", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 80, GlobalPort: 1028}}}),
		gi("proto", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.14", IP: "242.0.1.3", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "ICMP", Port: 80, GlobalPort: 1029}, {Protocol: "TCP", Port: 81, GlobalPort: 1030}}}),
		gi("headless", v1alpha1.GlobalIngressSpec{Pods: []v1alpha1.GlobalPodAddress{
			{PodIP: "10.244.1.5", GlobalIP: "242.0.1.9"}, {PodIP: "10.244.1.6", GlobalIP: "242.0.1.254"}}}),
		gi("db", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.15", IP: "242.0.1.4", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 5432, GlobalPort: 1024}}}),
		// Another Service on web's global IP, other ports: shared.
		gi("api", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.16", IP: "242.0.1.2", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 80, GlobalPort: 1026}}}),
		gi("pods", v1alpha1.GlobalIngressSpec{Pods: []v1alpha1.GlobalPodAddress{{PodIP: "10.244.1.7", GlobalIP: "242.0.1.10"}}}),
		// Contending with older objects: a pair of web's, web's IP 1:1,
		// the same pair twice, db's ClusterIP:port, a pod of pods', db's
		// ClusterIP with db's global port on another global IP.
		gi("copy", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.20", IP: "242.0.1.2", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 80, GlobalPort: 1024}}}),
		gi("both", v1alpha1.GlobalIngressSpec{Pods: []v1alpha1.GlobalPodAddress{{PodIP: "10.244.1.8", GlobalIP: "242.0.1.2"}}}),
		gi("twice", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.21", IP: "242.0.1.5", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 80, GlobalPort: 2000}, {Protocol: "TCP", Port: 81, GlobalPort: 2000}}}),
		gi("target", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.15", IP: "242.0.1.6", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 5432, GlobalPort: 3000}}}),
		gi("pod-again", v1alpha1.GlobalIngressSpec{Pods: []v1alpha1.GlobalPodAddress{{PodIP: "10.244.1.7", GlobalIP: "242.0.1.11"}}}),
		gi("split", v1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.15", IP: "242.0.1.7", Ports: []v1alpha1.GlobalIngressPort{
			{Protocol: "TCP", Port: 5433, GlobalPort: 1024}}}),
	}
	want := []nat.Ingress{
		{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.2:1024"), Target: netip.MustParseAddrPort("10.96.0.10:80")},
		{Protocol: "udp", Global: netip.MustParseAddrPort("242.0.1.2:1025"), Target: netip.MustParseAddrPort("10.96.0.10:53")},
		{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.4:1024"), Target: netip.MustParseAddrPort("10.96.0.15:5432")},
		{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.2:1026"), Target: netip.MustParseAddrPort("10.96.0.16:80")},
	}
	wantPods := []nat.PodIngress{{Global: netip.MustParseAddr("242.0.1.10"), Pod: netip.MustParseAddr("10.244.1.7")}}
	wantSkipped := []string{"foreign", "health", "proto", "headless", "copy", "both", "twice", "target", "pod-again", "split"}
	// A dual-stack remote's IPv6 subnet is reached directly: not translated.
	remote := []netip.Prefix{netip.MustParsePrefix("242.0.3.0/24"), netip.MustParsePrefix("fd00:10:244:3::/64")}
	// The result does not depend on the objects' order: age decides.
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
		cfg, skipped := Rules(layout, in, nil, remote)
		if !slices.Equal(cfg.Ingress, want) || !slices.Equal(cfg.Pods, wantPods) {
			t.Fatalf("round %d: ingress %v pods %v, want %v and %v (skipped %q)", round, cfg.Ingress, cfg.Pods, want, wantPods, skipped)
		}
		if len(skipped) != len(wantSkipped) {
			t.Fatalf("round %d: skipped %q, want one line each for %v", round, skipped, wantSkipped)
		}
		for _, s := range wantSkipped {
			if !strings.Contains(strings.Join(skipped, "\n"), "demo/"+s+":") {
				t.Errorf("round %d: %s not explained in %q", round, s, skipped)
			}
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("round %d: nat refuses the result: %v", round, err)
		}
		if cfg.LocalGlobal[0] != layout.CIDR || len(cfg.Egress) != 2 || !slices.Equal(cfg.Remote, remote[:1]) ||
			!slices.Equal(cfg.RemoteEgress, []netip.Addr{netip.MustParseAddr("242.0.3.253"), netip.MustParseAddr("242.0.3.254")}) {
			t.Errorf("cfg = %+v", cfg)
		}
	}
}

// TestRemoteEgress: the remotes' SNAT sources are their layouts' egress
// addresses; a CIDR inside another adds none, one too small has none.
func TestRemoteEgress(t *testing.T) {
	got := remoteEgress([]netip.Prefix{
		netip.MustParsePrefix("242.0.3.0/24"), netip.MustParsePrefix("242.0.2.0/24"),
		netip.MustParsePrefix("242.0.2.0/25"), netip.MustParsePrefix("242.0.4.0/30"),
	})
	want := []netip.Addr{netip.MustParseAddr("242.0.3.253"), netip.MustParseAddr("242.0.3.254"), netip.MustParseAddr("242.0.2.253"), netip.MustParseAddr("242.0.2.254")}
	if !slices.Equal(got, want) {
		t.Errorf("remoteEgress = %v, want %v", got, want)
	}
}

// TestRulesEgress: a namespace's pods leave from its egress IPs (spread
// by address over several), a released GlobalEgress translates nothing,
// one contending for an ingress object's IP or with a foreign IP is
// skipped whole, a pod address two namespaces hold stays with the older.
func TestRulesEgress(t *testing.T) {
	layout, err := ClusterLayout(netip.MustParsePrefix("242.0.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	age := 0
	ge := func(name string, spec v1alpha1.GlobalEgressSpec) v1alpha1.GlobalEgress {
		age++
		return v1alpha1.GlobalEgress{ObjectMeta: metav1.ObjectMeta{Name: name,
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second))}, Spec: spec}
	}
	now := metav1.NowMicro()
	ingress := []v1alpha1.GlobalIngress{{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "db"},
		Spec: v1alpha1.GlobalIngressSpec{Pods: []v1alpha1.GlobalPodAddress{{PodIP: "10.244.1.5", GlobalIP: "242.0.1.252"}}}}}
	eg := []v1alpha1.GlobalEgress{
		ge("blue", v1alpha1.GlobalEgressSpec{IPs: []string{"242.0.1.251"}, Pods: []string{"10.244.2.1", "10.244.2.2"}}),
		ge("red", v1alpha1.GlobalEgressSpec{IPs: []string{"242.0.1.250", "242.0.1.249"}, Pods: []string{"10.244.3.1", "10.244.3.2", "10.244.2.2"}}),
		ge("gone", v1alpha1.GlobalEgressSpec{IPs: []string{"242.0.1.248"}, Pods: []string{"10.244.4.1"}, ReleasedAt: &now}),
		ge("stolen", v1alpha1.GlobalEgressSpec{IPs: []string{"242.0.1.252"}, Pods: []string{"10.244.5.1"}}),
		ge("foreign", v1alpha1.GlobalEgressSpec{IPs: []string{"242.0.1.253"}, Pods: []string{"10.244.6.1"}}),
		ge("empty", v1alpha1.GlobalEgressSpec{Pods: []string{"10.244.7.1"}}),
	}
	ip := netip.MustParseAddr
	want := []nat.PodEgress{
		{Pod: ip("10.244.2.1"), Global: ip("242.0.1.251")},
		{Pod: ip("10.244.2.2"), Global: ip("242.0.1.251")},
		{Pod: ip("10.244.3.1"), Global: ip("242.0.1.249")}, // odd address: the second IP
		{Pod: ip("10.244.3.2"), Global: ip("242.0.1.250")},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 10 {
		rng.Shuffle(len(eg), func(i, j int) { eg[i], eg[j] = eg[j], eg[i] })
		cfg, skipped := Rules(layout, ingress, eg, nil)
		if !slices.Equal(cfg.PodEgress, want) {
			t.Fatalf("round %d: pod egress %v, want %v (skipped %q)", round, cfg.PodEgress, want, skipped)
		}
		all := strings.Join(skipped, "\n")
		for _, s := range []string{"egress stolen: whole 242.0.1.252", "egress foreign: egress IP \"242.0.1.253\"", "egress red: egress-pod 10.244.2.2"} {
			if !strings.Contains(all, s) {
				t.Errorf("round %d: %q not explained in %q", round, s, skipped)
			}
		}
		if len(skipped) != 3 {
			t.Errorf("round %d: skipped %q, want 3 lines", round, skipped)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("round %d: nat refuses the result: %v", round, err)
		}
	}
}
