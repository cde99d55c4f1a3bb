package nat

import (
	"fmt"
	"testing"
)

// BenchmarkGlobalAddresses: global IPs needed to export 10 000 service
// ports (5 000 Services of two ports), ours from the Allocator against
// one global IP per Service.
func BenchmarkGlobalAddresses(b *testing.B) {
	l, err := NewLayout(DefaultSupernet, DefaultEgressIPs) // room for the baseline's 5 000 IPs
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
