package controller

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestCachedRecord: another cluster's record keeps its whole spec, what
// it is and what it counts against its quota, this cluster's own its
// spec's hash, both their identity, age and Service, whether watched
// (whole) or listed (through slimmer.record); a part is filed under its
// Service and a head is not; a record being deleted is not kept; a
// remote record its cluster's quota does not take keeps no spec.
func TestCachedRecord(t *testing.T) {
	spec := mcs.ExportRecord{ClusterID: "c2", ServiceNamespace: "ns", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
		Ports: []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, ClusterIPs: []string{"10.96.0.10"}}
	for _, tc := range []struct {
		ns, name string
		own      bool
		part     bool
	}{
		{"cluster-c2", "ns.web", false, false},
		{"cluster-c1", "ns.web", true, false},
		{"cluster-c1", "ns.web-abcdef0123-1", true, true},
	} {
		meta := fullMeta(tc.ns, tc.name, nil)
		meta.DeletionTimestamp = nil
		rec := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: meta, Spec: *spec.DeepCopy()}
		listed, err := newSlimmer("cluster-c1").record(rec.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		for how, obj := range map[string]any{"watched": rec.DeepCopy(), "listed": listed} {
			v, ok := newSlimmer("cluster-c1").cachedRecord(obj)
			if !ok {
				t.Fatalf("%s %s/%s not kept", how, tc.ns, tc.name)
			}
			// The spec kept is a copy: a pointer into the object would
			// keep all of it (metadata, status) alive.
			if whole, _ := v.remoteSpec(); whole == &obj.(*causewayv1alpha1.ServiceExportRecord).Spec {
				t.Errorf("%s %s/%s: the cache holds the object's own spec", how, tc.ns, tc.name)
			}
			if v.uid != meta.UID || v.resourceVersion != meta.ResourceVersion || !v.created.Equal(&meta.CreationTimestamp) ||
				v.service != (types.NamespacedName{Namespace: "ns", Name: "web"}) || v.part != tc.part {
				t.Errorf("%s %s/%s: identity %+v", how, tc.ns, tc.name, v)
			}
			whole, kept := v.remoteSpec()
			switch {
			case tc.own && (kept || v.cluster != "" || v.hash != mcs.ContentHash(spec)):
				t.Errorf("%s own record %s/%s: spec %+v, hash %q; want no spec and hash %q", how, tc.ns, tc.name, whole, v.hash, mcs.ContentHash(spec))
			case !tc.own && (!kept || !equality.Semantic.DeepEqual(*whole, spec) || v.hash != "" || v.backends != 1 ||
				!equality.Semantic.DeepEqual(v.identity(), mcs.ExportRecord{ClusterID: "c2", ServiceNamespace: "ns", ServiceName: "web"})):
				t.Errorf("%s remote record %s/%s: spec %+v, identity %+v, %d backends, hash %q; want the whole spec, its identity and 1 backend",
					how, tc.ns, tc.name, whole, v.identity(), v.backends, v.hash)
			}
			groups := recordGroup(types.NamespacedName{Namespace: tc.ns, Name: tc.name}, v)
			if tc.part != (len(groups) == 1 && groups[0] == "ns/web") || !tc.part && len(groups) != 0 {
				t.Errorf("%s %s/%s in groups %q", how, tc.ns, tc.name, groups)
			}
		}
	}
	deleting := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: fullMeta("cluster-c2", "ns.web", nil), Spec: spec}
	if _, ok := newSlimmer("cluster-c1").cachedRecord(deleting); ok {
		t.Error("a record being deleted is kept")
	}
	// c2's quota is one record, taken by an older one.
	slim := newSlimmer("cluster-c1")
	slim.quotas = newRecordQuotas(addrpolicy.Quotas{Records: 1, Backends: 100})
	slim.quotas.set("cluster-c2", "ns.older", time.Unix(1, 0), 1)
	meta := fullMeta("cluster-c2", "ns.web", nil)
	meta.DeletionTimestamp = nil
	v, ok := slim.cachedRecord(&causewayv1alpha1.ServiceExportRecord{ObjectMeta: meta, Spec: *spec.DeepCopy()})
	if whole, kept := v.remoteSpec(); !ok || kept || v.cluster != "c2" || v.backends != 1 {
		t.Errorf("record over its cluster's quota kept as %+v (spec %+v), want its identity and no spec", v, whole)
	}
}

