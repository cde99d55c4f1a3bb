package mcs

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// RecordEndpointsFromSlices turns the exporting cluster's EndpointSlices of
// a Service (those labelled kubernetes.io/service-name) into the record's
// endpoints: one group per address type and port mapping, backends sorted
// by address, one per address (a ready copy wins). The result depends only
// on the slices' content, not their order or names, so an unchanged
// Service gives an unchanged record.
func RecordEndpointsFromSlices(in []discoveryv1.EndpointSlice) []causewayv1alpha1.RecordEndpoints {
	type group struct {
		rec   causewayv1alpha1.RecordEndpoints
		addrs map[string]int // address -> index in rec.Backends
	}
	groups := map[string]*group{}
	for _, s := range in {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN slices name no address we can route to
		}
		var ports []causewayv1alpha1.RecordEndpointPort
		for _, p := range s.Ports {
			if p.Port == nil {
				continue
			}
			ports = append(ports, causewayv1alpha1.RecordEndpointPort{Name: deref(p.Name), Port: *p.Port})
		}
		slices.SortFunc(ports, func(a, b causewayv1alpha1.RecordEndpointPort) int {
			return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Port, b.Port))
		})
		var key strings.Builder
		key.WriteString(string(s.AddressType) + "|")
		for _, p := range ports {
			key.WriteString(p.Name + "=" + strconv.Itoa(int(p.Port)) + ",")
		}
		g := groups[key.String()]
		if g == nil {
			g = &group{rec: causewayv1alpha1.RecordEndpoints{AddressType: string(s.AddressType), Ports: ports}, addrs: map[string]int{}}
			groups[key.String()] = g
		}
		for _, e := range s.Endpoints {
			ready := e.Conditions.Ready == nil || *e.Conditions.Ready // nil means ready (EndpointSlice API)
			b := causewayv1alpha1.RecordBackend{
				Hostname:    deref(e.Hostname),
				NodeName:    deref(e.NodeName),
				Zone:        deref(e.Zone),
				Ready:       ready,
				Serving:     e.Conditions.Serving == nil && ready || e.Conditions.Serving != nil && *e.Conditions.Serving,
				Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
			}
			for _, a := range e.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil {
					continue
				}
				b.Address = addr.String()
				if i, ok := g.addrs[b.Address]; ok {
					if b.Ready && !g.rec.Backends[i].Ready {
						g.rec.Backends[i] = b
					}
					continue
				}
				g.addrs[b.Address] = len(g.rec.Backends)
				g.rec.Backends = append(g.rec.Backends, b)
			}
		}
	}
	var out []causewayv1alpha1.RecordEndpoints
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		rec := groups[k].rec
		if len(rec.Backends) == 0 {
			continue
		}
		slices.SortFunc(rec.Backends, func(a, b causewayv1alpha1.RecordBackend) int {
			return netip.MustParseAddr(a.Address).Compare(netip.MustParseAddr(b.Address))
		})
		out = append(out, rec)
	}
	return out
}

// SourceFromRecord returns the backends of one exporting cluster as an
// importing cluster reaches them, by the type of the merged import (an
// export that lost a type conflict contributes what fits the winner: a
// headless export has no ClusterIP to offer a ClusterSetIP import):
//
//   - Headless: every backend at its pod IP with its target ports and
//     hostname (per-pod DNS names), conditions as in the exporting cluster.
//   - ClusterSetIP: one backend per ClusterIP of the exporting cluster's
//     Service, at the service ports; ready (and serving) while at least one
//     of its backends is. The exporting cluster's kube-proxy spreads
//     connections over its pods; traffic to a remote ClusterIP goes through
//     the tunnel (or, under globalnet, to the global IP:port — not yet).
//
// The importing cluster's own record is treated the same way, so its slices
// list the backends of every exporting cluster including itself.
func SourceFromRecord(r ExportRecord, importType mcsv1beta1.ServiceImportType) SourceEndpoints {
	src := SourceEndpoints{ClusterID: r.ClusterID}
	if importType == mcsv1beta1.Headless {
		for _, g := range r.Endpoints {
			ports := make(map[string]int32, len(g.Ports))
			for _, p := range g.Ports {
				ports[p.Name] = p.Port
			}
			for _, b := range g.Backends {
				addr, err := netip.ParseAddr(b.Address)
				if err != nil {
					continue
				}
				src.Backends = append(src.Backends, Backend{
					Address: addr, Ports: ports, Ready: b.Ready, Serving: b.Serving, Terminating: b.Terminating,
					Hostname: b.Hostname, NodeName: b.NodeName, Zone: b.Zone,
				})
			}
		}
		return src
	}
	var ready, serving bool
	for _, g := range r.Endpoints {
		for _, b := range g.Backends {
			ready = ready || b.Ready && !b.Terminating
			serving = serving || b.Serving
		}
	}
	ports := make(map[string]int32, len(r.Ports))
	for _, p := range r.Ports {
		ports[p.Name] = p.Port
	}
	for _, ip := range r.ClusterIPs {
		addr, err := netip.ParseAddr(ip)
		if err != nil {
			continue
		}
		src.Backends = append(src.Backends, Backend{Address: addr, Ports: ports, Ready: ready, Serving: serving || ready})
	}
	return src
}
