package controller

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/kube/plaincache"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// The broker's ServiceExportRecords and VIPAllocations, one of each per
// exported Service and cluster, are cached as plain values (package
// plaincache) too.

// cachedRecord is what the controller keeps of a broker
// ServiceExportRecord: its identity, its age (the broker's creation time)
// and the Service it is about; of this cluster's own record the spec's
// content hash (mcs.ContentHash), compared with the desired one; of
// another cluster's record in its namespace the cluster and part its spec
// names and, while that cluster's quota takes it (recordQuotas), its
// whole spec (body), which is merged. One being deleted is not kept. A
// value costs bytes per record, not the object: there is one per
// exported Service and member (50 000 at 100 members of 500 Services).
type cachedRecord struct {
	uid             types.UID
	resourceVersion string
	created         metav1.Time
	service         types.NamespacedName // spec.serviceNamespace, spec.serviceName
	part            bool                 // a part of a split record (not named mcs.RecordName)
	hash            string               // this cluster's own record

	// Another cluster's record: cluster and specPart are the cluster and
	// part its spec names (specPart nil: a whole record), backends what it
	// counts against its cluster's quota (addrpolicy.RecordBackends), body
	// its whole spec.
	cluster  string
	specPart *causewayv1alpha1.RecordPart
	backends int
	body     *recordBody
}

// identity is what mcs.JoinRecord checks of a remote record object: its
// cluster, Service and part.
func (v cachedRecord) identity() mcs.ExportRecord {
	return mcs.ExportRecord{ClusterID: v.cluster, ServiceNamespace: v.service.Namespace, ServiceName: v.service.Name, Part: v.specPart}
}

// recordBody holds a remote record's whole spec while its cluster's quota
// takes it: emptied when the record falls out of the quota (the memory is
// freed although the cache's value stays), filled again from the broker
// API server by the sync that needs it once the quota takes it again.
// Shared by every copy of the cached value.
type recordBody struct {
	spec atomic.Pointer[mcs.ExportRecord]
}

// remoteSpec is the whole spec of a remote record, if the cache holds it.
func (v cachedRecord) remoteSpec() (*mcs.ExportRecord, bool) {
	if v.body == nil {
		return nil, false
	}
	spec := v.body.spec.Load()
	return spec, spec != nil
}

func (t *slimmer) cachedRecord(obj any) (cachedRecord, bool) {
	r, ok := obj.(*causewayv1alpha1.ServiceExportRecord)
	if !ok || r.DeletionTimestamp != nil {
		return cachedRecord{}, false
	}
	v := cachedRecord{uid: r.UID, resourceVersion: r.ResourceVersion, created: r.CreationTimestamp,
		service: types.NamespacedName{Namespace: kube.Intern(r.Spec.ServiceNamespace), Name: r.Spec.ServiceName}}
	v.part = r.Name != mcs.RecordName(v.service.Namespace, v.service.Name)
	if r.Namespace == t.ownNamespace {
		v.hash = mcs.ContentHash(r.Spec)
		return v, true
	}
	// Listed ones come through slimmer.record, which shares the spec's
	// repeated strings; watched ones are shared here.
	if _, err := t.record(r); err != nil {
		return cachedRecord{}, false
	}
	v.cluster, v.specPart = r.Spec.ClusterID, r.Spec.Part
	if _, ok := broker.ClusterIDFromNamespace(r.Namespace); !ok {
		return v, true // not a cluster's: never merged
	}
	v.backends = addrpolicy.RecordBackends(&r.Spec)
	v.body = &recordBody{}
	if t.quotas == nil || t.quotas.wouldTake(r.Namespace, r.Name, r.CreationTimestamp.Time, v.backends) {
		spec := r.Spec // not &r.Spec, which would hold the whole object
		v.body.spec.Store(&spec)
	}
	return v, true
}

// object returns the record object of key, for a write: its identity and
// no spec.
func (v cachedRecord) object(key types.NamespacedName) *causewayv1alpha1.ServiceExportRecord {
	return &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		UID: v.uid, ResourceVersion: v.resourceVersion, CreationTimestamp: v.created}}
}

// recordGroup files the parts of split records under their Service
// ("<namespace>/<name>"); heads are found by name (recordHeads).
func recordGroup(_ types.NamespacedName, v cachedRecord) []string {
	if !v.part {
		return nil
	}
	return []string{v.service.String()}
}

