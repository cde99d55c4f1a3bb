package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/mcs"
)

func ptr[T any](v T) *T { return &v }

// fullMeta is metadata as a real cluster serves it: labels, a large
// last-applied annotation, owner references, managed fields.
func fullMeta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	del := metav1.NewTime(time.Unix(1700000100, 0))
	return metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "42", Generation: 3,
		CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0)), DeletionTimestamp: &del,
		Labels:          labels,
		Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": string(make([]byte, 4096))},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: "owner"}},
		Finalizers:      []string{"example.com/f"},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
	}
}

// richServiceSpec is a dual-stack Service spec with every field the
// export record reads set, and some it does not read.
func richServiceSpec() corev1.ServiceSpec {
	return corev1.ServiceSpec{
		Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
		IPFamilies:      []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		SessionAffinity: corev1.ServiceAffinityClientIP,
		SessionAffinityConfig: &corev1.SessionAffinityConfig{
			ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}},
		InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyLocal),
		TrafficDistribution:   ptr("PreferClose"),
		Selector:              map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, AppProtocol: ptr("http"), TargetPort: intOrString(8080), NodePort: 30080},
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		},
	}
}

func TestSlimServiceKeepsTheExportRecord(t *testing.T) {
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web",
		CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0))}}
	for _, svc := range []*corev1.Service{
		{
			ObjectMeta: fullMeta("ns", "web", map[string]string{"app": "web"}),
			Spec:       richServiceSpec(),
			Status:     corev1.ServiceStatus{Conditions: []metav1.Condition{{Type: "x", Status: "True"}}},
		},
		{ObjectMeta: fullMeta("ns", "web", nil), Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{Name: "sql", Port: 5432}}}},
		{ObjectMeta: fullMeta("ns", "web", nil), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}},
	} {
		full := svc.DeepCopy()
		out, err := newSlimmer("cluster-c1").service(svc)
		if err != nil {
			t.Fatal(err)
		}
		slim := out.(*corev1.Service)
		want, wantErr := mcs.NewExportRecord("c1", export, full)
		got, gotErr := mcs.NewExportRecord("c1", export, slim)
		if !equality.Semantic.DeepEqual(want, got) || (wantErr == nil) != (gotErr == nil) {
			t.Errorf("record from the slim Service differs:\nfull %+v %v\nslim %+v %v", want, wantErr, got, gotErr)
		}
		if slim.Annotations != nil || slim.Labels != nil || slim.ManagedFields != nil || slim.Spec.Selector != nil || slim.UID != "" {
			t.Errorf("slim Service keeps unread fields: %+v", slim.ObjectMeta)
		}
		if slim.DeletionTimestamp == nil || slim.Name != full.Name || slim.Namespace != full.Namespace || slim.ResourceVersion != full.ResourceVersion {
			t.Errorf("slim Service lost its identity: %+v", slim.ObjectMeta)
		}
	}
}

func TestSlimEndpointSlice(t *testing.T) {
	local := &discoveryv1.EndpointSlice{
		ObjectMeta: fullMeta("ns", "web-abcde", map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
			"app": "web", "team": "a"}),
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.2"}, Hostname: ptr("web-0"), NodeName: ptr("n1"), Zone: ptr("z1"),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "pod"},
				Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}}},
			{Addresses: []string{"10.244.1.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Terminating: ptr(true)}},
		},
	}
	full := local.DeepCopy()
	out, err := newSlimmer("cluster-c1").endpointSlice(local)
	if err != nil {
		t.Fatal(err)
	}
	slim := out.(*discoveryv1.EndpointSlice)
	want := mcs.RecordEndpointsFromSlices([]discoveryv1.EndpointSlice{*full})
	if got := mcs.RecordEndpointsFromSlices([]discoveryv1.EndpointSlice{*slim}); !equality.Semantic.DeepEqual(want, got) {
		t.Errorf("record endpoints from the slim slice differ:\nfull %+v\nslim %+v", want, got)
	}
	wantLabels := map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}
	if !equality.Semantic.DeepEqual(slim.Labels, wantLabels) {
		t.Errorf("slim slice labels %v, want %v", slim.Labels, wantLabels)
	}
	if slim.Annotations != nil || slim.OwnerReferences != nil || slim.UID != "" || slim.Endpoints[0].TargetRef != nil || slim.Endpoints[0].Hints != nil {
		t.Errorf("slim slice keeps unread fields: %+v", slim)
	}

	// The controller's own slices are kept whole but for managed fields:
	// their hash is taken of what the controller sets.
	own := full.DeepCopy()
	own.Labels = map[string]string{mcsv1beta1.LabelServiceName: "web", discoveryv1.LabelManagedBy: mcs.ManagedBy,
		mcsv1beta1.LabelSourceCluster: "c2"}
	own.Annotations = map[string]string{mcs.AnnotationReadyEndpoints: "2"}
	wantHash := mcs.SliceHash(own)
	out, err = newSlimmer("cluster-c1").endpointSlice(own.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	kept := out.(*discoveryv1.EndpointSlice)
	if mcs.SliceHash(kept) != wantHash || kept.ManagedFields != nil {
		t.Errorf("own slice not kept whole without managed fields: %+v", kept)
	}
	// A change of anything the controller sets changes the hash.
	changed := own.DeepCopy()
	changed.Endpoints[1].Conditions.Ready = ptr(true)
	if mcs.SliceHash(changed) == wantHash {
		t.Errorf("hash unchanged by a readiness change")
	}
}

