package mcs

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
// EndpointSlices rendered here. It keeps the EndpointSlice controller's
// hands off them.
const ManagedBy = "mcs-controller.causeway.dev"

// DefaultMaxEndpointsPerSlice is the default slice size (the same as the
// EndpointSlice controller's).
const DefaultMaxEndpointsPerSlice = 100

// SourceEndpoints are one exporting cluster's backends of a Service.
type SourceEndpoints struct {
	ClusterID string
	Backends  []Backend
	// ReadyEndpoints is, for a ClusterSetIP import, the number of ready
	// endpoints behind the cluster's backend (its Service's ready pods):
	// the weight the VIP datapath gives it. Zero for headless imports.
	ReadyEndpoints int
}

// AnnotationReadyEndpoints is set on the multi-cluster EndpointSlices of a
// ClusterSetIP import to the source cluster's SourceEndpoints.ReadyEndpoints
// (decimal). The route agent weights the cluster's backend by it; slices
// without it weigh 1.
const AnnotationReadyEndpoints = "causeway.dev/ready-endpoints"

// Backend is one backend as the importing cluster reaches it.
type Backend struct {
	// Address reaches the backend from the importing cluster: a pod or
	// service IP (local cluster, or remote on flat networks), or a global
	// IP under globalnet.
	Address netip.Addr
	// Ports maps import port names to the port number on Address: the
	// target port for a pod IP, the global port under globalnet. Nil means
	// every import port at its service port number. An import port missing
	// from a non-nil map is not served by this backend.
	Ports map[string]int32
	// Ready, Serving, Terminating are the backend's EndpointSlice
	// conditions in its own cluster. A terminating backend is never
	// rendered ready.
	Ready, Serving, Terminating bool
	// Hostname is the pod's hostname (headless Services): DNS answers
	// <hostname>.<cluster>.<svc>.<ns>.svc.clusterset.local. Dropped when it
	// is not a DNS label.
	Hostname string
	// NodeName is kept only for the importing cluster's own backends: a
	// remote node name means nothing here and may equal a local one.
	NodeName string
	// Zone is the backend's topology.kubernetes.io/zone.
	Zone string
}

// RenderInput is what RenderEndpointSlices needs.
type RenderInput struct {
	// Import is the ServiceImport the slices belong to (name, namespace,
	// UID and spec.ports are used).
	Import *mcsv1beta1.ServiceImport
	// LocalClusterID is the importing cluster.
	LocalClusterID string
	// Sources are the backends of every exporting cluster.
	Sources []SourceEndpoints
	// MaxEndpointsPerSlice; 0 means DefaultMaxEndpointsPerSlice.
	MaxEndpointsPerSlice int
}

