package controller

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// The controller caches most objects as plain values (localcache.go,
// brokercache.go); a reflector holds the objects of its initial list
// until the list is complete, and the transforms below keep of each only
// what the plain value is made of, so that a cluster's full list does not
// sit in memory at once. The remaining informers (Namespaces and the
// objects of which there are few) go through them too. Like every
// transform they are idempotent: client-go may pass an object through
// again.

// slimmer holds the transforms; strings that repeat across objects
// (namespaces, label keys, condition texts) are shared (kube.Intern).
type slimmer struct {
	// ownNamespace is this cluster's broker namespace: its records there
	// are the ones it writes.
	ownNamespace string
	// vipRanges are the clusterset VIP ranges: an allocation of an
	// address outside them is not cached (it holds nothing here).
	vipRanges []netip.Prefix
	// quotas, if set, decides which remote records' specs are kept
	// (cachedRecord); unset, all are.
	quotas *recordQuotas
	// yes and no are shared by the cached objects' *bool fields (the
	// cache hands out deep copies, so nothing writes through them).
	yes, no *bool
}

func newSlimmer(ownNamespace string, vipRanges ...netip.Prefix) *slimmer {
	yes, no := true, false
	return &slimmer{ownNamespace: ownNamespace, vipRanges: vipRanges, yes: &yes, no: &no}
}

// boolPtr returns the shared pointer for *p.
func (t *slimmer) boolPtr(p *bool) *bool {
	switch {
	case p == nil:
		return nil
	case *p:
		return t.yes
	default:
		return t.no
	}
}

func (t *slimmer) strPtr(p *string) *string {
	if p == nil {
		return nil
	}
	v := kube.Intern(*p)
	return &v
}

// Labels kept in the caches whose values repeat across objects.
var sharedValues = []string{discoveryv1.LabelManagedBy}

// stripManagedFields is the default transform of every cache.
func stripManagedFields(in any) (any, error) {
	if obj, err := meta.Accessor(in); err == nil && obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	return in, nil
}

// slimMeta keeps the identity of an object: name, namespace, UID,
// resourceVersion, generation, creation and deletion timestamps, and the
// labels named in keep.
func slimMeta(m metav1.ObjectMeta, keep ...string) metav1.ObjectMeta {
	out := readMeta(m, keep...)
	out.UID, out.Generation, out.CreationTimestamp = m.UID, m.Generation, m.CreationTimestamp
	return out
}

// readMeta is slimMeta without UID, generation and creation timestamp, for
// objects the controller only reads (Services, the cluster's own
// EndpointSlices, Namespaces): nothing refers to them by UID or
// compares their age.
func readMeta(m metav1.ObjectMeta, keep ...string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         kube.Intern(m.Namespace),
		ResourceVersion:   m.ResourceVersion,
		DeletionTimestamp: m.DeletionTimestamp,
	}
	for _, k := range keep {
		if v, ok := m.Labels[k]; ok {
			if out.Labels == nil {
				out.Labels = make(map[string]string, len(keep))
			}
			out.Labels[kube.Intern(k)] = v
		}
	}
	return out
}

// service keeps what mcs.NewExportRecord reads.
func (t *slimmer) service(in any) (any, error) {
	s, ok := in.(*corev1.Service)
	if !ok {
		return stripManagedFields(in)
	}
	out := &corev1.Service{
		TypeMeta:   s.TypeMeta,
		ObjectMeta: readMeta(s.ObjectMeta),
		Spec: corev1.ServiceSpec{
			Type:                  s.Spec.Type,
			ClusterIP:             s.Spec.ClusterIP,
			ClusterIPs:            s.Spec.ClusterIPs,
			IPFamilies:            s.Spec.IPFamilies,
			SessionAffinity:       s.Spec.SessionAffinity,
			SessionAffinityConfig: s.Spec.SessionAffinityConfig,
			InternalTrafficPolicy: s.Spec.InternalTrafficPolicy,
			TrafficDistribution:   s.Spec.TrafficDistribution,
		},
	}
	out.Spec.Type = corev1.ServiceType(kube.Intern(string(out.Spec.Type)))
	out.Spec.SessionAffinity = corev1.ServiceAffinity(kube.Intern(string(out.Spec.SessionAffinity)))
	if len(s.Spec.Ports) > 0 {
		out.Spec.Ports = make([]corev1.ServicePort, len(s.Spec.Ports))
		for i, p := range s.Spec.Ports {
			out.Spec.Ports[i] = corev1.ServicePort{Name: kube.Intern(p.Name), Protocol: corev1.Protocol(kube.Intern(string(p.Protocol))),
				Port: p.Port, AppProtocol: p.AppProtocol}
		}
	}
	return out, nil
}

