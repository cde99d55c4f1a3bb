package routeagent

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/kube/plaincache"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/vip"
)

// LabelServiceName and LabelSourceCluster are the MCS API's labels on
// multicluster EndpointSlices.
const (
	LabelServiceName   = "multicluster.kubernetes.io/service-name"
	LabelSourceCluster = "multicluster.kubernetes.io/source-cluster"
)

// VIPConfig is what a node's VIP table depends on besides the cluster's
// ServiceImports and EndpointSlices.
type VIPConfig struct {
	// ClusterID is the node's cluster.
	ClusterID string
	// Ranges are the ClusterSet's VIP ranges (its policy's VIPRange and
	// VIPRangeIPv6): an import's address outside them is never programmed.
	Ranges []netip.Prefix
	// Limits are the VIP table's (vip.Table.Limits; zero: none).
	Limits vip.Limits
	// Unreachable are the remote clusters the active gateway's health
	// checks found unreachable (pkg/reach): their backends are withdrawn
	// from every service that keeps a backend in another cluster.
	Unreachable map[string]bool
}

// VIPState is a node's VIP table and what was left out of it.
type VIPState struct {
	Services map[vip.ServiceKey]vip.Service
	// LeftOut are the imports ("<namespace>/<name>") left out whole
	// because the table's limits were reached, in the order they came.
	LeftOut []string
	// Ignored counts inputs never programmed: an import's address outside
	// the VIP ranges or held by an older import, an EndpointSlice not
	// written by the MCS controller for its import, an import whose
	// weights do not fit the table.
	Ignored int
	// Withdrawn counts the backends left out because their cluster is
	// unreachable (cfg.Unreachable).
	Withdrawn int
}

// VIPDesired is the VIP table of a node of cluster cfg.ClusterID: for
// every port of every clusterset VIP (IPv4 or IPv6) of every ClusterSetIP
// ServiceImport, the ready endpoints of its multicluster EndpointSlices of
// the VIP's address family at the slice's port of the same name and
// protocol, each weighted by its slice's mcs.AnnotationReadyEndpoints (the
// source cluster's ready pods; 1 when absent), so that every cluster gets
// a share of the connections proportional to its ready pods. The import's
// traffic policy narrows the source clusters:
//
//   - internalTrafficPolicy Local: only the local cluster's own backends
//     (its Service's ClusterIP, where kube-proxy applies that Service's
//     node locality); none when this cluster exports no ready backend.
//   - trafficDistribution PreferClose: only the local cluster's backends
//     while it has a ready one, every cluster's otherwise.
//
// sessionAffinity ClientIP becomes the service's AffinitySeconds
// (sessionAffinityConfig.clientIP.timeoutSeconds, default 10800).
//
// Only what the MCS controller wrote is programmed: an import's addresses
// inside cfg.Ranges (never a ClusterIP, a node's address or the metadata
// service), each held by one import (the oldest, then by namespace and
// name), and the slices labelled managed-by mcs.ManagedBy whose
// controller reference is their import (name and UID).
//
// The table holds at most cfg.Limits: it is filled import by import —
// those with a backend of the local cluster first, then the older
// (creation time, then namespace and name) — and an import whose service
// ports or backends no longer fit is left out whole (LeftOut), so one
// cluster's flood of imports never costs the table the others.
//
// The backends of a cluster in cfg.Unreachable are withdrawn from every
// service that keeps a backend in a reachable cluster (Withdrawn counts
// them); a service whose backends are all in unreachable clusters keeps
// them all, since a verdict of the local gateway alone is then no
// reason to refuse every connection.
//
// A service left with no ready endpoint stays in the table with no
// backends, so that connecting to it fails at once. Pure: same input,
// same output; the result always passes vip.Table.Set's validation.
func VIPDesired(cfg VIPConfig, imports []*mcsv1beta1.ServiceImport, eps []*discoveryv1.EndpointSlice) VIPState {
	return vipDesired(cfg, imports, parseVIPSlices(eps))
}

// parseVIPSlices is ParseVIPSlice of every slice.
func parseVIPSlices(eps []*discoveryv1.EndpointSlice) []*VIPSlice {
	out := make([]*VIPSlice, len(eps))
	for i, s := range eps {
		out[i] = ParseVIPSlice(s)
	}
	return out
}

