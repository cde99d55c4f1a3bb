package controller_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestController runs two member clusters' controllers against real API
// servers (c1, c2 and the broker) through the whole MCS lifecycle.
func TestController(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	for _, id := range []string{"c1", "c2"} {
		e.namespace(id, "kubecon")
		e.start(id)
	}
	t.Run("lifecycle", func(t *testing.T) { testLifecycle(t, e) })
	t.Run("headless", func(t *testing.T) { testHeadless(t, e) })
	t.Run("conflicts and invalid exports", func(t *testing.T) { testConflicts(t, e) })
	t.Run("namespace created later", func(t *testing.T) { testLateNamespace(t, e) })
	t.Run("VIP race", func(t *testing.T) { testVIPRace(t, e) })
	t.Run("restart keeps VIPs", func(t *testing.T) { testRestart(t, e) })
	t.Run("dead cluster", func(t *testing.T) { testDeadCluster(t, e) })
	t.Run("broker outage", func(t *testing.T) { testBrokerOutage(t, e) })
}

func testLifecycle(t *testing.T, e *env) {
	ctx := context.Background()
	c1, c2 := e.c("c1"), e.c("c2")
	svc1 := kubetest.Service(t, c1, "kubecon", "whereami", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, svc1, 8080, kubetest.Pod{IP: "10.244.1.5", Ready: true}, kubetest.Pod{IP: "10.244.1.6", Ready: false})

	// Step 2: nothing is shared before the export.
	var si mcsv1beta1.ServiceImport
	if err := c2.Get(ctx, types.NamespacedName{Namespace: "kubecon", Name: "whereami"}, &si); err == nil {
		t.Fatal("a ServiceImport exists before any export")
	}

	// Step 3-4: export in c1 → ServiceImport with one VIP in c1 and c2.
	kubetest.Export(t, c1, "kubecon", "whereami")
	var vip netip.Addr
	kubetest.Eventually(t, "ServiceImport with VIP in c1 and c2", func() error {
		v1, err := importVIP(c1, "kubecon", "whereami")
		if err != nil {
			return err
		}
		v2, err := importVIP(c2, "kubecon", "whereami")
		if err != nil {
			return err
		}
		if v1 != v2 || !vipRange().Contains(v1) {
			return fmt.Errorf("VIPs %s (c1) and %s (c2)", v1, v2)
		}
		vip = v1
		return nil
	})
	for _, id := range []string{"c1", "c2"} {
		if err := e.c(id).Get(ctx, types.NamespacedName{Namespace: "kubecon", Name: "whereami"}, &si); err != nil {
			t.Fatal(err)
		}
		if si.Spec.Type != mcsv1beta1.ClusterSetIP || len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 || si.Spec.Ports[0].Name != "http" {
			t.Errorf("%s: ServiceImport spec %+v", id, si.Spec)
		}
	}
	kubetest.Eventually(t, "ServiceImport status.clusters", func() error {
		if err := c2.Get(ctx, types.NamespacedName{Namespace: "kubecon", Name: "whereami"}, &si); err != nil {
			return err
		}
		if len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != "c1" {
			return fmt.Errorf("status.clusters %v", si.Status.Clusters)
		}
		return nil
	})
	// Remote backends: c1's Service ClusterIP, ready while a pod is.
	ip1 := svc1.Spec.ClusterIP
	kubetest.Eventually(t, "c1's backends in both clusters", func() error {
		return errors.Join(wantEndpoints(c1, "kubecon", "whereami", "c1/"+ip1+"/true")(),
			wantEndpoints(c2, "kubecon", "whereami", "c1/"+ip1+"/true")())
	})
	kubetest.Eventually(t, "c1's export conditions", func() error {
		return errors.Join(wantCondition(c1, "kubecon", "whereami", "Valid", "True/Valid")(),
			wantCondition(c1, "kubecon", "whereami", "Ready", "True/Exported")(),
			wantCondition(c1, "kubecon", "whereami", "Conflict", "False/NoConflicts")())
	})
	// The slices are spec-exact: owner, labels, no kubernetes.io/service-name.
	var sl discoveryv1.EndpointSliceList
	if err := c2.List(ctx, &sl, client.InNamespace("kubecon"), client.MatchingLabels{mcsv1beta1.LabelServiceName: "whereami"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range sl.Items {
		if s.Labels[discoveryv1.LabelServiceName] != "" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].Kind != "ServiceImport" ||
			s.Labels[discoveryv1.LabelManagedBy] != mcs.ManagedBy {
			t.Errorf("slice %s: labels %v owners %v", s.Name, s.Labels, s.OwnerReferences)
		}
	}

	// Step 6: the same Service in c2, exported too: same VIP, both sources.
	svc2 := kubetest.Service(t, c2, "kubecon", "whereami", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c2, svc2, 8080, kubetest.Pod{IP: "10.244.2.7", Ready: true})
	kubetest.Export(t, c2, "kubecon", "whereami")
	ip2 := svc2.Spec.ClusterIP
	both := []string{"c1/" + ip1 + "/true", "c2/" + ip2 + "/true"}
	kubetest.Eventually(t, "backends of both clusters everywhere", func() error {
		return errors.Join(wantEndpoints(c1, "kubecon", "whereami", both...)(), wantEndpoints(c2, "kubecon", "whereami", both...)())
	})
	for _, id := range []string{"c1", "c2"} {
		if v, err := importVIP(e.c(id), "kubecon", "whereami"); err != nil || v != vip {
			t.Errorf("%s: VIP %s (%v) after the second export, want %s", id, v, err, vip)
		}
	}

	// Step 9: c2's backends go → not ready everywhere.
	kubetest.LocalSlice(t, c2, svc2, 8080, kubetest.Pod{IP: "10.244.2.7", Ready: false})
	notReady := []string{"c1/" + ip1 + "/true", "c2/" + ip2 + "/false"}
	kubetest.Eventually(t, "c2's backend not ready everywhere", func() error {
		return errors.Join(wantEndpoints(c1, "kubecon", "whereami", notReady...)(), wantEndpoints(c2, "kubecon", "whereami", notReady...)())
	})

	// Unexport in c2: its slices go, the import stays with its VIP.
	kubetest.Unexport(t, c2, "kubecon", "whereami")
	kubetest.Eventually(t, "c2's backends withdrawn", func() error {
		return errors.Join(wantEndpoints(c1, "kubecon", "whereami", "c1/"+ip1+"/true")(), wantEndpoints(c2, "kubecon", "whereami", "c1/"+ip1+"/true")())
	})
	if v, err := importVIP(c2, "kubecon", "whereami"); err != nil || v != vip {
		t.Errorf("VIP %s (%v) after c2 unexported, want %s", v, err, vip)
	}

	// Last export gone: imports, slices and the VIP allocation go.
	kubetest.Unexport(t, c1, "kubecon", "whereami")
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, id+": ServiceImport deleted", gone(e.c(id), &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "kubecon", Name: "whereami"}}))
		kubetest.Eventually(t, id+": slices deleted", wantEndpoints(e.c(id), "kubecon", "whereami"))
	}
	kubetest.Eventually(t, "VIP released", gone(e.broker.Client, &causewayv1alpha1.VIPAllocation{ObjectMeta: metav1.ObjectMeta{Name: mcs.VIPObjectName(vip)}}))
	kubetest.Eventually(t, "records deleted", func() error {
		var recs causewayv1alpha1.ServiceExportRecordList
		if err := e.broker.Client.List(ctx, &recs); err != nil {
			return err
		}
		for _, r := range recs.Items {
			if r.Spec.ServiceName == "whereami" {
				return fmt.Errorf("record %s/%s remains", r.Namespace, r.Name)
			}
		}
		return nil
	})
}

