package mcs_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestBrokerObjects runs the pure layer against a real kube-apiserver:
// records, VIP allocations, ServiceImports and EndpointSlices are accepted
// as rendered, read back unchanged, and RBAC confines each cluster to its
// broker namespace.
func TestBrokerObjects(t *testing.T) {
	api := kubetest.Start(t, "broker")
	ctx := context.Background()
	if err := api.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kubecon"}}); err != nil {
		t.Fatal(err)
	}
	c1 := memberClient(ctx, t, api, "c1")
	c2 := memberClient(ctx, t, api, "c2")

	t.Run("records", func(t *testing.T) { testRecords(ctx, t, c1, c2) })
	t.Run("vips", func(t *testing.T) { testVIPs(ctx, t, api.Client, c1, c2) })
	t.Run("import and slices", func(t *testing.T) { testImportAndSlices(ctx, t, api.Client) })
}

// memberClient is cluster id's broker identity (pkg/broker): it writes
// only its own namespace, reads everybody's, allocates VIPs.
func memberClient(ctx context.Context, t *testing.T, api *kubetest.Cluster, id string) client.Client {
	kc, err := broker.EnsureClusterIdentity(ctx, api.Config, id)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var created = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func testService(name string, headless bool, port int32) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubecon", Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port}},
		},
	}
	if headless {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	}
	return svc
}

func publish(ctx context.Context, c client.Client, cluster string, age time.Duration, svc *corev1.Service) (*causewayv1alpha1.ServiceExportRecord, error) {
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{
		Namespace: svc.Namespace, Name: svc.Name, CreationTimestamp: metav1.NewTime(created.Add(age)),
	}}
	spec, err := mcs.NewExportRecord(cluster, export, svc)
	if err != nil {
		return nil, err
	}
	obj := &causewayv1alpha1.ServiceExportRecord{
		ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-" + cluster, Name: mcs.RecordName(svc.Namespace, svc.Name)},
		Spec:       spec,
	}
	return obj, c.Create(ctx, obj)
}

func testRecords(ctx context.Context, t *testing.T, c1, c2 client.Client) {
	mine, err := publish(ctx, c1, "c1", 0, testService("whereami", false, 80))
	if err != nil {
		t.Fatalf("c1 publishes its record: %v", err)
	}
	if _, err := publish(ctx, c2, "c2", time.Minute, testService("whereami", true, 8080)); err != nil {
		t.Fatalf("c2 publishes its record: %v", err)
	}
	// c1 may not write into c2's namespace.
	forged := mine.DeepCopy()
	forged.ResourceVersion, forged.Namespace, forged.Name = "", "cluster-c2", "kubecon.forged"
	if err := c1.Create(ctx, forged); !apierrors.IsForbidden(err) {
		t.Errorf("c1 writes into cluster-c2: err=%v, want Forbidden", err)
	}

	var got causewayv1alpha1.ServiceExportRecord
	if err := c2.Get(ctx, client.ObjectKeyFromObject(mine), &got); err != nil {
		t.Fatalf("c2 reads c1's record: %v", err)
	}
	if !reflect.DeepEqual(got.Spec, mine.Spec) {
		t.Errorf("record read back as\n%+v\nwant\n%+v", got.Spec, mine.Spec)
	}

	// Every cluster merges the same records into the same import.
	var list causewayv1alpha1.ServiceExportRecordList
	if err := c2.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	var recs []mcs.ExportRecord
	for _, r := range list.Items {
		recs = append(recs, r.Spec)
	}
	m := mcs.Merge(recs)
	if m.Spec.Type != mcsv1beta1.ClusterSetIP || m.Oldest != "c1" {
		t.Errorf("merged type %s from %s, want ClusterSetIP from c1", m.Spec.Type, m.Oldest)
	}
	if c, _ := m.Conflict("c2"); c.Reason != "PortConflict,TypeConflict" {
		t.Errorf("c2's Conflict reason %q", c.Reason)
	}

	// The CRD refuses what the type says is invalid.
	bad := mine.DeepCopy()
	bad.ResourceVersion, bad.Name = "", "kubecon.noports"
	bad.Spec.Ports = nil
	if err := c1.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Errorf("ClusterSetIP record without ports: err=%v, want Invalid", err)
	}
	bad.Spec.Ports = mine.Spec.Ports
	bad.Spec.ClusterID = "Not_A_Label"
	if err := c1.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Errorf("record with a bad cluster ID: err=%v, want Invalid", err)
	}
}

