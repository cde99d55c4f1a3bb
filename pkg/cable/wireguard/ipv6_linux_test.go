package wireguard

import (
	"slices"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
)

// TestWireGuardIPv6Subnets: a dual-stack cluster's IPv6 subnets (reached
// directly, beside IPv4 ones under globalnet) cross the WireGuard cable
// over the IPv4 WAN (cabletest.RunIPv6Suite): device routes and
// AllowedIPs of both families; the IPv6 subnet removed, its AllowedIP
// goes too.
func TestWireGuardIPv6Subnets(t *testing.T) {
	allowed := func(t *testing.T, tp *cabletest.Topo) []string {
		return strings.Fields(cabletest.Run(t, "ip", "netns", "exec", tp.GwA, "wg", "show", tp.IfName("a"), "allowed-ips"))
	}
	cabletest.RunIPv6Suite(t, testPort, func(t testing.TB, tp *cabletest.Topo, side, stateDir string) cable.Driver {
		return newTest(t, tp, side, stateDir)
	}, cabletest.IPv6Checks{
		Up: func(t *testing.T, tp *cabletest.Topo, routes string) {
			for _, p := range []string{cabletest.SubnetB.String(), cabletest.SubnetB6.String()} {
				if !strings.Contains(routes, p+" dev "+tp.IfName("a")) || !slices.Contains(allowed(t, tp), p) {
					t.Fatalf("%s: routes\n%s\nallowed IPs %v", p, routes, allowed(t, tp))
				}
			}
		},
		Removed: func(t *testing.T, tp *cabletest.Topo, routes string) {
			if ips := allowed(t, tp); slices.Contains(ips, cabletest.SubnetB6.String()) || !slices.Contains(ips, cabletest.SubnetB.String()) {
				t.Fatalf("allowed IPs after removing the IPv6 subnet: %v", ips)
			}
		},
	})
}