// endpointSlice keeps this controller's own multi-cluster slices whole
// but for managed fields (their hash, mcs.SliceHash, is taken of what the
// controller sets), and of the cluster's other slices what
// mcs.RecordEndpointsFromSlices reads: the service-name and managed-by
// labels, the address type, ports, and each endpoint's addresses,
// conditions, hostname, node name and zone.
func (t *slimmer) endpointSlice(in any) (any, error) {
	s, ok := in.(*discoveryv1.EndpointSlice)
	if !ok {
		return stripManagedFields(in)
	}
	if s.Labels[discoveryv1.LabelManagedBy] == mcs.ManagedBy {
		return stripManagedFields(s)
	}
	out := &discoveryv1.EndpointSlice{
		TypeMeta: s.TypeMeta,
		ObjectMeta: readMeta(s.ObjectMeta, discoveryv1.LabelServiceName, discoveryv1.LabelManagedBy,
			mcsv1beta1.LabelServiceName),
		AddressType: discoveryv1.AddressType(kube.Intern(string(s.AddressType))),
		Ports:       s.Ports,
	}
	kube.InternMeta(&out.ObjectMeta, sharedValues...)
	out.Endpoints = t.endpoints(s.Endpoints)
	return out, nil
}

// endpoints returns copies of eps with what mcs reads of an endpoint:
// addresses, conditions, hostname, node name and zone.
func (t *slimmer) endpoints(eps []discoveryv1.Endpoint) []discoveryv1.Endpoint {
	if len(eps) == 0 {
		return nil
	}
	out := make([]discoveryv1.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions,
			Hostname: e.Hostname, NodeName: e.NodeName, Zone: e.Zone}
		t.endpoint(&out[i])
	}
	return out
}

// endpoint shares the condition pointers and node and zone names.
func (t *slimmer) endpoint(e *discoveryv1.Endpoint) {
	e.Conditions.Ready = t.boolPtr(e.Conditions.Ready)
	e.Conditions.Serving = t.boolPtr(e.Conditions.Serving)
	e.Conditions.Terminating = t.boolPtr(e.Conditions.Terminating)
	e.NodeName = t.strPtr(e.NodeName)
	e.Zone = t.strPtr(e.Zone)
}

// serviceExport drops labels and annotations (often a large
// last-applied-configuration): the controller reads the spec and status
// and patches only the status.
func (t *slimmer) serviceExport(in any) (any, error) {
	se, ok := in.(*mcsv1beta1.ServiceExport)
	if !ok {
		return stripManagedFields(in)
	}
	kube.InternTypeMeta(&se.TypeMeta)
	se.ObjectMeta = slimMeta(se.ObjectMeta)
	kube.InternConditions(se.Status.Conditions)
	return se, nil
}

// record keeps a broker ServiceExportRecord whole but for managed fields
// (a remote one is merged, the hash of an own one is taken of its spec)
// and shares its repeated strings.
func (t *slimmer) record(in any) (any, error) {
	r, ok := in.(*causewayv1alpha1.ServiceExportRecord)
	if !ok {
		return stripManagedFields(in)
	}
	r.ManagedFields = nil
	kube.InternTypeMeta(&r.TypeMeta)
	kube.InternMeta(&r.ObjectMeta)
	r.Spec.ClusterID = kube.Intern(r.Spec.ClusterID)
	r.Spec.ServiceNamespace = kube.Intern(r.Spec.ServiceNamespace)
	r.Spec.Type = mcsv1beta1.ServiceImportType(kube.Intern(string(r.Spec.Type)))
	for i := range r.Spec.Ports {
		p := &r.Spec.Ports[i]
		p.Name, p.Protocol = kube.Intern(p.Name), corev1.Protocol(kube.Intern(string(p.Protocol)))
	}
	for i := range r.Spec.Endpoints {
		g := &r.Spec.Endpoints[i]
		g.AddressType = kube.Intern(g.AddressType)
		for j := range g.Backends {
			b := &g.Backends[j]
			b.NodeName, b.Zone = kube.Intern(b.NodeName), kube.Intern(b.Zone)
		}
	}
	return r, nil
}

// vipAllocation keeps a VIPAllocation's identity, creation time, owner
// label (causeway.dev/cluster-id) and spec (the Service holding the
// address), not its other labels: the Service is read from the spec.
func (t *slimmer) vipAllocation(in any) (any, error) {
	a, ok := in.(*causewayv1alpha1.VIPAllocation)
	if !ok {
		return stripManagedFields(in)
	}
	kube.InternTypeMeta(&a.TypeMeta)
	a.ObjectMeta = slimMeta(a.ObjectMeta, causewayv1alpha1.LabelClusterID)
	kube.InternMeta(&a.ObjectMeta, causewayv1alpha1.LabelClusterID)
	a.Spec.ServiceNamespace = kube.Intern(a.Spec.ServiceNamespace)
	return a, nil
}

// namespace keeps a Namespace's name and deletion timestamp.
func (t *slimmer) namespace(in any) (any, error) {
	ns, ok := in.(*corev1.Namespace)
	if !ok {
		return stripManagedFields(in)
	}
	return &corev1.Namespace{TypeMeta: ns.TypeMeta, ObjectMeta: readMeta(ns.ObjectMeta)}, nil
}
