package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/kube/plaincache"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// The cluster's Services and EndpointSlices are the most numerous objects
// the controller reads, and it reads little of each: they are cached as
// plain values (package plaincache) rather than in informers.

// cachedService is what the controller keeps of a Service: what
// mcs.NewExportRecord reads. A Service being deleted
// is not kept.
type cachedService struct {
	typ            corev1.ServiceType
	clusterIPs     []string // the ClusterIP alone when the Service has no ClusterIPs
	families       []corev1.IPFamily
	affinity       corev1.ServiceAffinity
	affinityConfig *corev1.SessionAffinityConfig
	internalPolicy *corev1.ServiceInternalTrafficPolicy
	distribution   *string
	ports          []corev1.ServicePort // name, protocol, port and app protocol
}

func (t *slimmer) cachedService(obj any) (cachedService, bool) {
	s, ok := obj.(*corev1.Service)
	if !ok || s.DeletionTimestamp != nil {
		return cachedService{}, false
	}
	v := cachedService{
		typ:            corev1.ServiceType(kube.Intern(string(s.Spec.Type))),
		clusterIPs:     s.Spec.ClusterIPs,
		families:       s.Spec.IPFamilies,
		affinity:       corev1.ServiceAffinity(kube.Intern(string(s.Spec.SessionAffinity))),
		affinityConfig: s.Spec.SessionAffinityConfig,
		internalPolicy: s.Spec.InternalTrafficPolicy,
		distribution:   s.Spec.TrafficDistribution,
	}
	if len(v.clusterIPs) == 0 && s.Spec.ClusterIP != "" {
		v.clusterIPs = []string{s.Spec.ClusterIP}
	}
	if len(s.Spec.Ports) > 0 {
		v.ports = make([]corev1.ServicePort, len(s.Spec.Ports))
		for i, p := range s.Spec.Ports {
			v.ports[i] = corev1.ServicePort{Name: kube.Intern(p.Name), Protocol: corev1.Protocol(kube.Intern(string(p.Protocol))),
				Port: p.Port, AppProtocol: p.AppProtocol}
		}
	}
	return v, true
}

// service returns the Service of key as mcs reads it. It shares slices
// with the cache: read only.
func (v cachedService) service(key types.NamespacedName) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: corev1.ServiceSpec{
			Type:                  v.typ,
			ClusterIPs:            v.clusterIPs,
			IPFamilies:            v.families,
			SessionAffinity:       v.affinity,
			SessionAffinityConfig: v.affinityConfig,
			InternalTrafficPolicy: v.internalPolicy,
			TrafficDistribution:   v.distribution,
			Ports:                 v.ports,
		},
	}
	if len(v.clusterIPs) > 0 {
		svc.Spec.ClusterIP = v.clusterIPs[0]
	}
	return svc
}

// cachedSlice is what the controller keeps of an EndpointSlice of one of
// two kinds. A Service's own slice (label kubernetes.io/service-name, not
// managed by mcs.ManagedBy) keeps what mcs.RecordEndpointsFromSlices
// reads. A multi-cluster slice this controller wrote
// (label multicluster.kubernetes.io/service-name, managed by
// mcs.ManagedBy) keeps its resource version and content hash
// (mcs.SliceHash), what mcs.PlanEndpointSlices compares. Other slices are
// not kept.
type cachedSlice struct {
	service  string // the name of the Service it belongs to, in its namespace
	imported bool   // a multi-cluster slice (the second kind)

	resourceVersion, hash string // imported

	addressType discoveryv1.AddressType // own
	ports       []discoveryv1.EndpointPort
	endpoints   []discoveryv1.Endpoint
}

func (t *slimmer) cachedSlice(obj any) (cachedSlice, bool) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return cachedSlice{}, false
	}
	// The reflector passes the objects of a list through
	// slimmer.endpointSlice first, those of a watch as they are: both give
	// the same value.
	own, imported := s.Labels[discoveryv1.LabelServiceName], s.Labels[mcsv1beta1.LabelServiceName]
	switch {
	case s.Labels[discoveryv1.LabelManagedBy] == mcs.ManagedBy && imported != "":
		return cachedSlice{service: imported, imported: true, resourceVersion: s.ResourceVersion, hash: mcs.SliceHash(s)}, true
	case s.Labels[discoveryv1.LabelManagedBy] != mcs.ManagedBy && own != "":
		return cachedSlice{service: own, addressType: discoveryv1.AddressType(kube.Intern(string(s.AddressType))), ports: s.Ports,
			endpoints: t.endpoints(s.Endpoints)}, true
	}
	return cachedSlice{}, false
}

