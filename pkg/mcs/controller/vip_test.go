package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// allocateByHand creates, with a member's broker identity, the
// VIPAllocation of addr for svc in that member's name, as a member can
// without running the allocator.
func allocateByHand(t *testing.T, member client.Client, id string, addr netip.Addr, svc types.NamespacedName) {
	t.Helper()
	a := &causewayv1alpha1.VIPAllocation{
		ObjectMeta: metav1.ObjectMeta{Name: mcs.VIPObjectName(addr), Labels: map[string]string{
			mcs.LabelVIPServiceNamespace: svc.Namespace, mcs.LabelVIPServiceName: svc.Name, causewayv1alpha1.LabelClusterID: id}},
		Spec: causewayv1alpha1.VIPAllocationSpec{ServiceNamespace: svc.Namespace, ServiceName: svc.Name},
	}
	if err := member.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

func deleteAllocation(t *testing.T, member client.Client, addr netip.Addr) {
	t.Helper()
	err := member.Delete(context.Background(), &causewayv1alpha1.VIPAllocation{ObjectMeta: metav1.ObjectMeta{Name: mcs.VIPObjectName(addr)}})
	if err != nil {
		t.Fatal(err)
	}
}

// sameVIP waits until ns/name is imported in every cluster of ids with
// one VIP, the same everywhere, and Ready, and returns it.
func sameVIP(t *testing.T, e *env, ns, name string, ids ...string) netip.Addr {
	t.Helper()
	var vip netip.Addr
	kubetest.Eventually(t, fmt.Sprintf("%s/%s imported with one VIP in %v", ns, name, ids), func() error {
		var first netip.Addr
		for _, id := range ids {
			v, err := importVIP(e.c(id), ns, name)
			if err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
			if first.IsValid() && v != first {
				return fmt.Errorf("%s has VIP %s, %s has %s", ids[0], first, id, v)
			}
			first = v
			if err := wantImportCondition(e.c(id), ns, name, string(mcsv1beta1.ServiceImportConditionReady), metav1.ConditionTrue, "Ready", "")(); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
		}
		vip = first
		return nil
	})
	return vip
}

// sourceClusters returns the clusters listed in ns/name's ServiceImport
// status in c.
func sourceClusters(c client.Client, ns, name string) ([]string, error) {
	var si mcsv1beta1.ServiceImport
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &si); err != nil {
		return nil, err
	}
	var out []string
	for _, sc := range si.Status.Clusters {
		out = append(out, sc.Cluster)
	}
	slices.Sort(out)
	return out, nil
}

func wantSources(c client.Client, ns, name string, want ...string) func() error {
	return func() error {
		got, err := sourceClusters(c, ns, name)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s/%s source clusters %v, want %v", ns, name, got, want)
		}
		return nil
	}
}