// vipDesired is VIPDesired over slices already parsed (what the agent's
// cache holds).
func vipDesired(cfg VIPConfig, imports []*mcsv1beta1.ServiceImport, eps []*VIPSlice) VIPState {
	var st VIPState
	type sliceKey struct {
		svc  client.ObjectKey
		ipv6 bool
	}
	byName := make(map[client.ObjectKey]*mcsv1beta1.ServiceImport, len(imports))
	for _, si := range imports {
		byName[client.ObjectKeyFromObject(si)] = si
	}
	bySvc := map[sliceKey][]*VIPSlice{}
	for _, s := range eps {
		if s.Service == "" {
			continue
		}
		svc := client.ObjectKey{Namespace: s.Namespace, Name: s.Service}
		if !writtenFor(s, byName[svc]) {
			st.Ignored++
			continue
		}
		k := sliceKey{svc, s.IPv6}
		bySvc[k] = append(bySvc[k], s)
	}

	// The imports in the order the table is filled: local first, then the
	// older. A VIP goes to the first import in that order that has it…
	type candidate struct {
		si    *mcsv1beta1.ServiceImport
		local bool
	}
	var cands []candidate
	for _, si := range imports {
		if si.Spec.Type != mcsv1beta1.ClusterSetIP {
			continue
		}
		key := client.ObjectKeyFromObject(si)
		fromHere := func(s *VIPSlice) bool { return s.Cluster == cfg.ClusterID }
		local := slices.ContainsFunc(bySvc[sliceKey{key, false}], fromHere) || slices.ContainsFunc(bySvc[sliceKey{key, true}], fromHere)
		cands = append(cands, candidate{si, local})
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		switch {
		case a.local != b.local && a.local:
			return -1
		case a.local != b.local:
			return 1
		}
		return olderFirst(a.si, b.si)
	})
	// …except that the addresses are claimed by age alone, so that which
	// import a VIP belongs to does not depend on where its backends are.
	owner := map[netip.Addr]client.ObjectKey{}
	byAge := slices.Clone(cands)
	slices.SortFunc(byAge, func(a, b candidate) int { return olderFirst(a.si, b.si) })
	for _, c := range byAge {
		for _, ipStr := range c.si.Spec.IPs {
			if ip, err := netip.ParseAddr(ipStr); err == nil {
				if _, taken := owner[ip]; !taken {
					owner[ip] = client.ObjectKeyFromObject(c.si)
				}
			}
		}
	}

	st.Services = map[vip.ServiceKey]vip.Service{}
	backends := 0
	for _, c := range cands {
		si, key := c.si, client.ObjectKeyFromObject(c.si)
		mine := map[vip.ServiceKey]vip.Service{}
		n := 0
		fits := true
		for _, ipStr := range si.Spec.IPs {
			ip, err := netip.ParseAddr(ipStr)
			if err != nil || ip.Is4In6() || ip.Zone() != "" || !slices.ContainsFunc(cfg.Ranges, func(r netip.Prefix) bool { return r.Contains(ip) }) ||
				owner[ip] != key {
				st.Ignored++
				continue
			}
			familySlices := bySvc[sliceKey{key, ip.Is6()}]
			for _, p := range si.Spec.Ports {
				proto, ok := vipProto(p.Protocol)
				if !ok || p.Port < 1 || p.Port > 65535 {
					continue
				}
				bes, withdrawn := backendsFor(cfg, si.Spec, familySlices, p)
				st.Withdrawn += withdrawn
				svc := vip.Service{Backends: bes, AffinitySeconds: affinitySeconds(si.Spec)}
				if !weightsFit(svc.Backends) {
					fits = false
				}
				k := vip.ServiceKey{VIP: ip, Port: uint16(p.Port), Proto: proto}
				if old, dup := mine[k]; dup {
					n -= len(old.Backends) // a port listed twice: the last wins
				}
				mine[k] = svc
				n += len(svc.Backends)
			}
		}
		if !fits {
			st.Ignored++
			continue
		}
		if cfg.Limits.Services != 0 && len(st.Services)+len(mine) > int(cfg.Limits.Services) ||
			cfg.Limits.Backends != 0 && backends+n > int(cfg.Limits.Backends) {
			st.LeftOut = append(st.LeftOut, key.String())
			continue
		}
		maps.Copy(st.Services, mine)
		backends += n
	}
	return st
}

