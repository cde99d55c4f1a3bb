package nat

import (
	"net/netip"
	"slices"
	"testing"
)

// manyPortsConfig is a config of n tcp ports: n/2 Services of two ports
// each, their global pairs packed from 242.0.1.2:1024 on as globalnet's
// allocator packs them (every port of an IP before the next IP).
func manyPortsConfig(tb testing.TB, n int) Config {
	tb.Helper()
	const first, ports = 1024, 65536 - 1024
	base := addrIndex(localGlobal.Addr()) + 2
	cfg := Config{LocalGlobal: []netip.Prefix{localGlobal}, Remote: []netip.Prefix{remoteGlobal},
		Egress: []netip.Addr{netip.MustParseAddr("242.0.1.253"), netip.MustParseAddr("242.0.1.254")}}
	for i := range n / 2 {
		cip := netip.AddrFrom4([4]byte{10, 96, byte(1 + i/250), byte(1 + i%250)})
		for j := range 2 {
			k := uint32(2*i + j)
			global := netip.AddrPortFrom(addrFromIndex(base+k/ports), uint16(first+k%ports))
			if !localGlobal.Contains(global.Addr()) {
				tb.Fatalf("%d ports do not fit %s", n, localGlobal)
			}
			cfg.Ingress = append(cfg.Ingress, Ingress{Protocol: "tcp", Global: global, Target: netip.AddrPortFrom(cip, uint16(80+j))})
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