func testHeadless(t *testing.T, e *env) {
	c1, c2 := e.c("c1"), e.c("c2")
	for _, id := range []string{"c1", "c2"} {
		svc := kubetest.Service(t, e.c(id), "kubecon", "db", true, map[string]int32{"sql": 5432})
		n := map[string]string{"c1": "1", "c2": "2"}[id]
		kubetest.LocalSlice(t, e.c(id), svc, 5432, kubetest.Pod{IP: "10.244." + n + ".10", Hostname: "db-0", Ready: true}, kubetest.Pod{IP: "10.244." + n + ".11", Hostname: "db-1", Ready: false})
		kubetest.Export(t, e.c(id), "kubecon", "db")
	}
	want := []string{"c1/10.244.1.10/true/db-0", "c1/10.244.1.11/false/db-1", "c2/10.244.2.10/true/db-0", "c2/10.244.2.11/false/db-1"}
	kubetest.Eventually(t, "pod endpoints of both clusters with hostnames", func() error {
		return errors.Join(wantEndpoints(c1, "kubecon", "db", want...)(), wantEndpoints(c2, "kubecon", "db", want...)())
	})
	var si mcsv1beta1.ServiceImport
	if err := c2.Get(context.Background(), types.NamespacedName{Namespace: "kubecon", Name: "db"}, &si); err != nil {
		t.Fatal(err)
	}
	if si.Spec.Type != mcsv1beta1.Headless || len(si.Spec.IPs) != 0 {
		t.Errorf("headless import: type %s, ips %v", si.Spec.Type, si.Spec.IPs)
	}
	var vips causewayv1alpha1.VIPAllocationList
	if err := e.broker.Client.List(context.Background(), &vips, client.MatchingLabels{mcs.LabelVIPServiceName: "db"}); err != nil || len(vips.Items) != 0 {
		t.Errorf("headless service holds %d VIPs (%v)", len(vips.Items), err)
	}
	// Slice ports carry the target port (pod IPs).
	var sl discoveryv1.EndpointSliceList
	if err := c2.List(context.Background(), &sl, client.InNamespace("kubecon"), client.MatchingLabels{mcsv1beta1.LabelServiceName: "db"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range sl.Items {
		if len(s.Ports) != 1 || *s.Ports[0].Port != 5432 || *s.Ports[0].Name != "sql" {
			t.Errorf("slice %s ports %v", s.Name, s.Ports)
		}
	}
}

func testConflicts(t *testing.T, e *env) {
	c1, c2 := e.c("c1"), e.c("c2")
	// Same port name, different numbers: c1 exports first and wins.
	s1 := kubetest.Service(t, c1, "kubecon", "api", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, s1, 8080, kubetest.Pod{IP: "10.244.1.20", Ready: true})
	kubetest.Export(t, c1, "kubecon", "api")
	kubetest.Eventually(t, "c1's export of api", wantCondition(c1, "kubecon", "api", "Ready", "True/Exported"))
	time.Sleep(1100 * time.Millisecond) // creationTimestamps have second resolution: make c1 strictly older
	s2 := kubetest.Service(t, c2, "kubecon", "api", false, map[string]int32{"http": 8080})
	kubetest.LocalSlice(t, c2, s2, 8080, kubetest.Pod{IP: "10.244.2.20", Ready: true})
	kubetest.Export(t, c2, "kubecon", "api")
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, id+": PortConflict", wantCondition(e.c(id), "kubecon", "api", "Conflict", "True/PortConflict"))
	}
	var si mcsv1beta1.ServiceImport
	if err := c2.Get(context.Background(), types.NamespacedName{Namespace: "kubecon", Name: "api"}, &si); err != nil {
		t.Fatal(err)
	}
	if len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 {
		t.Errorf("import ports %v, want the oldest export's port 80", si.Spec.Ports)
	}
	// c2's http lost: no traffic of the VIP's port 80 reaches c2, so its
	// backend is in no cluster's slices.
	ip1 := s1.Spec.ClusterIP
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, id+": only c1 serves api", func() error {
			got, err := endpoints(e.c(id), "kubecon", "api")
			if err != nil {
				return err
			}
			if len(got) != 1 || !strings.HasPrefix(got[0], "c1/"+ip1+"/") {
				return fmt.Errorf("endpoints %v, want only c1's %s", got, ip1)
			}
			return nil
		})
	}
	kubetest.Eventually(t, "a Warning event on c2's export", kubetest.WantEvent(c2, "kubecon", "ServiceExport", "api", "PortConflict", ""))
	// c2 fixes its Service: the conflict clears on both sides.
	var fix corev1.Service
	if err := c2.Get(context.Background(), client.ObjectKeyFromObject(s2), &fix); err != nil {
		t.Fatal(err)
	}
	fix.Spec.Ports[0].Port = 80
	if err := c2.Update(context.Background(), &fix); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, id+": conflict resolved", wantCondition(e.c(id), "kubecon", "api", "Conflict", "False/NoConflicts"))
		kubetest.Eventually(t, id+": c2 serves api again", func() error {
			got, err := endpoints(e.c(id), "kubecon", "api")
			if err != nil {
				return err
			}
			if len(got) != 2 || !strings.HasPrefix(got[1], "c2/"+fix.Spec.ClusterIP+"/") {
				return fmt.Errorf("endpoints %v, want c1's and c2's", got)
			}
			return nil
		})
	}

	// ExternalName: refused, nothing in the broker.
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kubecon", Name: "ext"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.org"}}
	if err := c1.Create(context.Background(), ext); err != nil {
		t.Fatal(err)
	}
	kubetest.Export(t, c1, "kubecon", "ext")
	kubetest.Eventually(t, "ExternalName refused", wantCondition(c1, "kubecon", "ext", "Valid", "False/InvalidServiceType"))
	// No Service at all.
	kubetest.Export(t, c1, "kubecon", "nosvc")
	kubetest.Eventually(t, "missing Service", wantCondition(c1, "kubecon", "nosvc", "Valid", "False/NoService"))
	var recs causewayv1alpha1.ServiceExportRecordList
	if err := e.broker.Client.List(context.Background(), &recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs.Items {
		if r.Spec.ServiceName == "ext" || r.Spec.ServiceName == "nosvc" {
			t.Errorf("invalid export %s published to the broker", r.Name)
		}
	}
	// The Service appears: the export becomes valid and is imported.
	s := kubetest.Service(t, c1, "kubecon", "nosvc", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, s, 80, kubetest.Pod{IP: "10.244.1.30", Ready: true})
	kubetest.Eventually(t, "export valid once the Service exists", wantCondition(c1, "kubecon", "nosvc", "Valid", "True/Valid"))
	kubetest.Eventually(t, "imported in c2", func() error { _, err := importVIP(c2, "kubecon", "nosvc"); return err })
}