// cachedVIP is what the controller keeps of a VIPAllocation: the Service
// holding the address (the object's name), the cluster that owns it
// (label causeway.dev/cluster-id) and its creation time — what
// mcs.VIPAllocator weighs. One being deleted, or whose name is no address
// of the clusterset VIP ranges, is not kept: it holds nothing here (a
// member creating allocations outside the ranges fills no importer's
// memory).
type cachedVIP struct {
	service types.NamespacedName
	owner   string
	created metav1.Time
}

func (t *slimmer) cachedVIP(obj any) (cachedVIP, bool) {
	a, ok := obj.(*causewayv1alpha1.VIPAllocation)
	if !ok || a.DeletionTimestamp != nil {
		return cachedVIP{}, false
	}
	addr, err := mcs.ParseVIPObjectName(a.Name)
	if err != nil || !slices.ContainsFunc(t.vipRanges, func(r netip.Prefix) bool { return r.Contains(addr) }) {
		return cachedVIP{}, false
	}
	return cachedVIP{service: types.NamespacedName{Namespace: kube.Intern(a.Spec.ServiceNamespace), Name: a.Spec.ServiceName},
		owner: kube.Intern(a.Labels[causewayv1alpha1.LabelClusterID]), created: a.CreationTimestamp}, true
}

// hold is the allocation of addr as mcs.VIPAllocator sees it.
func (v cachedVIP) hold(addr netip.Addr) mcs.VIPHold {
	return mcs.VIPHold{Addr: addr, Service: v.service, Owner: v.owner, Created: v.created.Time}
}

// vipGroup files an allocation under its Service ("<namespace>/<name>").
func vipGroup(_ types.NamespacedName, v cachedVIP) []string { return []string{v.service.String()} }

// brokerStores are the plain caches of the broker's objects.
type brokerStores struct {
	records *plaincache.Store[cachedRecord]
	vips    *plaincache.Store[cachedVIP]
}

// newBrokerStores returns the plain caches of the broker; every change of
// a record is told to observeRecord.
func newBrokerStores(broker *rest.Config, scheme *runtime.Scheme, t *slimmer,
	observeRecord func(key types.NamespacedName, old, new *cachedRecord)) (brokerStores, error) {
	wc, err := client.NewWithWatch(broker, client.Options{Scheme: scheme})
	if err != nil {
		return brokerStores{}, fmt.Errorf("broker client: %w", err)
	}
	return brokerStores{
		records: plaincache.New(plaincache.Config[cachedRecord]{
			Name: "serviceexportrecords",
			ListWatch: kube.ListWatch(wc, func() *causewayv1alpha1.ServiceExportRecordList {
				return &causewayv1alpha1.ServiceExportRecordList{}
			}),
			Example:   &causewayv1alpha1.ServiceExportRecord{},
			Transform: t.record,
			Convert:   t.cachedRecord,
			Groups:    recordGroup,
			Observe:   observeRecord,
		}),
		vips: plaincache.New(plaincache.Config[cachedVIP]{
			Name:      "vipallocations",
			ListWatch: kube.ListWatch(wc, func() *causewayv1alpha1.VIPAllocationList { return &causewayv1alpha1.VIPAllocationList{} }),
			Example:   &causewayv1alpha1.VIPAllocation{},
			Transform: t.vipAllocation,
			Convert:   t.cachedVIP,
			Groups:    vipGroup,
		}),
	}, nil
}

// recordsOf returns the Services of the cached records in broker
// namespace ns and of Services in namespace svcNS (either may be empty:
// any), each once. It scans every record: for the rare events that
// concern many Services.
func (b brokerStores) recordsOf(ns, svcNS string) []types.NamespacedName {
	var out []types.NamespacedName
	for _, it := range b.records.Items() {
		if (ns == "" || it.Key.Namespace == ns) && (svcNS == "" || it.Value.service.Namespace == svcNS) {
			out = append(out, it.Value.service)
		}
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return slices.Compact(out)
}

// vipsOf returns the allocations of svc in the broker cache.
func (b brokerStores) vipsOf(svc types.NamespacedName) []mcs.VIPHold {
	var out []mcs.VIPHold
	for _, it := range b.vips.Group(svc.String()) {
		if addr, err := mcs.ParseVIPObjectName(it.Key.Name); err == nil {
			out = append(out, it.Value.hold(addr))
		}
	}
	slices.SortFunc(out, func(x, y mcs.VIPHold) int { return x.Addr.Compare(y.Addr) })
	return out
}
