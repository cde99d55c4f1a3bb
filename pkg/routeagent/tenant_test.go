package routeagent

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/vip"
)

// TestTenantCannotFeedTheVIPTable: a member cluster with the chart's
// identities and admission policies installed; the MCS controller's
// ServiceAccount writes an import of demo/web and its slices. A tenant of
// namespace demo (RBAC on every resource there, nothing elsewhere) is
// refused (Forbidden) when it creates a slice with the multicluster label
// or Causeway's managed-by value, changes the controller's slice, creates
// a ServiceImport or changes the controller's one; a slice of its own
// without those labels it may still write. The route agent's VIP table
// (its own ServiceAccount, the real watch, a fake table) holds exactly the
// controller's service and backend throughout.
func TestTenantCannotFeedTheVIPTable(t *testing.T) {
	kc := kubetest.Start(t, "ratenant")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mcsCfg := kc.DaemonConfig(t, "mcs-controller") // installs the chart's identities and policies
	controller, err := client.New(mcsCfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	tenant := kc.Tenant(t, "demo")

	vip4, be := netip.MustParseAddr("243.0.0.10"), netip.MustParseAddr("10.96.0.5")
	si := mcs.BuildServiceImport(mcs.MergeResult{Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP,
		Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}, "demo", "web", []netip.Addr{vip4})
	si.Status = mcsv1beta1.ServiceImportStatus{}
	if err := controller.Create(ctx, si); err != nil {
		t.Fatalf("the MCS controller writes its import: %v", err)
	}
	rendered := mcs.RenderEndpointSlices(mcs.RenderInput{Import: si, LocalClusterID: "c1", Sources: []mcs.SourceEndpoints{{
		ClusterID: "c1", ReadyEndpoints: 1, Backends: []mcs.Backend{{Address: be, Ports: map[string]int32{"http": 8080}, Ready: true, Serving: true}}}}})
	for i := range rendered {
		if err := controller.Create(ctx, &rendered[i]); err != nil {
			t.Fatalf("the MCS controller writes its slice: %v", err)
		}
	}
	ours := rendered[0].DeepCopy()

	var table fakeVIPTable
	src, err := WatchVIPInputs(ctx, kc.DaemonConfig(t, "route-agent"), func() {})
	if err != nil {
		t.Fatal(err)
	}
	want := map[vip.ServiceKey]vip.Service{{VIP: vip4, Port: 80, Proto: vip.TCP}: {Backends: []vip.Backend{{Addr: be, Port: 8080, Weight: 1}}}}
	tableHolds := func() error {
		st, err := SyncVIPs(ctx, vipConfig, src, table)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(st.Services, want) {
			return fmt.Errorf("VIP table %v, want %v", st.Services, want)
		}
		return nil
	}
	kubetest.Eventually(t, "the route agent programs the controller's import", tableHolds)

	stolen := func(name string, labels map[string]string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name, Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName,
				Name: "web", UID: si.UID, Controller: ptr.To(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.9.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
		return s
	}
	// Each write returns how to undo it, should it get through.
	remove := func(obj client.Object) func() { return func() { _ = kc.Client.Delete(ctx, obj) } }
	// change reads obj as the tenant, edits and updates it; the undo puts
	// back what it read.
	change := func(obj client.Object, edit func()) (func(), error) {
		if err := tenant.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return nil, err
		}
		orig := obj.DeepCopyObject().(client.Object)
		edit()
		return func() {
			orig.SetResourceVersion("")
			_ = kc.Client.Patch(ctx, orig, client.MergeFrom(obj))
		}, tenant.Update(ctx, obj)
	}
	for _, tc := range []struct {
		what  string
		write func() (undo func(), err error)
	}{
		{"a slice with the multicluster label", func() (func(), error) {
			s := stolen("web-c9", map[string]string{mcsv1beta1.LabelServiceName: "web", mcsv1beta1.LabelSourceCluster: "c9"})
			return remove(s), tenant.Create(ctx, s)
		}},
		{"a slice with Causeway's managed-by value", func() (func(), error) {
			s := stolen("web-mine", map[string]string{discoveryv1.LabelManagedBy: mcs.ManagedBy, "kubernetes.io/service-name": "web"})
			return remove(s), tenant.Create(ctx, s)
		}},
		{"a change of the controller's slice", func() (func(), error) {
			s := ours.DeepCopy()
			return change(s, func() { s.Endpoints[0].Addresses = []string{"10.244.9.9"} })
		}},
		{"a ServiceImport", func() (func(), error) {
			other := si.DeepCopy()
			other.ObjectMeta = metav1.ObjectMeta{Namespace: "demo", Name: "steal"}
			other.Spec.IPs = []string{"243.0.0.11"}
			return remove(other), tenant.Create(ctx, other)
		}},
		{"a change of the controller's ServiceImport", func() (func(), error) {
			have := si.DeepCopy()
			return change(have, func() { have.Spec.IPs = []string{"243.0.0.11"} })
		}},
	} {
		// The API server loads admission policies asynchronously: what
		// got through before they took effect is undone (by the
		// administrator) and tried again.
		kubetest.Eventually(t, "tenant refused: "+tc.what, func() error {
			undo, err := tc.write()
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "only Causeway's MCS controller writes") {
				return nil // the admission policy's refusal, not RBAC's
			}
			if err == nil {
				undo()
			}
			return fmt.Errorf("tenant wrote %s: %v", tc.what, err)
		})
	}
	// What the tenant may still do in its namespace: a slice of its own.
	plain := stolen("web-plain", map[string]string{"kubernetes.io/service-name": "web"})
	plain.OwnerReferences = nil
	if err := tenant.Create(ctx, plain); err != nil {
		t.Errorf("tenant refused a slice without Causeway's labels: %v", err)
	}
	if err := tableHolds(); err != nil {
		t.Errorf("after the tenant's attempts: %v", err)
	}
}