func testVIPs(ctx context.Context, t *testing.T, admin, c1, c2 client.Client) {
	r := mcs.MustParseVIPRange("243.0.0.0/24")
	allocators := []*mcs.VIPAllocator{
		mcs.NewVIPAllocator(r, mcs.NewBrokerVIPStore(c1, "c1"), "c1"),
		mcs.NewVIPAllocator(r, mcs.NewBrokerVIPStore(c2, "c2"), "c2"),
	}
	// Both clusters export every Service.
	both := func(c string) (time.Time, bool) { return time.Time{}, c == "c1" || c == "c2" }
	const services = 20
	got := make([][]netip.Addr, len(allocators))
	errs := make([]error, len(allocators))
	var wg sync.WaitGroup
	for i, a := range allocators {
		got[i] = make([]netip.Addr, services)
		wg.Go(func() {
			for j := range services {
				s := j
				if i == 1 {
					s = services - 1 - j // the other cluster goes backwards
				}
				vip, err := a.Allocate(ctx, types.NamespacedName{Namespace: "kubecon", Name: fmt.Sprintf("svc-%d", s)}, both, netip.Addr{})
				if err != nil {
					errs[i] = err
					return
				}
				got[i][s] = vip
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0], got[1]) {
		t.Errorf("the clusters disagree:\n%v\n%v", got[0], got[1])
	}
	seen := map[netip.Addr]bool{}
	for _, v := range got[0] {
		if seen[v] || !r.Contains(v) {
			t.Errorf("VIP %s duplicated or out of range", v)
		}
		seen[v] = true
	}
	var list causewayv1alpha1.VIPAllocationList
	if err := admin.List(ctx, &list); err != nil || len(list.Items) != services {
		t.Fatalf("%d VIPAllocations (%v), want %d", len(list.Items), err, services)
	}

	// A restarted allocator finds the same VIP.
	svc0 := types.NamespacedName{Namespace: "kubecon", Name: "svc-0"}
	if v, err := mcs.NewVIPAllocator(r, mcs.NewBrokerVIPStore(c2, "c2"), "c2").Allocate(ctx, svc0, both, netip.Addr{}); err != nil || v != got[0][0] {
		t.Errorf("after restart: %s, %v; want %s", v, err, got[0][0])
	}

	// An allocation cannot be moved to another Service.
	var a causewayv1alpha1.VIPAllocation
	if err := admin.Get(ctx, types.NamespacedName{Name: mcs.VIPObjectName(got[0][0])}, &a); err != nil {
		t.Fatal(err)
	}
	a.Spec.ServiceName = "thief"
	if err := admin.Update(ctx, &a); !apierrors.IsInvalid(err) {
		t.Errorf("re-pointing an allocation: err=%v, want Invalid", err)
	}

	// Release deletes the object; the next allocation gets the same VIP back.
	if err := allocators[0].Release(ctx, svc0); err != nil {
		t.Fatal(err)
	}
	if err := admin.Get(ctx, types.NamespacedName{Name: mcs.VIPObjectName(got[0][0])}, &a); !apierrors.IsNotFound(err) {
		t.Errorf("after release: err=%v, want NotFound", err)
	}
	if v, err := allocators[1].Allocate(ctx, svc0, both, netip.Addr{}); err != nil || v != got[0][0] {
		t.Errorf("re-allocate: %s, %v; want %s", v, err, got[0][0])
	}

	// Exhaustion: a two-address range, a third Service.
	tiny := mcs.MustParseVIPRange("243.1.0.0/30")
	ta := mcs.NewVIPAllocator(tiny, mcs.NewBrokerVIPStore(c1, "c1"), "c1")
	for _, n := range []string{"a", "b"} {
		if _, err := ta.Allocate(ctx, types.NamespacedName{Namespace: "tiny", Name: n}, both, netip.Addr{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ta.Allocate(ctx, types.NamespacedName{Namespace: "tiny", Name: "c"}, both, netip.Addr{}); !errors.Is(err, mcs.ErrVIPRangeExhausted) {
		t.Errorf("third allocation in a /30: err=%v, want exhausted", err)
	}
	var tinyList causewayv1alpha1.VIPAllocationList
	if err := admin.List(ctx, &tinyList, client.MatchingLabels{mcs.LabelVIPServiceNamespace: "tiny"}); err != nil || len(tinyList.Items) != 2 {
		t.Errorf("%d allocations in namespace tiny (%v), want 2: nothing half-allocated", len(tinyList.Items), err)
	}
}

func testImportAndSlices(ctx context.Context, t *testing.T, c client.Client) {
	m := mcs.Merge([]mcs.ExportRecord{{
		ClusterID: "c1", ServiceNamespace: "kubecon", ServiceName: "web",
		ExportCreationTimestamp: metav1.NewTime(created),
		Type:                    mcsv1beta1.ClusterSetIP,
		Ports:                   []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		IPFamilies:              []corev1.IPFamily{corev1.IPv4Protocol},
		ExportedLabels:          map[string]string{"tier": "web"},
	}})
	want := mcs.BuildServiceImport(m, "kubecon", "web", []netip.Addr{netip.MustParseAddr("243.0.0.77")})
	si := want.DeepCopy()
	if err := c.Create(ctx, si); err != nil {
		t.Fatalf("create ServiceImport: %v", err)
	}
	si.Status = want.Status
	if err := c.Status().Update(ctx, si); err != nil {
		t.Fatalf("update ServiceImport status: %v", err)
	}
	// CoreDNS reads ServiceImports through v1alpha1.
	var old mcsv1alpha1.ServiceImport
	if err := c.Get(ctx, client.ObjectKeyFromObject(si), &old); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(old.Spec.IPs, []string{"243.0.0.77"}) || old.Spec.Type != mcsv1alpha1.ClusterSetIP ||
		len(old.Spec.Ports) != 1 || old.Spec.Ports[0].Port != 80 || old.Labels["tier"] != "web" ||
		len(old.Status.Clusters) != 1 || old.Status.Clusters[0].Cluster != "c1" {
		t.Errorf("v1alpha1 view: %+v %+v %v", old.Spec, old.Status, old.Labels)
	}

	var bs []mcs.Backend
	for i := range 130 {
		bs = append(bs, mcs.Backend{Address: netip.MustParseAddr(fmt.Sprintf("10.244.1.%d", i+1)), Ready: i%2 == 0, Serving: true, Hostname: fmt.Sprintf("web-%d", i)})
	}
	rendered := mcs.RenderEndpointSlices(mcs.RenderInput{
		Import:         si,
		LocalClusterID: "c2",
		Sources: []mcs.SourceEndpoints{
			{ClusterID: "c1", Backends: bs},
			{ClusterID: "c2", Backends: []mcs.Backend{{Address: netip.MustParseAddr("fd00::1"), Ready: true, Serving: true, NodeName: "n1", Zone: "z"}}},
		},
	})
	if len(rendered) != 3 {
		t.Fatalf("%d slices, want 2 for c1 (130 endpoints) and 1 for c2", len(rendered))
	}
	for _, s := range rendered {
		s := s.DeepCopy()
		if err := c.Create(ctx, s); err != nil {
			t.Fatalf("create EndpointSlice %s: %v", s.Name, err)
		}
	}
	var have discoveryv1.EndpointSliceList
	if err := c.List(ctx, &have, client.InNamespace("kubecon"), client.MatchingLabels{mcsv1beta1.LabelServiceName: "web"}); err != nil {
		t.Fatal(err)
	}
	if p := mcs.PlanEndpointSlices(rendered, mcs.ExistingSlices(have.Items)); !p.Empty() {
		t.Errorf("slices read back differ from the rendered ones: %d create, %d update, %d delete",
			len(p.Create), len(p.Update), len(p.Delete))
	}
}
