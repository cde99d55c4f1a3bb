package nat

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

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

// manyPortsConfig is a config of n tcp ports: n/2 Services of two ports each,
// allocated by the Allocator in the local global CIDR.
func manyPortsConfig(tb testing.TB, n int) Config {
	tb.Helper()
	l, err := NewLayout(localGlobal, DefaultEgressIPs)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := NewAllocator(l.Ingress, DefaultPortRange)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{LocalGlobal: []netip.Prefix{localGlobal}, Remote: []netip.Prefix{remoteGlobal}, Egress: l.Egress}
	for i := range n / 2 {
		ip, ports, err := a.Allocate(fmt.Sprintf("ns/svc-%d", i), 2)
		if err != nil {
			tb.Fatal(err)
		}
		cip := netip.AddrFrom4([4]byte{10, 96, byte(1 + i/250), byte(1 + i%250)})
		for j, p := range ports {
			cfg.Ingress = append(cfg.Ingress, Ingress{Protocol: "tcp", Global: netip.AddrPortFrom(ip, p), Target: netip.AddrPortFrom(cip, uint16(80+j))})
		}
	}
	return cfg
}

func withIngress(c Config, in ...Ingress) Config {
	c.Ingress = append(slices.Clone(c.Ingress), in...)
	return c
}

// Addresses of the test topology:
//
//	client (remote cluster)          gw (active gateway)             pod
//	c0 10.9.0.2  ------------------  g0 10.9.0.1
//	lo 242.0.3.253 (remote global)   g1 10.244.0.1  ---------------  p0 10.244.0.5, 10.244.0.6
//
// The client's routes to 242.0.0.0/15 (our global CIDR and the baseline's
// one-IP-per-Service range) use source 242.0.3.253, an egress address of
// the remote's layout (what its gateway SNATs its clients to); the
// remote's exported services answer at remoteService, an ingress
// address of that layout. The gateway routes the remote global CIDR
// 242.0.3.0/24 back to the client (the "tunnel").
var (
	localGlobal   = netip.MustParsePrefix("242.0.1.0/24")
	remoteGlobal  = netip.MustParsePrefix("242.0.3.0/24")
	clientAddr    = netip.MustParseAddr("242.0.3.253")
	remoteService = netip.MustParseAddr("242.0.3.2")
	podAddr       = netip.MustParseAddr("10.244.0.5")
	headlessPod   = netip.MustParseAddr("10.244.0.6")
	clusterIP     = netip.MustParseAddr("10.96.0.10")
)