// TestVIPSquat: c3, a member acting with its own broker identity only (no
// controller), creates a VIPAllocation at the first candidate of
// demo/web, a Service it does not export, before anyone exports it. c1
// exports web: c1 and c2 (which only imports it) agree on another VIP,
// and c3's squat is never adopted. c3 deleting its squat and taking the
// address for another Service, then exporting web itself and taking the
// address for web again, moves nothing; an honest export from c2
// converges meanwhile.
func TestVIPSquat(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	ctx := context.Background()
	e.remoteMember("c3")
	c3 := e.member("c3")
	web := types.NamespacedName{Namespace: "demo", Name: "web"}
	first := firstCandidate(vipRange(), web)
	allocateByHand(t, c3, "c3", first, web)

	for _, id := range []string{"c1", "c2"} {
		e.namespace(id, "demo")
		e.start(id)
	}
	c1, c2 := e.c("c1"), e.c("c2")
	svc := kubetest.Service(t, c1, "demo", "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, svc, 8080, kubetest.Pod{IP: "10.244.1.5", Ready: true})
	kubetest.Export(t, c1, "demo", "web")
	vip := sameVIP(t, e, "demo", "web", "c1", "c2")
	if vip == first {
		t.Fatalf("the import took c3's squat %s", first)
	}

	// c3 deletes its squat and takes the address for another Service.
	deleteAllocation(t, c3, first)
	allocateByHand(t, c3, "c3", first, types.NamespacedName{Namespace: "demo", Name: "other"})
	// An honest export of web from c2 meanwhile: both see it, same VIP.
	svc2 := kubetest.Service(t, c2, "demo", "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c2, svc2, 8080, kubetest.Pod{IP: "10.244.2.5", Ready: true})
	kubetest.Export(t, c2, "demo", "web")
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, id+" imports both exports", wantSources(e.c(id), "demo", "web", "c1", "c2"))
	}
	if got := sameVIP(t, e, "demo", "web", "c1", "c2"); got != vip {
		t.Errorf("VIP moved from %s to %s after c3 re-took its squat for another Service", vip, got)
	}

	// c3 exports web itself (a second later than c1's allocation: the
	// broker counts seconds) and takes the first candidate for web again:
	// its allocation counts from its record, after c1's.
	time.Sleep(1100 * time.Millisecond)
	rec := mcs.ExportRecord{ClusterID: "c3", ServiceNamespace: "demo", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
		ExportCreationTimestamp: metav1.Now(), ClusterIPs: []string{"10.97.0.30"}, ReadyEndpoints: 1, ServingEndpoints: 1,
		Ports: []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	e.tunnel("c1", "c3", true, "10.97.0.0/16")
	e.tunnel("c2", "c3", true, "10.97.0.0/16")
	deleteAllocation(t, c3, first)
	allocateByHand(t, c3, "c3", first, web)
	if err := writeRecord(t, c3, "c3", rec); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, id+" imports c3's export too", wantSources(e.c(id), "demo", "web", "c1", "c2", "c3"))
	}
	if got := sameVIP(t, e, "demo", "web", "c1", "c2"); got != vip {
		t.Errorf("VIP moved from %s to %s after c3 exported web with an allocation at its first candidate", vip, got)
	}
	var held causewayv1alpha1.VIPAllocation
	if err := e.broker.Client.Get(ctx, types.NamespacedName{Name: mcs.VIPObjectName(vip)}, &held); err != nil ||
		held.Labels[causewayv1alpha1.LabelClusterID] != "c1" {
		t.Errorf("allocation of %s: %v, owner %q; want c1's", vip, err, held.Labels[causewayv1alpha1.LabelClusterID])
	}
}

