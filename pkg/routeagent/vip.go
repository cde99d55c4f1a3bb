package routeagent

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/vip"
)

// LabelServiceName and LabelSourceCluster are the MCS API's labels on
// multicluster EndpointSlices.
const (
	LabelServiceName   = "multicluster.kubernetes.io/service-name"
	LabelSourceCluster = "multicluster.kubernetes.io/source-cluster"
)

// VIPDesired is the VIP table of a node of cluster localCluster: for every
// port of every clusterset VIP (IPv4 or IPv6) of every ClusterSetIP
// ServiceImport, the ready endpoints of its multicluster EndpointSlices of
// the VIP's address family at the slice's port of the same name and
// protocol, each weighted by its slice's
// mcs.AnnotationReadyEndpoints (the source cluster's ready pods; 1 when
// absent), so that every cluster gets a share of the connections
// proportional to its ready pods. The import's traffic policy narrows the
// source clusters:
//
//   - internalTrafficPolicy Local: only localCluster's own backends (its
//     Service's ClusterIP, where kube-proxy applies that Service's node
//     locality); none when this cluster exports no ready backend.
//   - trafficDistribution PreferClose: only localCluster's backends while it
//     has a ready one, every cluster's otherwise.
//
// sessionAffinity ClientIP becomes the service's AffinitySeconds
// (sessionAffinityConfig.clientIP.timeoutSeconds, default 10800).
//
// A service left with no ready endpoint stays in the table with no
// backends, so that connecting to it fails at once. Pure: same input, same
// output.
func VIPDesired(localCluster string, imports []*mcsv1beta1.ServiceImport, eps []*discoveryv1.EndpointSlice) map[vip.ServiceKey]vip.Service {
	type sliceKey struct {
		svc  client.ObjectKey
		ipv6 bool
	}
	bySvc := map[sliceKey][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		name := s.Labels[LabelServiceName]
		if name == "" || s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		k := sliceKey{client.ObjectKey{Namespace: s.Namespace, Name: name}, s.AddressType == discoveryv1.AddressTypeIPv6}
		bySvc[k] = append(bySvc[k], s)
	}
	out := map[vip.ServiceKey]vip.Service{}
	for _, si := range imports {
		if si.Spec.Type != mcsv1beta1.ClusterSetIP {
			continue
		}
		for _, ipStr := range si.Spec.IPs {
			ip, err := netip.ParseAddr(ipStr)
			if err != nil || ip.Is4In6() || ip.Zone() != "" {
				continue
			}
			familySlices := bySvc[sliceKey{client.ObjectKeyFromObject(si), ip.Is6()}]
			for _, p := range si.Spec.Ports {
				proto, ok := vipProto(p.Protocol)
				if !ok || p.Port < 1 || p.Port > 65535 {
					continue
				}
				key := vip.ServiceKey{VIP: ip, Port: uint16(p.Port), Proto: proto}
				out[key] = vip.Service{
					Backends:        backendsFor(localCluster, si.Spec, familySlices, p),
					AffinitySeconds: affinitySeconds(si.Spec),
				}
			}
		}
	}
	return out
}

// backendsFor returns the weighted ready backends of import port p from
// the import's slices of one address family, narrowed by spec's traffic
// policy.
func backendsFor(localCluster string, spec mcsv1beta1.ServiceImportSpec, eps []*discoveryv1.EndpointSlice, p mcsv1beta1.ServicePort) []vip.Backend {
	byCluster := map[string][]vip.Backend{}
	for _, s := range eps {
		port := slicePort(s, p)
		if port == 0 {
			continue
		}
		weight := sliceWeight(s)
		cluster := s.Labels[LabelSourceCluster]
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || addr.Is4() != (s.AddressType == discoveryv1.AddressTypeIPv4) || addr.Is4In6() || addr.Zone() != "" {
					continue
				}
				byCluster[cluster] = append(byCluster[cluster], vip.Backend{Addr: addr, Port: port, Weight: weight})
			}
		}
	}
	local := spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal ||
		spec.TrafficDistribution != nil && *spec.TrafficDistribution == corev1.ServiceTrafficDistributionPreferClose && len(byCluster[localCluster]) > 0
	backends := []vip.Backend{}
	for cluster, bes := range byCluster {
		if !local || cluster == localCluster {
			backends = append(backends, bes...)
		}
	}
	slices.SortFunc(backends, func(a, b vip.Backend) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		return int(int64(a.Weight) - int64(b.Weight))
	})
	return slices.Compact(backends)
}