// TestCachedVIP: an allocation keeps its Service, owner and creation time
// and is filed under its Service; one being deleted, or outside the VIP
// ranges, is not kept.
func TestCachedVIP(t *testing.T) {
	slim := newSlimmer("cluster-c1", netip.MustParsePrefix("243.0.0.0/12"), netip.MustParsePrefix("fd63:6175:7365::/108"))
	addr := netip.MustParseAddr("243.0.0.7")
	created := metav1.Unix(1_000_000, 0)
	a := &causewayv1alpha1.VIPAllocation{ObjectMeta: metav1.ObjectMeta{Name: mcs.VIPObjectName(addr), UID: "u", CreationTimestamp: created,
		Labels: map[string]string{causewayv1alpha1.LabelClusterID: "c2"}},
		Spec: causewayv1alpha1.VIPAllocationSpec{ServiceNamespace: "ns", ServiceName: "web"}}
	v, ok := slim.cachedVIP(a)
	want := mcs.VIPHold{Addr: addr, Service: types.NamespacedName{Namespace: "ns", Name: "web"}, Owner: "c2", Created: created.Time}
	if !ok || v.hold(addr) != want {
		t.Fatalf("allocation kept as %+v %v, want %+v", v, ok, want)
	}
	if g := vipGroup(types.NamespacedName{Name: a.Name}, v); len(g) != 1 || g[0] != "ns/web" {
		t.Errorf("allocation in groups %q, want [ns/web]", g)
	}
	for _, name := range []string{"10.0.0.7", "243.16.0.1", "v6-fd00-0000-0000-0000-0000-0000-0000-0001", "not-an-address"} {
		out := a.DeepCopy()
		out.Name = name
		if _, ok := slim.cachedVIP(out); ok {
			t.Errorf("allocation %s outside the VIP ranges is kept", name)
		}
	}
	a.DeletionTimestamp = ptr(metav1.Now())
	if _, ok := slim.cachedVIP(a); ok {
		t.Error("an allocation being deleted is kept")
	}
}

// BenchmarkRecordCacheMemory: the heap that $MCS_BENCH_MEMBERS (default
// 100) remote members' records of $MCS_BENCH_SERVICES (default 500)
// Services each hold in the record cache, as `causeway-lab benchmark
// scale` writes them (one port, one ClusterIP, one ready endpoint), each
// decoded from its JSON and passed through the cache's transform and
// conversion (slimmer.record, slimmer.cachedRecord) with the default
// quotas. Reports bytes per record (the live heap after a GC, before and
// after, divided by the records).
//
//	go test -run '^$' -bench BenchmarkRecordCacheMemory ./pkg/mcs/controller/
func BenchmarkRecordCacheMemory(b *testing.B) {
	members, services := 100, 500
	if s := os.Getenv("MCS_BENCH_MEMBERS"); s != "" {
		members, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("MCS_BENCH_SERVICES"); s != "" {
		services, _ = strconv.Atoi(s)
	}
	raws := make([][]byte, 0, members*services)
	for m := range members {
		id := fmt.Sprintf("scalesim-%03d", m+1)
		for i := range services {
			raws = append(raws, benchRecordJSON(b, id, i, netip.AddrFrom4([4]byte{10, byte(128 + m%128), byte(i / 250), byte(i%250 + 1)})))
		}
	}
	liveHeap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var perRecord float64
	for b.Loop() {
		slim := newSlimmer("cluster-c2")
		slim.quotas = newRecordQuotas(addrpolicy.DefaultPolicy().Quotas)
		before := liveHeap()
		cache := make(map[types.NamespacedName]*cachedRecord, len(raws))
		for _, raw := range raws {
			r := &causewayv1alpha1.ServiceExportRecord{}
			if err := json.Unmarshal(raw, r); err != nil {
				b.Fatal(err)
			}
			obj, _ := slim.record(r)
			v, ok := slim.cachedRecord(obj)
			if !ok {
				b.Fatalf("record %s/%s not kept", r.Namespace, r.Name)
			}
			slim.quotas.set(r.Namespace, r.Name, v.created.Time, v.backends)
			cache[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}] = &v
		}
		perRecord = float64(liveHeap()-before) / float64(len(cache))
		runtime.KeepAlive(cache)
	}
	b.ReportMetric(perRecord, "B/record")
	b.ReportMetric(perRecord*float64(len(raws))/(1<<20), "MiB")
}

// benchRecordJSON is member id's record of Service svc-<i> with
// ClusterIP ip, as the broker API server sends it.
func benchRecordJSON(b *testing.B, id string, i int, ip netip.Addr) []byte {
	name := fmt.Sprintf("svc-%d", i)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-scale", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip.String(), ClusterIPs: []string{ip.String()},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-scale", Name: name, CreationTimestamp: metav1.Now()}}
	spec, err := mcs.NewExportRecord(id, export, svc)
	if err != nil {
		b.Fatal(err)
	}
	spec.ReadyEndpoints, spec.ServingEndpoints = 1, 1
	raw, err := json.Marshal(&causewayv1alpha1.ServiceExportRecord{
		TypeMeta: metav1.TypeMeta{APIVersion: causewayv1alpha1.GroupVersion.String(), Kind: "ServiceExportRecord"},
		ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(id), Name: mcs.RecordName("causeway-scale", name),
			UID: uuid.NewUUID(), ResourceVersion: strconv.Itoa(100000 + i), Generation: 1, CreationTimestamp: metav1.Now(),
			Labels: map[string]string{causewayv1alpha1.LabelClusterID: id}},
		Spec: spec,
	})
	if err != nil {
		b.Fatal(err)
	}
	return raw
}