// RenderEndpointSlices returns the multi-cluster EndpointSlices of one
// ServiceImport in the importing cluster, as KEP-1645 and CoreDNS's
// multicluster support expect them:
//
//   - labels multicluster.kubernetes.io/service-name (the import's name),
//     multicluster.kubernetes.io/source-cluster (one cluster per slice) and
//     endpointslice.kubernetes.io/managed-by=ManagedBy, and NOT
//     kubernetes.io/service-name, so kube-proxy and the cluster.local DNS
//     never mix them into a local Service of the same name;
//   - a controller owner reference to the ServiceImport;
//   - every port with name, protocol and port set (CoreDNS dereferences
//     them), in the import's order; endpoints with explicit ready, serving
//     and terminating conditions (CoreDNS counts a missing ready as ready);
//   - one slice per source cluster, address family and port mapping, split
//     every MaxEndpointsPerSlice endpoints, with stable names;
//   - for a ClusterSetIP import, AnnotationReadyEndpoints: the source's
//     ready endpoints, the weight of its backend in the VIP datapath.
//
// The result is sorted by name; backends with invalid addresses, or that
// serve none of the import's ports, are left out.
func RenderEndpointSlices(in RenderInput) []discoveryv1.EndpointSlice {
	imp := in.Import
	perSlice := in.MaxEndpointsPerSlice
	if perSlice <= 0 {
		perSlice = DefaultMaxEndpointsPerSlice
	}
	type groupKey struct {
		cluster  string
		family   discoveryv1.AddressType
		portsKey string
	}
	type group struct {
		ports     []discoveryv1.EndpointPort
		endpoints []addrEndpoint
		ready     int // the source's ReadyEndpoints
	}
	groups := map[groupKey]*group{}
	defaultPorts, defaultKey := resolvePorts(imp.Spec.Ports, nil)
	for _, src := range in.Sources {
		for _, b := range src.Backends {
			if !b.Address.IsValid() || b.Address.Is4In6() {
				continue
			}
			ports, key := defaultPorts, defaultKey
			if b.Ports != nil {
				ports, key = resolvePorts(imp.Spec.Ports, b.Ports)
			}
			if len(imp.Spec.Ports) > 0 && len(ports) == 0 {
				continue
			}
			family := discoveryv1.AddressTypeIPv4
			if b.Address.Is6() {
				family = discoveryv1.AddressTypeIPv6
			}
			k := groupKey{src.ClusterID, family, key}
			g := groups[k]
			if g == nil {
				g = &group{ports: ports, ready: src.ReadyEndpoints}
				groups[k] = g
			}
			g.endpoints = append(g.endpoints, addrEndpoint{b.Address, renderEndpoint(b, src.ClusterID == in.LocalClusterID)})
		}
	}

	var out []discoveryv1.EndpointSlice
	for k, g := range groups {
		eps := dedupeEndpoints(g.endpoints)
		var annotations map[string]string
		if imp.Spec.Type == mcsv1beta1.ClusterSetIP {
			annotations = map[string]string{AnnotationReadyEndpoints: strconv.Itoa(g.ready)}
		}
		for chunk := 0; chunk*perSlice < len(eps); chunk++ {
			part := eps[chunk*perSlice : min((chunk+1)*perSlice, len(eps))]
			out = append(out, discoveryv1.EndpointSlice{
				TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
				ObjectMeta: metav1.ObjectMeta{
					Name:      sliceName(imp.Name, k.cluster, string(k.family), k.portsKey, chunk),
					Namespace: imp.Namespace,
					Labels: map[string]string{
						mcsv1beta1.LabelServiceName:   imp.Name,
						mcsv1beta1.LabelSourceCluster: k.cluster,
						discoveryv1.LabelManagedBy:    ManagedBy,
					},
					Annotations: maps.Clone(annotations),
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: mcsv1beta1.GroupVersion.String(),
						Kind:       mcsv1beta1.ServiceImportKindName,
						Name:       imp.Name,
						UID:        imp.UID,
						Controller: ptrTo(true),
					}},
				},
				AddressType: k.family,
				Endpoints:   part,
				Ports:       clonePorts(g.ports),
			})
		}
	}
	slices.SortFunc(out, func(a, b discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// resolvePorts returns the slice ports of a backend and a key identifying
// the mapping.
func resolvePorts(importPorts []mcsv1beta1.ServicePort, mapping map[string]int32) ([]discoveryv1.EndpointPort, string) {
	var ports []discoveryv1.EndpointPort
	var key strings.Builder
	for _, p := range importPorts {
		n := p.Port
		if mapping != nil {
			var ok bool
			if n, ok = mapping[p.Name]; !ok || n < 1 || n > 65535 {
				continue
			}
		}
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		ports = append(ports, discoveryv1.EndpointPort{
			Name:        ptrTo(p.Name),
			Protocol:    ptrTo(proto),
			Port:        ptrTo(n),
			AppProtocol: clonePtr(p.AppProtocol),
		})
		key.WriteString(p.Name + "/" + string(proto) + "/" + strconv.Itoa(int(n)) + ",")
	}
	return ports, key.String()
}

func renderEndpoint(b Backend, local bool) discoveryv1.Endpoint {
	ready := b.Ready && !b.Terminating
	e := discoveryv1.Endpoint{
		Addresses: []string{b.Address.String()},
		Conditions: discoveryv1.EndpointConditions{
			Ready:       ptrTo(ready),
			Serving:     ptrTo(b.Serving || ready),
			Terminating: ptrTo(b.Terminating),
		},
	}
	if b.Hostname != "" && len(validation.IsDNS1123Label(b.Hostname)) == 0 {
		e.Hostname = ptrTo(b.Hostname)
	}
	if local && b.NodeName != "" {
		e.NodeName = ptrTo(b.NodeName)
	}
	if b.Zone != "" {
		e.Zone = ptrTo(b.Zone)
	}
	return e
}

// addrEndpoint is a rendered endpoint and its address.
type addrEndpoint struct {
	addr netip.Addr
	ep   discoveryv1.Endpoint
}

// dedupeEndpoints sorts endpoints by address and keeps one per address,
// preferring a ready one.
func dedupeEndpoints(eps []addrEndpoint) []discoveryv1.Endpoint {
	slices.SortFunc(eps, func(a, b addrEndpoint) int {
		if c := a.addr.Compare(b.addr); c != 0 {
			return c
		}
		// ready first, then by the remaining fields for determinism
		if ar, br := *a.ep.Conditions.Ready, *b.ep.Conditions.Ready; ar != br {
			if ar {
				return -1
			}
			return 1
		}
		return cmp.Compare(canonical(a.ep), canonical(b.ep))
	})
	eps = slices.CompactFunc(eps, func(a, b addrEndpoint) bool { return a.addr == b.addr })
	out := make([]discoveryv1.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = e.ep
	}
	return out
}

// sliceName is "<service>-<cluster>-<hash>": stable for the same
// service, cluster, family, port mapping and chunk; the hash keeps names of
// different services, clusters and mappings apart.
func sliceName(service, cluster, family, portsKey string, chunk int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%s\x00%d", service, cluster, family, portsKey, chunk))
	return fmt.Sprintf("%s-%s-%s", service, cluster, hex.EncodeToString(h[:5]))
}

func clonePorts(ps []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	if ps == nil {
		return []discoveryv1.EndpointPort{}
	}
	out := make([]discoveryv1.EndpointPort, len(ps))
	for i, p := range ps {
		out[i] = discoveryv1.EndpointPort{
			Name: clonePtr(p.Name), Protocol: clonePtr(p.Protocol), Port: clonePtr(p.Port), AppProtocol: clonePtr(p.AppProtocol),
		}
	}
	return out
}

func ptrTo[T any](v T) *T { return &v }
