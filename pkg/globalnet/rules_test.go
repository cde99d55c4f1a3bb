package globalnet

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/nat"
)

func TestRules(t *testing.T) {
	layout, err := nat.ClusterLayout(netip.MustParsePrefix("242.0.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	gi := func(name string, spec v1alpha1.GlobalIngressSpec) v1alpha1.GlobalIngress {
		return v1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name}, Spec: spec}
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
	}
	remote := []netip.Prefix{netip.MustParsePrefix("242.0.3.0/24")}
	cfg, skipped := Rules(layout, in, remote)
	want := []nat.Ingress{
		{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.2:1024"), Target: netip.MustParseAddrPort("10.96.0.10:80")},
		{Protocol: "udp", Global: netip.MustParseAddrPort("242.0.1.2:1025"), Target: netip.MustParseAddrPort("10.96.0.10:53")},
		{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.3:1030"), Target: netip.MustParseAddrPort("10.96.0.14:81")},
	}
	if len(cfg.Ingress) != len(want) {
		t.Fatalf("ingress = %v, want %v", cfg.Ingress, want)
	}
	for i := range want {
		if cfg.Ingress[i] != want[i] {
			t.Errorf("ingress[%d] = %v, want %v", i, cfg.Ingress[i], want[i])
		}
	}
	if len(cfg.Pods) != 1 || cfg.Pods[0] != (nat.PodIngress{Global: netip.MustParseAddr("242.0.1.9"), Pod: netip.MustParseAddr("10.244.1.5")}) {
		t.Errorf("pods = %v", cfg.Pods)
	}
	if len(skipped) != 4 {
		t.Errorf("skipped = %q, want foreign, health, proto's ICMP and the egress pod address", skipped)
	}
	for _, s := range []string{"demo/foreign", "demo/health", "demo/proto", "demo/headless"} {
		if !strings.Contains(strings.Join(skipped, "\n"), s) {
			t.Errorf("%s not explained in %q", s, skipped)
		}
	}
	if cfg.LocalGlobal[0] != layout.CIDR || len(cfg.Egress) != 2 || cfg.Remote[0] != remote[0] {
		t.Errorf("cfg = %+v", cfg)
	}
}