// olderFirst orders imports by creation time, then namespace and name.
func olderFirst(a, b *mcsv1beta1.ServiceImport) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// writtenFor tells whether s is a slice the MCS controller wrote for si:
// labelled managed-by mcs.ManagedBy, with si (name and UID) as its
// controller (ParseVIPSlice keeps the owner of such slices only). In a
// member cluster the chart's admission policy lets nobody else write such
// a slice (pkg/chart); this keeps a slice that was written elsewhere (a
// cluster without the policy) out all the same when it does not belong
// to the import.
func writtenFor(s *VIPSlice, si *mcsv1beta1.ServiceImport) bool {
	return si != nil && s.OwnerName != "" && s.OwnerName == si.Name && s.OwnerUID == si.UID
}

// weightsFit tells whether the backends' weights sum to what the table
// holds (less than 2^32, a weight of 0 counting as 1).
func weightsFit(bes []vip.Backend) bool {
	var sum uint64
	for _, b := range bes {
		sum += uint64(max(b.Weight, 1))
	}
	return sum <= math.MaxUint32
}

// backendsFor returns the weighted ready backends of import port p from
// the import's slices of one address family, narrowed by spec's traffic
// policy and by cfg.Unreachable (how many that withdrew is the second
// result).
func backendsFor(cfg VIPConfig, spec mcsv1beta1.ServiceImportSpec, eps []*VIPSlice, p mcsv1beta1.ServicePort) ([]vip.Backend, int) {
	// The slices that serve p with their port for it, and whether one of
	// them is local.
	type serving struct {
		*VIPSlice
		number uint16 // the slice's port number for p
	}
	var all []serving
	localReady, ready := false, 0
	for _, s := range eps {
		if port := s.port(p); port != 0 && len(s.Ready) > 0 {
			if all == nil {
				all = make([]serving, 0, len(eps))
			}
			all = append(all, serving{s, port})
			localReady = localReady || s.Cluster == cfg.ClusterID
			ready += len(s.Ready)
		}
	}
	local := spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal ||
		spec.TrafficDistribution != nil && *spec.TrafficDistribution == corev1.ServiceTrafficDistributionPreferClose && localReady
	chosen := func(s serving) bool { return !local || s.Cluster == cfg.ClusterID }
	reachable := slices.ContainsFunc(all, func(s serving) bool { return chosen(s) && !cfg.Unreachable[s.Cluster] })
	backends := make([]vip.Backend, 0, ready)
	withdrawn := 0
	for _, s := range all {
		switch {
		case !chosen(s):
		case reachable && cfg.Unreachable[s.Cluster]:
			withdrawn += len(s.Ready)
		default:
			for _, addr := range s.Ready {
				backends = append(backends, vip.Backend{Addr: addr, Port: s.number, Weight: s.Weight})
			}
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
	return slices.Compact(backends), withdrawn
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

func vipProto(p corev1.Protocol) (vip.Proto, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return vip.TCP, true
	case corev1.ProtocolUDP:
		return vip.UDP, true
	}
	return 0, false
}

// VIPSlice is what the VIP table reads of a multicluster EndpointSlice,
// parsed once, when the agent's cache receives it (ParseVIPSlice): a node
// caches one per exporting cluster of every import (50 000 at 100
// members × 500 Services), so it keeps bytes, not the object.
type VIPSlice struct {
	// Namespace is the slice's namespace (its import's).
	Namespace string
	// Service is the slice's LabelServiceName; "" for a slice the VIP
	// table never reads (no such label, or an address type other than
	// IPv4 and IPv6).
	Service string
	// Cluster is the slice's LabelSourceCluster.
	Cluster string
	// OwnerName and OwnerUID are the ServiceImport that controls the
	// slice, when it is labelled managed-by mcs.ManagedBy; empty otherwise
	// (writtenFor).
	OwnerName string
	OwnerUID  types.UID
	// IPv6 is the slice's address family.
	IPv6 bool
	// Weight is the slice's mcs.AnnotationReadyEndpoints, at least 1 (a
	// ready backend gets traffic; a missing or malformed annotation counts
	// as 1).
	Weight uint32
	// Ports are the slice's ports with a port number in 1..65535.
	Ports []VIPSlicePort
	// Ready are the addresses of the slice's ready endpoints (the ready
	// condition true or absent) of its address family (neither
	// IPv4-mapped nor zoned).
	Ready []netip.Addr
}

// VIPSlicePort is a port of a VIPSlice: its name ("" when unnamed),
// protocol (TCP when absent) and number.
type VIPSlicePort struct {
	Name  string
	Proto corev1.Protocol
	Port  uint16
}

// ParseVIPSlice keeps of s what the VIP table reads. Names and UIDs
// repeat across slices (every member's slice of a Service has the same
// namespace, service and owner): they are interned.
func ParseVIPSlice(s *discoveryv1.EndpointSlice) *VIPSlice {
	out := &VIPSlice{Namespace: kube.Intern(s.Namespace)}
	name := s.Labels[LabelServiceName]
	if name == "" || s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		return out
	}
	out.Service, out.Cluster = kube.Intern(name), kube.Intern(s.Labels[LabelSourceCluster])
	out.IPv6 = s.AddressType == discoveryv1.AddressTypeIPv6
	if ref := metav1.GetControllerOfNoCopy(s); ref != nil && s.Labels[discoveryv1.LabelManagedBy] == mcs.ManagedBy &&
		ref.Kind == mcsv1beta1.ServiceImportKindName && strings.HasPrefix(ref.APIVersion, mcsv1beta1.GroupName+"/") {
		out.OwnerName, out.OwnerUID = kube.Intern(ref.Name), types.UID(kube.Intern(string(ref.UID)))
	}
	out.Weight = 1
	if n, err := strconv.ParseUint(s.Annotations[mcs.AnnotationReadyEndpoints], 10, 32); err == nil && n > 0 {
		out.Weight = uint32(n)
	}
	for _, sp := range s.Ports {
		if sp.Port == nil || *sp.Port < 1 || *sp.Port > 65535 {
			continue
		}
		p := VIPSlicePort{Proto: corev1.ProtocolTCP, Port: uint16(*sp.Port)}
		if sp.Name != nil {
			p.Name = kube.Intern(*sp.Name)
		}
		if sp.Protocol != nil {
			p.Proto = corev1.Protocol(kube.Intern(string(*sp.Protocol)))
		}
		out.Ports = append(out.Ports, p)
	}
	for _, e := range s.Endpoints {
		if e.Conditions.Ready != nil && !*e.Conditions.Ready {
			continue
		}
		for _, a := range e.Addresses {
			addr, err := netip.ParseAddr(a)
			if err != nil || addr.Is6() != out.IPv6 || addr.Is4In6() || addr.Zone() != "" {
				continue
			}
			out.Ready = append(out.Ready, addr)
		}
	}
	return out
}

// port is the slice's port for the import's port: same name and protocol
// (a single unnamed port matches an unnamed one); 0 when none.
func (s *VIPSlice) port(p mcsv1beta1.ServicePort) uint16 {
	want := p.Protocol
	if want == "" {
		want = corev1.ProtocolTCP
	}
	for _, sp := range s.Ports {
		if sp.Name == p.Name && sp.Proto == want {
			return sp.Port
		}
	}
	return 0
}

// VIPSource lists the inputs of the VIP table. The objects may be shared
// with a cache: callers must not modify them.
type VIPSource interface {
	ListVIPInputs(ctx context.Context) ([]*mcsv1beta1.ServiceImport, []*VIPSlice, error)
}

// vipCache lists the plain caches of the inputs. Both hold pointers to
// values they never modify, so a sync's list copies pointers, not the
// values.
type vipCache struct {
	imports *plaincache.Store[*mcsv1beta1.ServiceImport]
	slices  *plaincache.Store[*VIPSlice]
}

func (v vipCache) ListVIPInputs(context.Context) ([]*mcsv1beta1.ServiceImport, []*VIPSlice, error) {
	return values(v.imports.Items()), values(v.slices.Items()), nil
}

// values are the values of items.
func values[T any](items []plaincache.Item[T]) []T {
	out := make([]T, len(items))
	for i, it := range items {
		out[i] = it.Value
	}
	return out
}

// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch

// WatchVIPInputs watches ServiceImports and multicluster EndpointSlices in
// every namespace and calls changed on every event. It returns once both
// caches hold their initial list; they stop with ctx.
//
// The caches are plain (pkg/kube/plaincache) and keep only what the VIP
// table reads: a slim copy of each import (slimImport) and a VIPSlice of
// each slice. With many imports the slices are the agent's largest
// memory cost.
func WatchVIPInputs(ctx context.Context, cfg *rest.Config, changed func()) (VIPSource, error) {
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return nil, fmt.Errorf("VIP inputs client: %w", err)
	}
	cs, err := kube.ProtobufClientset(cfg)
	if err != nil {
		return nil, fmt.Errorf("VIP inputs clientset: %w", err)
	}
	c := vipCache{
		imports: plaincache.New(plaincache.Config[*mcsv1beta1.ServiceImport]{
			Name:      "serviceimports",
			ListWatch: kube.ListWatch(wc, func() *mcsv1beta1.ServiceImportList { return &mcsv1beta1.ServiceImportList{} }),
			Example:   &mcsv1beta1.ServiceImport{},
			Convert: func(obj any) (*mcsv1beta1.ServiceImport, bool) {
				si, ok := obj.(*mcsv1beta1.ServiceImport)
				if !ok {
					return nil, false
				}
				return slimImport(si), true
			},
		}),
		slices: plaincache.New(plaincache.Config[*VIPSlice]{
			Name: "endpointslices",
			ListWatch: toolscache.NewFilteredListWatchFromClient(cs.DiscoveryV1().RESTClient(), "endpointslices", metav1.NamespaceAll,
				func(o *metav1.ListOptions) { o.LabelSelector = LabelServiceName }),
			Example:   &discoveryv1.EndpointSlice{},
			Transform: slimSlice,
			Convert: func(obj any) (*VIPSlice, bool) {
				s, ok := obj.(*discoveryv1.EndpointSlice)
				if !ok {
					return nil, false
				}
				return ParseVIPSlice(s), true
			},
		}),
	}
	go c.imports.Run(ctx)
	go c.slices.Run(ctx)
	if err := c.imports.WaitForSync(ctx); err != nil {
		return nil, err
	}
	if err := c.slices.WaitForSync(ctx); err != nil {
		return nil, err
	}
	c.imports.Notify(func(types.NamespacedName, **mcsv1beta1.ServiceImport, **mcsv1beta1.ServiceImport) { changed() })
	c.slices.Notify(func(types.NamespacedName, **VIPSlice, **VIPSlice) { changed() })
	return c, nil
}