// defaultClientIPTimeout is Kubernetes' default
// sessionAffinityConfig.clientIP.timeoutSeconds.
const defaultClientIPTimeout = 10800

// affinitySeconds is the ClientIP affinity timeout of an import, 0 without
// affinity.
func affinitySeconds(spec mcsv1beta1.ServiceImportSpec) uint32 {
	if spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return 0
	}
	if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && *c.ClientIP.TimeoutSeconds > 0 {
		return uint32(*c.ClientIP.TimeoutSeconds)
	}
	return defaultClientIPTimeout
}

// sliceWeight is the weight of a slice's backends: its
// mcs.AnnotationReadyEndpoints, at least 1 (a ready backend gets traffic;
// a missing or malformed annotation counts as 1).
func sliceWeight(s *discoveryv1.EndpointSlice) uint32 {
	n, err := strconv.ParseUint(s.Annotations[mcs.AnnotationReadyEndpoints], 10, 32)
	if err != nil || n == 0 {
		return 1
	}
	return uint32(n)
}

// slicePort is the slice's port for the import's port: same name and
// protocol (a single unnamed port matches an unnamed one).
func slicePort(s *discoveryv1.EndpointSlice, p mcsv1beta1.ServicePort) uint16 {
	for _, sp := range s.Ports {
		name, proto := "", corev1.ProtocolTCP
		if sp.Name != nil {
			name = *sp.Name
		}
		if sp.Protocol != nil {
			proto = *sp.Protocol
		}
		want := p.Protocol
		if want == "" {
			want = corev1.ProtocolTCP
		}
		if name == p.Name && proto == want && sp.Port != nil && *sp.Port > 0 && *sp.Port <= 65535 {
			return uint16(*sp.Port)
		}
	}
	return 0
}

func vipProto(p corev1.Protocol) (vip.Proto, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return vip.TCP, true
	case corev1.ProtocolUDP:
		return vip.UDP, true
	}
	return 0, false
}

// VIPSource lists the inputs of VIPDesired. The objects may be shared
// with a cache: callers must not modify them.
type VIPSource interface {
	ListVIPInputs(ctx context.Context) ([]*mcsv1beta1.ServiceImport, []*discoveryv1.EndpointSlice, error)
}

// vipCache reads the informers' stores directly: a sync at 10 000
// imports then allocates no copy of the objects, only the two slices of
// pointers.
type vipCache struct{ imports, slices toolscache.Store }

func (v vipCache) ListVIPInputs(context.Context) ([]*mcsv1beta1.ServiceImport, []*discoveryv1.EndpointSlice, error) {
	return storeList[*mcsv1beta1.ServiceImport](v.imports), storeList[*discoveryv1.EndpointSlice](v.slices), nil
}

