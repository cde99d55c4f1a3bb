package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/kube/plaincache"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestCachedServiceKeepsWhatIsRead: the plain value of a Service, made
// from the object a watch delivers or from the slim copy a list holds,
// gives the export record of the full Service; a
// Service being deleted is not kept.
func TestCachedServiceKeepsWhatIsRead(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	meta := fullMeta("ns", "web", map[string]string{"app": "web"})
	meta.DeletionTimestamp = nil
	for _, spec := range []corev1.ServiceSpec{
		richServiceSpec(),
		{ClusterIP: "10.96.0.11", Ports: []corev1.ServicePort{{Name: "sql", Port: 5432}}}, // no ClusterIPs
		{ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone}, Ports: []corev1.ServicePort{{Name: "sql", Port: 5432}}},
		{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"},
	} {
		full := &corev1.Service{ObjectMeta: meta, Spec: spec}
		want, wantErr := mcs.NewExportRecord("c1", export, full)
		slim, err := newSlimmer("cluster-c1").service(full.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		for name, obj := range map[string]any{"watched": full.DeepCopy(), "listed": slim} {
			v, ok := newSlimmer("cluster-c1").cachedService(obj)
			if !ok {
				t.Fatalf("%s Service %+v not kept", name, spec)
			}
			svc := v.service(key)
			got, gotErr := mcs.NewExportRecord("c1", export, svc)
			if !equality.Semantic.DeepEqual(want, got) || (wantErr == nil) != (gotErr == nil) {
				t.Errorf("record from the %s cached Service differs:\nfull   %+v %v\ncached %+v %v", name, want, wantErr, got, gotErr)
			}
		}
	}
	deleting := &corev1.Service{ObjectMeta: fullMeta("ns", "web", nil), Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10"}}
	if _, ok := newSlimmer("cluster-c1").cachedService(deleting); ok {
		t.Error("a Service being deleted is kept")
	}
}

// TestCachedSliceKeepsWhatIsRead: a Service's own slice keeps what its
// record reads, a multi-cluster slice of this controller its
// resource version and content hash, whether watched or listed (through
// slimmer.endpointSlice); slices of neither kind are not kept.
func TestCachedSliceKeepsWhatIsRead(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	own := &discoveryv1.EndpointSlice{
		ObjectMeta: fullMeta("ns", "web-abcde", map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io", "app": "web"}),
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.2"}, Hostname: ptr("web-0"), NodeName: ptr("n1"), Zone: ptr("z1"),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "web-0", UID: "pod"}},
			{Addresses: []string{"10.244.1.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false), Terminating: ptr(true)}},
		},
	}
	wantRecord := mcs.RecordEndpointsFromSlices([]discoveryv1.EndpointSlice{*own})

	imported := own.DeepCopy()
	imported.Name = "web-c2-ipv4"
	imported.Labels = map[string]string{mcsv1beta1.LabelServiceName: "web", discoveryv1.LabelManagedBy: mcs.ManagedBy,
		mcsv1beta1.LabelSourceCluster: "c2"}
	wantHash := mcs.SliceHash(imported)

	for _, listed := range []bool{false, true} {
		in := map[string]*discoveryv1.EndpointSlice{"own": own.DeepCopy(), "imported": imported.DeepCopy()}
		if listed {
			for k, s := range in {
				out, err := newSlimmer("cluster-c1").endpointSlice(s)
				if err != nil {
					t.Fatal(err)
				}
				in[k] = out.(*discoveryv1.EndpointSlice)
			}
		}
		var group []plaincache.Item[cachedSlice]
		for _, s := range in {
			v, ok := newSlimmer("cluster-c1").cachedSlice(s)
			if !ok {
				t.Fatalf("listed %v: slice %s not kept", listed, s.Name)
			}
			if got := sliceGroup(types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, v); len(got) != 1 || got[0] != key.String() {
				t.Errorf("listed %v: slice %s in groups %q, want %q", listed, s.Name, got, key.String())
			}
			group = append(group, plaincache.Item[cachedSlice]{Key: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}, Value: v})
		}
		local := localSlices(group)
		if got := mcs.RecordEndpointsFromSlices(local); !equality.Semantic.DeepEqual(wantRecord, got) {
			t.Errorf("listed %v: record endpoints from the cached slices %+v, want %+v", listed, got, wantRecord)
		}
		want := []mcs.ExistingSlice{{Namespace: "ns", Name: imported.Name, ResourceVersion: imported.ResourceVersion, Hash: wantHash}}
		if got := importedSlices(group); !equality.Semantic.DeepEqual(want, got) {
			t.Errorf("listed %v: imported slices %+v, want %+v", listed, got, want)
		}
	}

	foreign := imported.DeepCopy()
	foreign.Labels[discoveryv1.LabelManagedBy] = "someone-else"
	unlabelled := own.DeepCopy()
	unlabelled.Labels = nil
	for name, s := range map[string]*discoveryv1.EndpointSlice{"a multi-cluster slice of another controller": foreign, "a slice of no Service": unlabelled} {
		if _, ok := newSlimmer("cluster-c1").cachedSlice(s); ok {
			t.Errorf("%s is kept", name)
		}
	}
}

// TestCachedExportAndImport: the plain values of a ServiceExport and of a
// ServiceImport, watched or listed (through the list transforms), give back what the
// controller reads of them; a ServiceExport being deleted is not kept.
func TestCachedExportAndImport(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "web"}
	meta := fullMeta("ns", "web", map[string]string{"exported": "yes"})
	meta.DeletionTimestamp = nil
	se := &mcsv1beta1.ServiceExport{ObjectMeta: meta,
		Spec:   mcsv1beta1.ServiceExportSpec{ExportedLabels: map[string]string{"x": "y"}, ExportedAnnotations: map[string]string{"a": "b"}},
		Status: mcsv1beta1.ServiceExportStatus{Conditions: []metav1.Condition{{Type: "Valid", Status: "True", Reason: "Valid"}}}}
	slimSE, err := newSlimmer("cluster-c1").serviceExport(se.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	for name, obj := range map[string]any{"watched": se.DeepCopy(), "listed": slimSE} {
		v, ok := newSlimmer("cluster-c1").cachedExport(obj)
		if !ok {
			t.Fatalf("%s ServiceExport not kept", name)
		}
		got := v.export(key)
		if !equality.Semantic.DeepEqual(got.Spec, se.Spec) || !equality.Semantic.DeepEqual(got.Status, se.Status) ||
			got.UID != se.UID || got.Generation != se.Generation || got.ResourceVersion != se.ResourceVersion ||
			!got.CreationTimestamp.Equal(&se.CreationTimestamp) || got.Name != "web" || got.Namespace != "ns" {
			t.Errorf("%s ServiceExport read back as %+v, want the spec, status and identity of %+v", name, got, se)
		}
	}
	deleting := se.DeepCopy()
	deleting.DeletionTimestamp = ptr(metav1.Now())
	if _, ok := newSlimmer("cluster-c1").cachedExport(deleting); ok {
		t.Error("a ServiceExport being deleted is kept")
	}

	si := &mcsv1beta1.ServiceImport{ObjectMeta: meta,
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"241.0.0.1"},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
		Status: mcsv1beta1.ServiceImportStatus{Clusters: []mcsv1beta1.ClusterStatus{{Cluster: "c1"}},
			Conditions: []metav1.Condition{{Type: "Ready", Status: "True", Reason: "Ready", Message: "imported"}}}}
	listedSI, err := stripManagedFields(si.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	for name, obj := range map[string]any{"watched": si.DeepCopy(), "listed": listedSI} {
		v, ok := newSlimmer("cluster-c1").cachedImport(obj)
		if !ok {
			t.Fatalf("%s ServiceImport not kept", name)
		}
		if v.specHash != mcs.ContentHash(si.Spec) {
			t.Errorf("%s ServiceImport spec hash %q, want %q", name, v.specHash, mcs.ContentHash(si.Spec))
		}
		got := v.serviceImport(key)
		if !equality.Semantic.DeepEqual(got.Status, si.Status) || !equality.Semantic.DeepEqual(got.Labels, si.Labels) ||
			!equality.Semantic.DeepEqual(got.Annotations, si.Annotations) || !equality.Semantic.DeepEqual(got.OwnerReferences, si.OwnerReferences) ||
			!equality.Semantic.DeepEqual(got.Finalizers, si.Finalizers) || got.UID != si.UID || got.Generation != si.Generation ||
			got.ResourceVersion != si.ResourceVersion || got.GenerateName != "" {
			t.Errorf("%s ServiceImport read back as %+v, want the status and metadata of %+v", name, got, si)
		}
	}
}