// slimImport keeps of a ServiceImport what the VIP table reads: its
// identity, creation time, type, IPs, ports, session affinity and traffic
// policy.
func slimImport(si *mcsv1beta1.ServiceImport) *mcsv1beta1.ServiceImport {
	out := &mcsv1beta1.ServiceImport{
		TypeMeta: si.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: si.Namespace, Name: si.Name, UID: si.UID, ResourceVersion: si.ResourceVersion,
			CreationTimestamp: si.CreationTimestamp},
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
	return out
}

// slimSlice keeps of the EndpointSlices of the initial list, which the
// cache's reflector holds until the list ends, what ParseVIPSlice reads:
// namespace and name, the service-name, source-cluster and managed-by
// labels, the controller reference, the ready-endpoints annotation,
// address type, ports, and each endpoint's addresses and ready condition.
func slimSlice(in any) (any, error) {
	s, ok := in.(*discoveryv1.EndpointSlice)
	if !ok {
		return in, nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, ResourceVersion: s.ResourceVersion,
			Labels: map[string]string{LabelServiceName: s.Labels[LabelServiceName], LabelSourceCluster: s.Labels[LabelSourceCluster],
				discoveryv1.LabelManagedBy: s.Labels[discoveryv1.LabelManagedBy]}},
		AddressType: s.AddressType,
		Ports:       s.Ports,
	}
	if ref := metav1.GetControllerOfNoCopy(s); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
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

// SyncVIPs computes the VIP table of a node from src (VIPDesired, within
// the table's limits) and hands it to table.
func SyncVIPs(ctx context.Context, cfg VIPConfig, src VIPSource, table vip.Table) (VIPState, error) {
	imports, eps, err := src.ListVIPInputs(ctx)
	if err != nil {
		return VIPState{}, fmt.Errorf("list VIP inputs: %w", err)
	}
	cfg.Limits = table.Limits()
	st := vipDesired(cfg, imports, eps)
	if err := table.Set(ctx, st.Services); err != nil {
		return st, fmt.Errorf("program VIP table: %w", err)
	}
	return st, nil
}