// sliceGroup is the group of a Service's slices: "<namespace>/<name>".
func sliceGroup(key types.NamespacedName, v cachedSlice) []string {
	return []string{key.Namespace + "/" + v.service}
}

// localSlices returns the Service's own EndpointSlices among a group of
// cached slices (sliceGroup), as mcs reads them. They share slices with
// the cache: read only.
func localSlices(group []plaincache.Item[cachedSlice]) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, it := range group {
		if v := it.Value; !v.imported {
			out = append(out, discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: it.Key.Namespace, Name: it.Key.Name},
				AddressType: v.addressType, Ports: v.ports, Endpoints: v.endpoints})
		}
	}
	return out
}

// importedSlices returns the multi-cluster EndpointSlices written here
// among a group of cached slices, as mcs.PlanEndpointSlices takes them.
func importedSlices(group []plaincache.Item[cachedSlice]) []mcs.ExistingSlice {
	var out []mcs.ExistingSlice
	for _, it := range group {
		if v := it.Value; v.imported {
			out = append(out, mcs.ExistingSlice{Namespace: it.Key.Namespace, Name: it.Key.Name, ResourceVersion: v.resourceVersion, Hash: v.hash})
		}
	}
	return out
}

// localStores are the plain caches of the cluster's objects (see
// localcache.go's cached types).
type localStores struct {
	services *plaincache.Store[cachedService]
	slices   *plaincache.Store[cachedSlice]
	exports  *plaincache.Store[cachedExport]
	imports  *plaincache.Store[cachedImport]
}

// newLocalStores returns the plain caches of the local cluster: Services
// and EndpointSlices read through a clientset speaking protobuf, the MCS
// objects through a client of scheme.
func newLocalStores(local *rest.Config, scheme *runtime.Scheme, t *slimmer) (localStores, error) {
	cs, err := kube.ProtobufClientset(local)
	if err != nil {
		return localStores{}, fmt.Errorf("local clientset: %w", err)
	}
	wc, err := client.NewWithWatch(local, client.Options{Scheme: scheme})
	if err != nil {
		return localStores{}, fmt.Errorf("local client: %w", err)
	}
	return localStores{
		services: plaincache.New(plaincache.Config[cachedService]{
			Name:      "services",
			ListWatch: cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "services", metav1.NamespaceAll, fields.Everything()),
			Example:   &corev1.Service{},
			Transform: t.service,
			Convert:   t.cachedService,
		}),
		slices: plaincache.New(plaincache.Config[cachedSlice]{
			Name:      "endpointslices",
			ListWatch: cache.NewListWatchFromClient(cs.DiscoveryV1().RESTClient(), "endpointslices", metav1.NamespaceAll, fields.Everything()),
			Example:   &discoveryv1.EndpointSlice{},
			Transform: t.endpointSlice,
			Convert:   t.cachedSlice,
			Groups:    sliceGroup,
		}),
		exports: plaincache.New(plaincache.Config[cachedExport]{
			Name:      "serviceexports",
			ListWatch: kube.ListWatch(wc, func() *mcsv1beta1.ServiceExportList { return &mcsv1beta1.ServiceExportList{} }),
			Example:   &mcsv1beta1.ServiceExport{},
			Transform: t.serviceExport,
			Convert:   t.cachedExport,
		}),
		imports: plaincache.New(plaincache.Config[cachedImport]{
			Name:      "serviceimports",
			ListWatch: kube.ListWatch(wc, func() *mcsv1beta1.ServiceImportList { return &mcsv1beta1.ServiceImportList{} }),
			Example:   &mcsv1beta1.ServiceImport{},
			Transform: stripManagedFields,
			Convert:   t.cachedImport,
		}),
	}, nil
}

// syncedStore is a plain cache as the controller runs and waits for it.
type syncedStore interface {
	Run(ctx context.Context)
	WaitForSync(ctx context.Context) error
}

// storeRunner runs the plain caches from the manager's start, elected or
// not, so that a standby replica's caches are warm when it takes over.
type storeRunner []syncedStore

func (r storeRunner) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, s := range r {
		wg.Go(func() { s.Run(ctx) })
	}
	wg.Wait()
	return nil
}