func testLateNamespace(t *testing.T, e *env) {
	e.namespace("c1", "late")
	svc := kubetest.Service(t, e.c("c1"), "late", "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, e.c("c1"), svc, 80, kubetest.Pod{IP: "10.244.1.40", Ready: true})
	kubetest.Export(t, e.c("c1"), "late", "web")
	kubetest.Eventually(t, "imported in c1", func() error { _, err := importVIP(e.c("c1"), "late", "web"); return err })
	var si mcsv1beta1.ServiceImport
	if err := e.c("c2").Get(context.Background(), types.NamespacedName{Namespace: "late", Name: "web"}, &si); err == nil {
		t.Fatal("ServiceImport in c2, which has no namespace late")
	}
	e.namespace("c2", "late")
	kubetest.Eventually(t, "imported in c2 once the namespace exists", func() error { _, err := importVIP(e.c("c2"), "late", "web"); return err })
}

func testVIPRace(t *testing.T, e *env) {
	const n = 20
	e.namespace("c1", "race")
	e.namespace("c2", "race")
	var wg sync.WaitGroup
	for _, id := range []string{"c1", "c2"} {
		for i := range n {
			svc := kubetest.Service(t, e.c(id), "race", fmt.Sprintf("s%d", i), false, map[string]int32{"http": 80})
			kubetest.LocalSlice(t, e.c(id), svc, 80, kubetest.Pod{IP: "10.244.9.1", Ready: true})
		}
	}
	// Both clusters export all services at the same moment.
	for _, id := range []string{"c1", "c2"} {
		wg.Go(func() {
			for i := range n {
				kubetest.Export(t, e.c(id), "race", fmt.Sprintf("s%d", i))
			}
		})
	}
	wg.Wait()
	seen := map[netip.Addr]string{}
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		var vip netip.Addr
		kubetest.Eventually(t, name+" imported with one VIP everywhere", func() error {
			v1, err := importVIP(e.c("c1"), "race", name)
			if err != nil {
				return err
			}
			v2, err := importVIP(e.c("c2"), "race", name)
			if err != nil {
				return err
			}
			if v1 != v2 {
				return fmt.Errorf("c1 has %s, c2 has %s", v1, v2)
			}
			vip = v1
			return nil
		})
		if other, ok := seen[vip]; ok {
			t.Errorf("%s and %s share VIP %s", name, other, vip)
		}
		seen[vip] = name
	}
	kubetest.Eventually(t, "one allocation per service", func() error {
		var list causewayv1alpha1.VIPAllocationList
		if err := e.broker.Client.List(context.Background(), &list, client.MatchingLabels{mcs.LabelVIPServiceNamespace: "race"}); err != nil {
			return err
		}
		if len(list.Items) != n {
			return fmt.Errorf("%d allocations for %d services", len(list.Items), n)
		}
		return nil
	})
}