// TestVIPHandOff: c1 and c2 export demo/web, c1 allocated its VIP; c1
// unexports (its allocation no longer counts once its record is gone): it
// releases the allocation before withdrawing the record, c2 claims the
// same address, and neither cluster's import changes its VIP. A cluster
// that only imports a Service never claims a VIP for it.
func TestVIPHandOff(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	ctx := context.Background()
	for _, id := range []string{"c1", "c2"} {
		e.namespace(id, "demo")
	}
	e.start("c1")
	c1, c2 := e.c("c1"), e.c("c2")
	svc := kubetest.Service(t, c1, "demo", "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, svc, 8080, kubetest.Pod{IP: "10.244.1.5", Ready: true})
	kubetest.Export(t, c1, "demo", "web")
	vip := sameVIP(t, e, "demo", "web", "c1")
	e.start("c2")
	if got := sameVIP(t, e, "demo", "web", "c1", "c2"); got != vip {
		t.Fatalf("c2 imports with VIP %s, c1 with %s", got, vip)
	}
	owner := func() (string, error) {
		var a causewayv1alpha1.VIPAllocation
		if err := e.broker.Client.Get(ctx, types.NamespacedName{Name: mcs.VIPObjectName(vip)}, &a); err != nil {
			return "", err
		}
		return a.Labels[causewayv1alpha1.LabelClusterID], nil
	}
	var list causewayv1alpha1.VIPAllocationList
	if err := e.broker.Client.List(ctx, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("%d allocations (%v), want c1's only: c2 only imports", len(list.Items), err)
	}
	if o, err := owner(); err != nil || o != "c1" {
		t.Fatalf("owner of %s: %q (%v), want c1", vip, o, err)
	}

	svc2 := kubetest.Service(t, c2, "demo", "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c2, svc2, 8080, kubetest.Pod{IP: "10.244.2.5", Ready: true})
	kubetest.Export(t, c2, "demo", "web")
	kubetest.Eventually(t, "both exports imported", wantSources(c1, "demo", "web", "c1", "c2"))
	kubetest.Unexport(t, c1, "demo", "web")
	kubetest.Eventually(t, "c2 holds the same address", func() error {
		o, err := owner()
		if err != nil {
			return err
		}
		if o != "c2" {
			return fmt.Errorf("owner of %s is %q, want c2", vip, o)
		}
		return nil
	})
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, id+" imports c2 alone", wantSources(e.c(id), "demo", "web", "c2"))
	}
	if got := sameVIP(t, e, "demo", "web", "c1", "c2"); got != vip {
		t.Errorf("VIP moved from %s to %s when its owner stopped exporting", vip, got)
	}
	if err := e.broker.Client.List(ctx, &list); err != nil || len(list.Items) != 1 {
		t.Errorf("%d allocations (%v), want one", len(list.Items), err)
	}
	kubetest.Unexport(t, c2, "demo", "web")
	kubetest.Eventually(t, "VIP released", func() error {
		err := e.broker.Client.Get(ctx, types.NamespacedName{Name: mcs.VIPObjectName(vip)}, &causewayv1alpha1.VIPAllocation{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("allocation of %s still there (%v)", vip, err)
	})
}

func firstCandidate(r mcs.VIPRange, svc types.NamespacedName) netip.Addr {
	for a := range r.Candidates(svc.Namespace, svc.Name) {
		return a
	}
	return netip.Addr{}
}

// TestImportWaitsForTheVIP: c2 (its broker identity only) writes its
// record of demo/web, and its VIP allocation a second later, as its
// controller does in that order. c1, which only imports web, creates the
// ServiceImport once, with the VIP: no import without an address first,
// updated when the allocation comes (VIPPendingGrace).
func TestImportWaitsForTheVIP(t *testing.T) {
	e := newEnv(t, "c1")
	e.remoteMember("c2")
	e.tunnel("c1", "c2", true, "10.96.0.0/16")
	e.namespace("c1", "demo")
	e.start("c1")
	c2 := e.member("c2")
	web := types.NamespacedName{Namespace: "demo", Name: "web"}
	rec := mcs.ExportRecord{ClusterID: "c2", ServiceNamespace: "demo", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
		ExportCreationTimestamp: metav1.Now(), ClusterIPs: []string{"10.96.0.30"}, ReadyEndpoints: 1, ServingEndpoints: 1,
		Ports: []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	if err := writeRecord(t, c2, "c2", rec); err != nil {
		t.Fatal(err)
	}
	// c1 syncs web (the only Service it knows) without an allocation.
	kubetest.Eventually(t, "c1 synced web", func() error {
		var n uint64
		for _, m := range e.series("c1", "causeway_mcs_sync_duration_seconds", nil) {
			n += m.GetHistogram().GetSampleCount()
		}
		if n == 0 {
			return fmt.Errorf("no sync yet")
		}
		return nil
	})
	vip := firstCandidate(vipRange(), web)
	allocateByHand(t, c2, "c2", vip, web)
	kubetest.Eventually(t, "c1 imports web with c2's VIP", func() error {
		got, err := importVIP(e.c("c1"), "demo", "web")
		if err != nil {
			return err
		}
		if got != vip {
			return fmt.Errorf("VIP %s, want %s", got, vip)
		}
		return nil
	})
	// The write counter moves once the API server has answered, which
	// may be after the import is visible.
	writes := func(op string) float64 {
		var n float64
		for _, m := range e.series("c1", "causeway_mcs_api_writes_total", map[string]string{"kind": "ServiceImport", "op": op}) {
			n += m.GetCounter().GetValue()
		}
		return n
	}
	kubetest.Eventually(t, "c1 counted the import's creation", func() error {
		if n := writes("create"); n != 1 {
			return fmt.Errorf("c1's ServiceImport creations: %v, want 1", n)
		}
		return nil
	})
	// Its spec was never updated: generation 1 (the status has a
	// subresource of its own).
	var si mcsv1beta1.ServiceImport
	if err := e.c("c1").Get(context.Background(), web, &si); err != nil {
		t.Fatal(err)
	}
	if si.Generation != 1 || writes("update") != 0 {
		t.Errorf("c1's ServiceImport: generation %d, %v updates; want created once with its VIP, never updated", si.Generation, writes("update"))
	}
}