// waitForSync waits until every store holds its initial list.
func (r storeRunner) waitForSync(ctx context.Context) error {
	for _, s := range r {
		if err := s.WaitForSync(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (storeRunner) NeedLeaderElection() bool { return false }

// storeSource feeds a plain cache's changes to the controller's queue
// (from the controller's start, so only while elected: every value first)
// and holds the workers back until the store has synced.
type storeSource[T any] struct {
	store    *plaincache.Store[T]
	requests func(key types.NamespacedName, v *T) []reconcile.Request
}

func (s storeSource[T]) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.store.Notify(func(key types.NamespacedName, old, new *T) {
		for _, v := range []*T{old, new} {
			if v != nil {
				for _, r := range s.requests(key, v) {
					q.Add(r)
				}
			}
		}
	})
	return nil
}

// byKey is the request of a store's own key.
func byKey[T any](key types.NamespacedName, _ *T) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: key}}
}

func (s storeSource[T]) WaitForSync(ctx context.Context) error { return s.store.WaitForSync(ctx) }

// cachedExport is what the controller keeps of a ServiceExport: what the
// record takes from it (its age, exported labels and annotations) and its
// status, which the controller patches. One being deleted is not kept.
type cachedExport struct {
	uid                                 types.UID
	resourceVersion                     string
	generation                          int64
	created                             metav1.Time
	exportedLabels, exportedAnnotations map[string]string
	conditions                          []metav1.Condition
}

func (t *slimmer) cachedExport(obj any) (cachedExport, bool) {
	se, ok := obj.(*mcsv1beta1.ServiceExport)
	if !ok || se.DeletionTimestamp != nil {
		return cachedExport{}, false
	}
	kube.InternConditions(se.Status.Conditions)
	// Cloned: the decoder's slice has room to grow (cap 4 for 3).
	return cachedExport{uid: se.UID, resourceVersion: se.ResourceVersion, generation: se.Generation, created: se.CreationTimestamp,
		exportedLabels: se.Spec.ExportedLabels, exportedAnnotations: se.Spec.ExportedAnnotations,
		conditions: slices.Clone(se.Status.Conditions)}, true
}

// export returns the ServiceExport of key as the controller reads it. It
// shares maps and slices with the cache: copy before modifying.
func (v cachedExport) export(key types.NamespacedName) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: v.uid, ResourceVersion: v.resourceVersion,
			Generation: v.generation, CreationTimestamp: v.created},
		Spec:   mcsv1beta1.ServiceExportSpec{ExportedLabels: v.exportedLabels, ExportedAnnotations: v.exportedAnnotations},
		Status: mcsv1beta1.ServiceExportStatus{Conditions: v.conditions},
	}
}

// cachedImport is what the controller keeps of a ServiceImport it wrote:
// its identity, labels and annotations, status, and the content hash of
// its spec (mcs.ContentHash), which is compared with the desired one.
type cachedImport struct {
	uid                 types.UID
	resourceVersion     string
	generation          int64
	labels, annotations map[string]string
	// finalizers and ownerReferences are kept for the updates, which
	// replace the whole object; normally there are none.
	finalizers      []string
	ownerReferences []metav1.OwnerReference
	specHash        string
	status          mcsv1beta1.ServiceImportStatus
}

func (t *slimmer) cachedImport(obj any) (cachedImport, bool) {
	si, ok := obj.(*mcsv1beta1.ServiceImport)
	if !ok {
		return cachedImport{}, false
	}
	kube.InternMeta(&si.ObjectMeta)
	for i := range si.Status.Clusters {
		si.Status.Clusters[i].Cluster = kube.Intern(si.Status.Clusters[i].Cluster)
	}
	kube.InternConditions(si.Status.Conditions)
	// Cloned: the decoder's slices have room to grow.
	si.Status.Conditions, si.Status.Clusters = slices.Clone(si.Status.Conditions), slices.Clone(si.Status.Clusters)
	return cachedImport{uid: si.UID, resourceVersion: si.ResourceVersion, generation: si.Generation,
		labels: si.Labels, annotations: si.Annotations, finalizers: si.Finalizers, ownerReferences: si.OwnerReferences,
		specHash: mcs.ContentHash(si.Spec), status: si.Status}, true
}

// serviceImport returns the ServiceImport of key without its spec (see
// specHash). It shares maps and slices with the cache: copy before
// modifying.
func (v cachedImport) serviceImport(key types.NamespacedName) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: v.uid, ResourceVersion: v.resourceVersion,
			Generation: v.generation, Labels: v.labels, Annotations: v.annotations, Finalizers: v.finalizers,
			OwnerReferences: v.ownerReferences},
		Status: v.status,
	}
}
