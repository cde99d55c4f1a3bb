package nodeview

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/causeway-net/causeway/pkg/vip"
)

// FromServices is the VIP table in view form, sorted by VIP, port and
// protocol, backends canonical.
func FromServices(services map[vip.ServiceKey]vip.Service) []VIP {
	keys := make([]vip.ServiceKey, 0, len(services))
	for k := range services {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, CompareKeys)
	out := make([]VIP, 0, len(keys))
	for _, k := range keys {
		s := services[k]
		v := VIP{VIP: k.VIP.String(), Port: k.Port, Protocol: k.Proto.String(), Backends: []VIPBackend{}, AffinitySeconds: s.AffinitySeconds}
		for _, b := range vip.Canonical(s.Backends) {
			v.Backends = append(v.Backends, VIPBackend{Address: b.AddrPort().String(), Weight: b.Weight})
		}
		out = append(out, v)
	}
	return out
}

// Services is the node's VIP table in the datapath's form.
func (n *Node) Services() (map[vip.ServiceKey]vip.Service, error) {
	out := make(map[vip.ServiceKey]vip.Service, len(n.VIPs))
	for _, v := range n.VIPs {
		a, err := netip.ParseAddr(v.VIP)
		if err != nil {
			return nil, fmt.Errorf("vip %q: %w", v.VIP, err)
		}
		k := vip.ServiceKey{VIP: a, Port: v.Port}
		switch v.Protocol {
		case vip.TCP.String():
			k.Proto = vip.TCP
		case vip.UDP.String():
			k.Proto = vip.UDP
		default:
			return nil, fmt.Errorf("vip %s: protocol %q", v.VIP, v.Protocol)
		}
		s := vip.Service{AffinitySeconds: v.AffinitySeconds}
		for _, b := range v.Backends {
			ap, err := netip.ParseAddrPort(b.Address)
			if err != nil {
				return nil, fmt.Errorf("vip %s backend %q: %w", k, b.Address, err)
			}
			s.Backends = append(s.Backends, vip.Backend{Addr: ap.Addr(), Port: ap.Port(), Weight: b.Weight})
		}
		out[k] = s
	}
	return out, nil
}

// CompareKeys orders service keys by VIP, port and protocol.
func CompareKeys(a, b vip.ServiceKey) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if a.Port != b.Port {
		return int(a.Port) - int(b.Port)
	}
	return int(a.Proto) - int(b.Proto)
}
