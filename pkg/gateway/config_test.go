package gateway

import (
	"net/netip"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/causeway-net/causeway/pkg/cable/drivers"
	"github.com/causeway-net/causeway/pkg/cable/ipsec"
)

func TestConfigIPsec(t *testing.T) {
	cfg := Config{
		ClusterID: "c1", NodeName: "n0",
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		PublicIP:     netip.MustParseAddr("198.18.1.10"), Port: 500,
		CableDriver: "ipsec", TunnelDevice: "cw-gw",
		Local: &rest.Config{}, Broker: &rest.Config{}, Drivers: drivers.Registry(),
	}
	if err := cfg.withDefaults().validate(); err != nil {
		t.Fatalf("ipsec: %v", err)
	}
	if got := cfg.device(); got != ipsec.TUNName {
		t.Errorf("ipsec device %q, want charon's %q", got, ipsec.TUNName)
	}
	cfg.CableDriver = "wireguard"
	if got := cfg.device(); got != "cw-gw" {
		t.Errorf("wireguard device %q, want the --tunnel-device", got)
	}
}