// imports returns every ServiceImport's VIP in a cluster.
func imports(t *testing.T, c client.Client) map[string][]string {
	var list mcsv1beta1.ServiceImportList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, si := range list.Items {
		out[si.Namespace+"/"+si.Name] = si.Spec.IPs
	}
	return out
}

func testRestart(t *testing.T, e *env) {
	before := imports(t, e.c("c1"))
	var allocs causewayv1alpha1.VIPAllocationList
	if err := e.broker.Client.List(context.Background(), &allocs); err != nil {
		t.Fatal(err)
	}
	e.stop("c1")
	e.stop("c2")
	e.start("c1")
	e.start("c2")
	// A change after the restart proves the controllers work again.
	svc := kubetest.Service(t, e.c("c1"), "kubecon", "after", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, e.c("c1"), svc, 80, kubetest.Pod{IP: "10.244.1.50", Ready: true})
	kubetest.Export(t, e.c("c1"), "kubecon", "after")
	kubetest.Eventually(t, "new export after restart", func() error { _, err := importVIP(e.c("c2"), "kubecon", "after"); return err })
	after := imports(t, e.c("c1"))
	for k, v := range before {
		if strings.Join(after[k], ",") != strings.Join(v, ",") {
			t.Errorf("%s: VIPs %v before the restart, %v after", k, v, after[k])
		}
	}
	var now causewayv1alpha1.VIPAllocationList
	if err := e.broker.Client.List(context.Background(), &now); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, a := range now.Items {
		uids[a.Name] = string(a.UID)
	}
	for _, a := range allocs.Items {
		if uids[a.Name] != string(a.UID) {
			t.Errorf("allocation %s re-created or lost across the restart", a.Name)
		}
	}
}

