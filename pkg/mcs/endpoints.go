package mcs

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
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
// importing cluster reaches them, by importType (importers use
// MergeResult.Source, which asks only for the record's own type). local
// says r is the importing cluster's own record.
//
//   - ClusterSetIP: one backend per ClusterIP of the exporting cluster's
//     Service, at the service ports; ready while the record's
//     ReadyEndpoints > 0, serving while ServingEndpoints is (or it is
//     ready). The exporting cluster's kube-proxy spreads connections over
//     its pods; traffic to a remote ClusterIP goes through the tunnel.
//     ReadyEndpoints (the record's aggregate, see Aggregate) is the share
//     of the VIP's connections the cluster gets. The record's endpoints
//     are not read.
//   - Headless: every backend at its pod IP with its target ports and
//     hostname (per-pod DNS names), conditions as in the exporting cluster.
//
// Globalnet, per IP family (addrpolicy.ReachedThroughGlobal, the one
// rule): a REMOTE record's addresses of a family it carries global
// addresses of are always reached through them (a cluster allocates them
// only when it runs globalnet, and then its own IPv4 addresses may overlap
// ours): ClusterSetIP is one backend at the global IP, each port at its
// global port (a port without a global pair is not served by it);
// headless is each backend at its globalIP with its target ports, and a
// backend without one (not ready when the exporter allocated) is left
// out. Globalnet's addresses are IPv4, so a dual-stack Service's IPv6
// ClusterIP and IPv6 backends are reached directly, through the tunnel
// (the clusters' IPv6 CIDRs are unique: addrpolicy.Decide). The importing
// cluster's own record always uses its ClusterIPs and pod IPs. Addresses
// that do not parse, or carry an IPv6 zone, are dropped. Whether a remote
// address is reachable at all is Reachable's business, whether a remote
// may name it addrpolicy.CheckRecord's.
//
// It maps every port the record has; importers use MergeResult.Source,
// which keeps only the import ports the export serves.
func SourceFromRecord(r ExportRecord, importType mcsv1beta1.ServiceImportType, local bool) SourceEndpoints {
	src := SourceEndpoints{ClusterID: r.ClusterID}
	viaGlobal := func(a netip.Addr) bool { return !local && addrpolicy.ReachedThroughGlobal(&r, a) }
	if importType == mcsv1beta1.Headless {
		for _, g := range r.Endpoints {
			ports := make(map[string]int32, len(g.Ports))
			for _, p := range g.Ports {
				ports[p.Name] = p.Port
			}
			for _, b := range g.Backends {
				addr, err := parseRecordAddr(b.Address)
				if err == nil && viaGlobal(addr) {
					addr, err = parseRecordAddr(b.GlobalIP)
				}
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
	src.ReadyEndpoints = int(r.ReadyEndpoints)
	serving := r.ServingEndpoints > 0
	ready := src.ReadyEndpoints > 0
	if !local {
		// One backend per global IP (the allocator puts every port of a
		// Service on one IP, so this is one backend).
		byIP := map[netip.Addr]map[string]int32{}
		var order []netip.Addr
		for _, p := range r.Ports {
			if p.Global == nil {
				continue
			}
			addr, err := parseRecordAddr(p.Global.IP)
			if err != nil {
				continue
			}
			if byIP[addr] == nil {
				byIP[addr] = map[string]int32{}
				order = append(order, addr)
			}
			byIP[addr][p.Name] = p.Global.Port
		}
		for _, addr := range order {
			src.Backends = append(src.Backends, Backend{Address: addr, Ports: byIP[addr], Ready: ready, Serving: serving || ready})
		}
	}
	ports := make(map[string]int32, len(r.Ports))
	for _, p := range r.Ports {
		ports[p.Name] = p.Port
	}
	for _, ip := range r.ClusterIPs {
		addr, err := parseRecordAddr(ip)
		if err != nil || viaGlobal(addr) {
			continue
		}
		src.Backends = append(src.Backends, Backend{Address: addr, Ports: ports, Ready: ready, Serving: serving || ready})
	}
	return src
}

// Source is SourceFromRecord(r, m.Spec.Type, local) restricted to what r
// serves. An export whose type lost the conflict serves nothing (no
// backends), like a port that lost: the addresses a record of one type
// offers are those addrpolicy.CheckRecord placed for that type. Of the
// import ports, r serves those it exports exactly as the import defines
// them (name, protocol, port, appProtocol). A port whose definition lost a
// conflict in r, or that r does not export, is missing from every one of
// r's backends' Ports, so the VIP's traffic for that port never reaches r
// (not through a same-named port of r either). A backend left with no
// port is not rendered.
func (m MergeResult) Source(r ExportRecord, local bool) SourceEndpoints {
	if r.Type != m.Spec.Type {
		return SourceEndpoints{ClusterID: r.ClusterID}
	}
	src := SourceFromRecord(r, m.Spec.Type, local)
	served := map[string]int32{} // import port name -> service port
	for _, ip := range m.Spec.Ports {
		for _, p := range r.Ports {
			if p.Name == ip.Name && p.Protocol == ip.Protocol && p.Port == ip.Port && deref(p.AppProtocol) == deref(ip.AppProtocol) {
				served[ip.Name] = ip.Port
			}
		}
	}
	for i, b := range src.Backends {
		if b.Ports == nil {
			src.Backends[i].Ports = maps.Clone(served)
			continue
		}
		kept := make(map[string]int32, len(b.Ports))
		for name, n := range b.Ports {
			if _, ok := served[name]; ok {
				kept[name] = n
			}
		}
		src.Backends[i].Ports = kept
	}
	return src
}

// parseRecordAddr parses an address of a record: an IP address
// without zone (a zone names an interface of the exporting node, means
// nothing here, and the EndpointSlice API refuses it).
func parseRecordAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err == nil && a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("address %q has a zone", s)
	}
	return a, err
}

// ConditionReachable is the ServiceImport condition saying whether this
// cluster has a tunnel to every exporting cluster: True
// (ReasonReachable), or False (ReasonUnreachable) with one message per
// cluster without one from Reachable, sorted, joined by "; ". Whether a
// record's addresses lie inside what its cluster may claim is not
// reachability but acceptance (ConditionRemoteRecordRefused).
const ConditionReachable = "Reachable"

// Reasons of ConditionReachable.
const (
	ReasonReachable   = "Reachable"
	ReasonUnreachable = "Unreachable"
)

// ConditionRemoteRecordRefused is the ServiceImport condition naming the
// remote records that contribute nothing to the import — refused by
// pkg/addrpolicy.CheckRecord (reason: its addrpolicy.RecordReason), an
// incomplete split record (ReasonIncompleteRecord) or a record over its
// cluster's quota (ReasonQuotaExceeded): True with the first refused
// cluster's reason and one "cluster <id>: <reason>: <message>" part per
// refused cluster, sorted, joined by "; "; False (ReasonNoneRefused)
// otherwise.
const ConditionRemoteRecordRefused = "RemoteRecordRefused"

// Reasons of ConditionRemoteRecordRefused besides addrpolicy's, and
// EventRemoteRecordRefused, the reason of the Warning Event an importer
// records for a refused record.
const (
	ReasonNoneRefused = "NoneRefused"
	// ReasonIncompleteRecord: the head of a split record names a part
	// that is not there (*IncompleteRecordError).
	ReasonIncompleteRecord = "IncompleteRecord"
	// ReasonQuotaExceeded: the record lies beyond its cluster's quota of
	// records or backends (addrpolicy.Quotas), counted from its oldest.
	ReasonQuotaExceeded      = "QuotaExceeded"
	EventRemoteRecordRefused = "RemoteRecordRefused"
)

// Reach is how the importing cluster reaches one remote cluster, from the
// Endpoint object the gateway mirrors into the local Causeway namespace.
type Reach struct {
	// Tunnel: the cluster's mirrored Endpoint exists and is Valid, and
	// Subnets (its spec.subnets) are exactly what is reachable through it.
	Tunnel  bool
	Subnets []netip.Prefix
	// NoTunnel says why Tunnel is false, e.g. "no gateway endpoint".
	NoTunnel string
}

// Claim is what the cluster may claim in its records, for
// addrpolicy.CheckRecord: the subnets its tunnel reaches.
func (r Reach) Claim(clusterID string) addrpolicy.Claim {
	return addrpolicy.Claim{ClusterID: clusterID, Tunnel: r.Tunnel, Subnets: r.Subnets}
}

// Reachable returns src when reach has a tunnel, without the backends of
// an IP family the tunnel carries no subnet of (addrpolicy.Reaches: the
// cluster's IPv6 CIDRs left out by its verdict, or not announced); without
// a tunnel, with every backend set not ready, not serving — an unreachable
// endpoint is never advertised as ready — and a message naming the cluster
// ("" when reachable or src has no backends). r is the record src came
// from. An accepted record (addrpolicy.CheckRecord with reach.Claim) names
// only addresses inside the tunnel's subnets.
func Reachable(src SourceEndpoints, r ExportRecord, reach Reach) (SourceEndpoints, string) {
	if reach.Tunnel {
		src.Backends = slices.DeleteFunc(src.Backends, func(b Backend) bool { return !addrpolicy.Reaches(reach.Subnets, b.Address) })
		return src, ""
	}
	if len(src.Backends) == 0 {
		return src, ""
	}
	for i := range src.Backends {
		src.Backends[i].Ready, src.Backends[i].Serving = false, false
	}
	return src, fmt.Sprintf("no tunnel to cluster %s: %s", r.ClusterID, cmp.Or(reach.NoTunnel, "no gateway endpoint"))
}
