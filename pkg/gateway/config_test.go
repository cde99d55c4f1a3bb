package gateway

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/causeway-net/causeway/pkg/cable/drivers"
	"github.com/causeway-net/causeway/pkg/cable/ipsec"
	"github.com/causeway-net/causeway/pkg/daemon"
	"github.com/causeway-net/causeway/pkg/globalnet"
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

// A dual-stack cluster announces its IPv6 pod and service CIDRs with
// every cable driver (each carries IPv6 subnets over the IPv4 WAN), and
// under globalnet the global CIDR in place of its IPv4 ones only.
func TestAnnouncedDualStack(t *testing.T) {
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	for _, driver := range []string{"wireguard", "vxlan", "ipsec"} {
		e := &Engine{cfg: Config{CableDriver: driver,
			PodCIDRs:     pfx("10.244.0.0/16", "fd00:10:244:1::/64"),
			ServiceCIDRs: pfx("10.96.0.0/16", "fd00:10:96:1::/112")}}
		for name, tt := range map[string]struct {
			term *activeTerm
			want []netip.Prefix
		}{
			"plain":     {&activeTerm{}, pfx("10.244.0.0/16", "fd00:10:244:1::/64", "10.96.0.0/16", "fd00:10:96:1::/112")},
			"globalnet": {&activeTerm{global: &globalnet.Layout{CIDR: netip.MustParsePrefix("242.0.1.0/24")}}, pfx("242.0.1.0/24", "fd00:10:244:1::/64", "fd00:10:96:1::/112")},
		} {
			if got := e.announced(tt.term); !slices.Equal(got, tt.want) {
				t.Errorf("%s, %s: announced %v, want %v", driver, name, got, tt.want)
			}
		}
	}
}

// A driver with a fixed port (ipsec: charon's IKE port) gets it without
// --port, and a different --port is refused.
func TestConfigDriverPort(t *testing.T) {
	opts := daemon.DefaultOptions(0, 0)
	opts.BrokerKubeconfig = "/nonexistent"
	for _, tc := range []struct {
		portSet bool
		port    uint16
		want    string
	}{{false, 4500, ""}, {true, 500, ""}, {true, 4500, "--port 4500: the ipsec driver listens on 500"}} {
		f := flags{cableDriver: "ipsec", port: tc.port, portSet: tc.portSet}
		cfg, err := f.config(&opts)
		if tc.want == "" && cfg.Port != ipsec.IKEPort {
			t.Errorf("--port %d (given %v): port %d, want %d", tc.port, tc.portSet, cfg.Port, ipsec.IKEPort)
		}
		if got := err != nil && strings.Contains(err.Error(), "the ipsec driver listens on"); got != (tc.want != "") {
			t.Errorf("--port %d (given %v): %v, want an error %q: %v", tc.port, tc.portSet, got, tc.want, err)
		}
	}
}
