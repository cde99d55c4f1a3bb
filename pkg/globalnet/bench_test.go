package globalnet

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// BenchmarkAssignIngress is one Service's globalnet sync with 10 000
// other Services (two ports each) already held by the long-lived
// allocator: a port change (one pair kept, one new) and back. It stays
// flat in the number of Services, which is why the controller keeps one
// allocator per leadership term instead of replaying every GlobalIngress
// per sync; replay reports the cost of that replay (once per term).
func BenchmarkAssignIngress(b *testing.B) {
	const services = 10000
	a, err := NewIngressAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	if err != nil {
		b.Fatal(err)
	}
	cip := netip.MustParseAddr("10.96.0.10")
	two := func(second string, port int32) IngressWant {
		return IngressWant{ClusterIP: cip, Ports: []v1alpha1.GlobalIngressPort{
			{Name: "http", Protocol: "TCP", Port: 80}, {Name: second, Protocol: "TCP", Port: port}}}
	}
	specs := make([]v1alpha1.GlobalIngressSpec, services)
	for i := range services {
		if specs[i], err = AssignIngress(a, "ns", fmt.Sprintf("svc-%d", i), v1alpha1.GlobalIngressSpec{}, two("metrics", 9090)); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	replay, _ := NewIngressAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	for i, s := range specs {
		if err := ReplayIngress(replay, "ns", fmt.Sprintf("svc-%d", i), s); err != nil {
			b.Fatal(err)
		}
	}
	replayMS := float64(time.Since(start).Microseconds()) / 1000
	have := specs[0]
	for b.Loop() {
		s, err := AssignIngress(a, "ns", "svc-0", have, two("grpc", 9000))
		if err != nil {
			b.Fatal(err)
		}
		if have, err = AssignIngress(a, "ns", "svc-0", s, two("metrics", 9090)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(replayMS, "replay-ms") // after b.Loop, which resets reported metrics
}

// BenchmarkGlobalAddresses: global IPs needed to export 10 000 service
// ports (5 000 Services of two ports), ours from the Allocator against
// one global IP per Service.
func BenchmarkGlobalAddresses(b *testing.B) {
	l, err := NewLayout(netip.MustParsePrefix("242.0.0.0/8"), DefaultEgressIPs) // room for the baseline's 5 000 IPs
	if err != nil {
		b.Fatal(err)
	}
	const services, ports = 5000, 2
	var ours int
	for b.Loop() {
		a, err := NewAllocator(l.Ingress, DefaultPortRange)
		if err != nil {
			b.Fatal(err)
		}
		for i := range services {
			if _, _, err := a.Allocate(fmt.Sprintf("ns/svc-%d", i), ports); err != nil {
				b.Fatal(err)
			}
		}
		ours = a.IPsInUse()
	}
	b.ReportMetric(float64(ours), "ours-IPs")
	b.ReportMetric(float64(services), "per-service-IPs")
	b.ReportMetric(float64(services)/float64(ours), "per-service/ours")
	b.ReportMetric(float64(services*ports)/float64(ours), "ports/IP")
}