func storeList[T any](s toolscache.Store) []T {
	objs := s.List()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch

// WatchVIPInputs watches ServiceImports and multicluster EndpointSlices in
// every namespace and calls changed on every event.
func WatchVIPInputs(ctx context.Context, cfg *rest.Config, changed func()) (VIPSource, error) {
	hasService, err := labels.NewRequirement(LabelServiceName, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	// The caches keep only what VIPDesired reads (slimImport,
	// slimSlice), and syncs read the cached objects themselves (VIPDesired
	// only reads them): at 10 000 imports the cache is the agent's largest
	// memory cost.
	c, err := cache.New(cfg, cache.Options{
		Scheme: kube.NewScheme(),
		ByObject: map[client.Object]cache.ByObject{
			&mcsv1beta1.ServiceImport{}: {Transform: slimImport, UnsafeDisableDeepCopy: ptrTo(true)},
			&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*hasService), Transform: slimSlice,
				UnsafeDisableDeepCopy: ptrTo(true)},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("VIP cache: %w", err)
	}
	var stores []toolscache.Store
	for _, obj := range []client.Object{&mcsv1beta1.ServiceImport{}, &discoveryv1.EndpointSlice{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("VIP informer %T: %w", obj, err)
		}
		si, ok := inf.(toolscache.SharedIndexInformer)
		if !ok {
			return nil, fmt.Errorf("VIP informer %T: %T has no store", obj, inf)
		}
		stores = append(stores, si.GetStore())
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { changed() },
			UpdateFunc: func(any, any) { changed() },
			DeleteFunc: func(any) { changed() },
		}); err != nil {
			return nil, err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		select {
		case err := <-errc:
			return nil, fmt.Errorf("VIP cache: %w", err)
		default:
			return nil, fmt.Errorf("VIP cache did not sync: %w", ctx.Err())
		}
	}
	return vipCache{imports: stores[0], slices: stores[1]}, nil
}

// slimImport keeps of a ServiceImport what VIPDesired reads: its
// identity, type, IPs, ports, session affinity and traffic policy.
func slimImport(in any) (any, error) {
	si, ok := in.(*mcsv1beta1.ServiceImport)
	if !ok {
		return in, nil
	}
	out := &mcsv1beta1.ServiceImport{
		TypeMeta:   si.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: si.Namespace, Name: si.Name, UID: si.UID, ResourceVersion: si.ResourceVersion},
		Spec: mcsv1beta1.ServiceImportSpec{Type: si.Spec.Type, IPs: si.Spec.IPs,
			SessionAffinity: si.Spec.SessionAffinity, SessionAffinityConfig: si.Spec.SessionAffinityConfig,
			InternalTrafficPolicy: si.Spec.InternalTrafficPolicy, TrafficDistribution: si.Spec.TrafficDistribution},
	}
	if len(si.Spec.Ports) > 0 {
		out.Spec.Ports = make([]mcsv1beta1.ServicePort, len(si.Spec.Ports))
		for i, p := range si.Spec.Ports {
			out.Spec.Ports[i] = mcsv1beta1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port}
		}
	}
	return out, nil
}

// slimSlice keeps of a multicluster EndpointSlice what VIPDesired reads:
// its identity, service-name and source-cluster labels, ready-endpoints
// annotation, address type, ports, and each endpoint's addresses and ready
// condition.
func slimSlice(in any) (any, error) {
	s, ok := in.(*discoveryv1.EndpointSlice)
	if !ok {
		return in, nil
	}
	out := &discoveryv1.EndpointSlice{
		TypeMeta: s.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion,
			Labels: map[string]string{LabelServiceName: s.Labels[LabelServiceName], LabelSourceCluster: s.Labels[LabelSourceCluster]}},
		AddressType: s.AddressType,
		Ports:       s.Ports,
	}
	if w, ok := s.Annotations[mcs.AnnotationReadyEndpoints]; ok {
		out.Annotations = map[string]string{mcs.AnnotationReadyEndpoints: w}
	}
	if len(s.Endpoints) > 0 {
		out.Endpoints = make([]discoveryv1.Endpoint, len(s.Endpoints))
		for i, e := range s.Endpoints {
			out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready}}
		}
	}
	return out, nil
}

func ptrTo[T any](v T) *T { return &v }

// SyncVIPs computes the VIP table of a node of cluster localCluster from
// src and hands it to table.
func SyncVIPs(ctx context.Context, localCluster string, src VIPSource, table vip.Table) (int, error) {
	imports, eps, err := src.ListVIPInputs(ctx)
	if err != nil {
		return 0, fmt.Errorf("list VIP inputs: %w", err)
	}
	desired := VIPDesired(localCluster, imports, eps)
	if err := table.Set(ctx, desired); err != nil {
		return 0, fmt.Errorf("program VIP table: %w", err)
	}
	return len(desired), nil
}