func testDeadCluster(t *testing.T, e *env) {
	c1 := e.c("c1")
	for _, id := range []string{"c1", "c2"} {
		svc := kubetest.Service(t, e.c(id), "kubecon", "alive", false, map[string]int32{"http": 80})
		kubetest.LocalSlice(t, e.c(id), svc, 80, kubetest.Pod{IP: "10.244.7.1", Ready: true})
		kubetest.Export(t, e.c(id), "kubecon", "alive")
	}
	kubetest.Eventually(t, "both sources in c1", func() error {
		got, err := endpoints(c1, "kubecon", "alive")
		if err != nil || len(got) != 2 {
			return fmt.Errorf("endpoints %v (%v)", got, err)
		}
		return nil
	})
	e.stop("c2") // c2 stops renewing its liveness Lease
	kubetest.Eventually(t, "c2's endpoints withdrawn from c1", func() error {
		got, err := endpoints(c1, "kubecon", "alive")
		if err != nil {
			return err
		}
		for _, g := range got {
			if strings.HasPrefix(g, "c2/") {
				return fmt.Errorf("endpoints %v", got)
			}
		}
		if len(got) != 1 {
			return fmt.Errorf("endpoints %v, want c1's only", got)
		}
		return nil
	})
	// The import itself stays (the export is still there), with its VIP.
	if _, err := importVIP(c1, "kubecon", "alive"); err != nil {
		t.Errorf("import removed with the dead cluster's endpoints: %v", err)
	}
	e.start("c2")
	kubetest.Eventually(t, "c2's endpoints back", func() error {
		got, err := endpoints(c1, "kubecon", "alive")
		if err != nil || len(got) != 2 {
			return fmt.Errorf("endpoints %v (%v)", got, err)
		}
		return nil
	})
}