func TestContentHashAndRecordTransform(t *testing.T) {
	spec := mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"241.0.0.1"},
		Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	// An empty list and none are the same content, as after an API round trip.
	noPorts := spec.DeepCopy()
	noPorts.Ports = nil
	emptyPorts := spec.DeepCopy()
	emptyPorts.Ports = []mcsv1beta1.ServicePort{}
	if mcs.ContentHash(noPorts) != mcs.ContentHash(emptyPorts) || mcs.ContentHash(noPorts) == mcs.ContentHash(spec) {
		t.Errorf("hash tells nil from empty ports, or misses the ports")
	}

	rspec := mcs.ExportRecord{ClusterID: "c1", ServiceNamespace: "ns", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
		Ports: []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, ClusterIPs: []string{"10.96.0.10"},
		Part: &causewayv1alpha1.RecordPart{Index: 1, Count: 2, Revision: "abcdef0123"}}
	for _, ns := range []string{"cluster-c1", "cluster-c2"} {
		rec := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: fullMeta(ns, "ns.web", nil), Spec: *rspec.DeepCopy()}
		out, err := newSlimmer("cluster-c1").record(rec)
		if err != nil {
			t.Fatal(err)
		}
		r := out.(*causewayv1alpha1.ServiceExportRecord)
		if !equality.Semantic.DeepEqual(r.Spec, rspec) || r.ManagedFields != nil || r.UID != "uid-ns.web" {
			t.Errorf("record in %s not kept whole without managed fields: %+v", ns, r)
		}
		if again, err := newSlimmer("cluster-c1").record(r.DeepCopy()); err != nil || !equality.Semantic.DeepEqual(again, r) {
			t.Errorf("transform of the transformed record: %+v, %v; want it unchanged", again, err)
		}
	}
}

func TestSlimServiceExportAndNamespace(t *testing.T) {
	se := &mcsv1beta1.ServiceExport{ObjectMeta: fullMeta("ns", "web", map[string]string{"a": "b"}),
		Spec:   mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"x": "y"}},
		Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{{Type: "Valid", Status: "True", Reason: "Valid"}}}}
	want := se.DeepCopy()
	out, err := newSlimmer("cluster-c1").serviceExport(se)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*mcsv1beta1.ServiceExport)
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) || !equality.Semantic.DeepEqual(got.Status, want.Status) ||
		got.UID != want.UID || got.Generation != want.Generation || !got.CreationTimestamp.Equal(&want.CreationTimestamp) ||
		got.DeletionTimestamp == nil {
		t.Errorf("slim ServiceExport lost what the controller reads: %+v", got)
	}
	if got.Annotations != nil || got.Labels != nil || got.ManagedFields != nil {
		t.Errorf("slim ServiceExport keeps unread metadata: %+v", got.ObjectMeta)
	}

	ns := &corev1.Namespace{ObjectMeta: fullMeta("", "ns", map[string]string{"a": "b"})}
	out, err = newSlimmer("cluster-c1").namespace(ns)
	if err != nil {
		t.Fatal(err)
	}
	if n := out.(*corev1.Namespace); n.Name != "ns" || n.DeletionTimestamp == nil || n.Annotations != nil || n.Labels != nil {
		t.Errorf("slim Namespace %+v", n.ObjectMeta)
	}

	// Anything else (a tombstone) passes through.
	other := "not an object"
	if v, err := newSlimmer("cluster-c1").service(other); err != nil || v != other {
		t.Errorf("service(%q) = %v, %v", other, v, err)
	}
}

func intOrString(port int) intstr.IntOrString { return intstr.FromInt(port) }

func TestSlimVIPAllocation(t *testing.T) {
	a := &causewayv1alpha1.VIPAllocation{ObjectMeta: fullMeta("", "241.0.0.1", map[string]string{
		mcs.LabelVIPServiceNamespace: "ns", mcs.LabelVIPServiceName: "web", causewayv1alpha1.LabelClusterID: "c1"}),
		Spec: causewayv1alpha1.VIPAllocationSpec{ServiceNamespace: "ns", ServiceName: "web"}}
	full := a.DeepCopy()
	out, err := newSlimmer("cluster-c1").vipAllocation(a)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*causewayv1alpha1.VIPAllocation)
	if got.Spec != full.Spec || got.Name != full.Name || got.UID != full.UID || got.ResourceVersion != full.ResourceVersion || got.DeletionTimestamp == nil {
		t.Errorf("slim VIPAllocation lost what the controller reads: %+v", got)
	}
	if !equality.Semantic.DeepEqual(got.Labels, map[string]string{causewayv1alpha1.LabelClusterID: "c1"}) || got.Annotations != nil ||
		got.ManagedFields != nil || !got.CreationTimestamp.Equal(&full.CreationTimestamp) {
		t.Errorf("slim VIPAllocation keeps other labels or annotations, or lost its owner or age: %+v", got.ObjectMeta)
	}
}