func testBrokerOutage(t *testing.T, e *env) {
	before1, before2 := imports(t, e.c("c1")), imports(t, e.c("c2"))
	eps1, err := endpoints(e.c("c1"), "kubecon", "alive")
	if err != nil {
		t.Fatal(err)
	}
	e.broker.Stop()
	// Several liveness periods and dead-cluster timeouts pass.
	time.Sleep(3 * (e.cfg.LivenessDuration + e.cfg.DeadClusterTimeout))
	// A local change meanwhile still updates the local export's backends.
	after1, after2 := imports(t, e.c("c1")), imports(t, e.c("c2"))
	if fmt.Sprint(before1) != fmt.Sprint(after1) || fmt.Sprint(before2) != fmt.Sprint(after2) {
		t.Errorf("ServiceImports changed while the broker was down:\n%v\n%v", before1, after1)
	}
	eps, err := endpoints(e.c("c1"), "kubecon", "alive")
	if err != nil || fmt.Sprint(eps) != fmt.Sprint(eps1) {
		t.Errorf("endpoints changed while the broker was down: %v → %v (%v)", eps1, eps, err)
	}
}

// TestVIPExhausted: a two-address VIP range and three Services: the third
// import says why it has no VIP, and gets one once a Service leaves.
func TestVIPExhausted(t *testing.T) {
	e := newEnv(t, "c1")
	e.cfg.Policy = addrpolicy.DefaultPolicy()
	e.cfg.Policy.VIPRange = netip.MustParsePrefix("243.1.0.0/30")
	e.namespace("c1", "tiny")
	e.start("c1")
	c1 := e.c("c1")
	for _, n := range []string{"a", "b"} {
		svc := kubetest.Service(t, c1, "tiny", n, false, map[string]int32{"http": 80})
		kubetest.LocalSlice(t, c1, svc, 80, kubetest.Pod{IP: "10.244.1.1", Ready: true})
		kubetest.Export(t, c1, "tiny", n)
		kubetest.Eventually(t, n+" imported", func() error { _, err := importVIP(c1, "tiny", n); return err })
	}
	svc := kubetest.Service(t, c1, "tiny", "c", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, svc, 80, kubetest.Pod{IP: "10.244.1.1", Ready: true})
	kubetest.Export(t, c1, "tiny", "c")
	kubetest.Eventually(t, "third import not ready for lack of a VIP", func() error {
		var si mcsv1beta1.ServiceImport
		if err := c1.Get(context.Background(), types.NamespacedName{Namespace: "tiny", Name: "c"}, &si); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(si.Status.Conditions, "Ready")
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "VIPRangeExhausted" || len(si.Spec.IPs) != 0 {
			return fmt.Errorf("ServiceImport ips %v, Ready %+v", si.Spec.IPs, cond)
		}
		return nil
	})
	var list causewayv1alpha1.VIPAllocationList
	if err := e.broker.Client.List(context.Background(), &list); err != nil || len(list.Items) != 2 {
		t.Fatalf("%d allocations (%v), want 2: nothing half-allocated", len(list.Items), err)
	}
	kubetest.Unexport(t, c1, "tiny", "a")
	kubetest.Eventually(t, "c gets the freed VIP", func() error { _, err := importVIP(c1, "tiny", "c"); return err })
}
