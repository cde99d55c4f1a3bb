package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
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
	"github.com/causeway-net/causeway/pkg/broker"
	globalnetcontroller "github.com/causeway-net/causeway/pkg/globalnet/controller"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// globalIngress returns the GlobalIngress of ns/name, or an error while
// it is not Allocated=True.
func globalIngress(c client.Client, ns, name string) (*causewayv1alpha1.GlobalIngress, error) {
	var gi causewayv1alpha1.GlobalIngress
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &gi); err != nil {
		return nil, err
	}
	if !meta.IsStatusConditionTrue(gi.Status.Conditions, causewayv1alpha1.ConditionAllocated) {
		return &gi, fmt.Errorf("GlobalIngress %s/%s not allocated: %+v", ns, name, gi.Status.Conditions)
	}
	return &gi, nil
}

// slicePorts lists the multi-cluster slices' endpoints with their ports as
// "cluster/address/ready/name:port,…" (ports sorted by name), sorted.
func slicePorts(c client.Client, ns, name string) ([]string, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list.Items {
		var ports []string
		for _, p := range s.Ports {
			ports = append(ports, fmt.Sprintf("%s:%d", *p.Name, *p.Port))
		}
		slices.Sort(ports)
		for _, ep := range s.Endpoints {
			out = append(out, fmt.Sprintf("%s/%s/%v/%s", s.Labels[mcsv1beta1.LabelSourceCluster], ep.Addresses[0], *ep.Conditions.Ready, strings.Join(ports, ",")))
		}
	}
	slices.Sort(out)
	return out, nil
}

func wantSlicePorts(c client.Client, ns, name string, want ...string) func() error {
	return func() error {
		got, err := slicePorts(c, ns, name)
		if err != nil {
			return err
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("endpoints %v, want %v", got, want)
		}
		return nil
	}
}

// importCondition returns the ServiceImport's condition.
func importCondition(c client.Client, ns, name, typ string) (*metav1.Condition, error) {
	var si mcsv1beta1.ServiceImport
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &si); err != nil {
		return nil, err
	}
	cond := meta.FindStatusCondition(si.Status.Conditions, typ)
	if cond == nil {
		return nil, fmt.Errorf("ServiceImport %s/%s has no %s condition", ns, name, typ)
	}
	return cond, nil
}

func wantReachable(c client.Client, ns, name string, status metav1.ConditionStatus, msg string) func() error {
	return func() error {
		cond, err := importCondition(c, ns, name, mcs.ConditionReachable)
		if err != nil {
			return err
		}
		if cond.Status != status || !strings.Contains(cond.Message, msg) {
			return fmt.Errorf("Reachable = %s/%s %q, want %s containing %q", cond.Status, cond.Reason, cond.Message, status, msg)
		}
		return nil
	}
}

func wantImportCondition(c client.Client, ns, name, typ string, status metav1.ConditionStatus, reason, msg string) func() error {
	return func() error {
		cond, err := importCondition(c, ns, name, typ)
		if err != nil {
			return err
		}
		if cond.Status != status || cond.Reason != reason || !strings.Contains(cond.Message, msg) {
			return fmt.Errorf("%s = %s/%s %q, want %s/%s containing %q", typ, cond.Status, cond.Reason, cond.Message, status, reason, msg)
		}
		return nil
	}
}

func pairOf(gi *causewayv1alpha1.GlobalIngress, port string) int32 {
	for _, p := range gi.Spec.Ports {
		if p.Name == port {
			return p.GlobalPort
		}
	}
	return 0
}

// TestGlobalnet runs the globalnet controller beside the MCS controller
// in each cluster: the globalnet controller writes the GlobalIngress of
// each exported Service, the MCS controller copies its pairs and pod IPs
// into the export record. c1 and c2 share the service CIDR 10.96.0.0/16 and the pod
// CIDR; each has a global CIDR on its mirrored Cluster, and each reaches
// the other through an Endpoint whose subnets are the other's global
// CIDR. The same Service exported from both is imported by each cluster
// as itself at its ClusterIP and the other at its global IP:ports.
func TestGlobalnet(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	e.globalnet = &globalnetcontroller.Config{Quarantine: 2 * time.Second}
	globalCIDR := map[string]string{"c1": "242.0.1.0/24", "c2": "242.0.2.0/24"}
	other := map[string]string{"c1": "c2", "c2": "c1"}
	for _, id := range []string{"c1", "c2"} {
		for _, of := range []string{"c1", "c2"} {
			e.mirrorCluster(id, of, globalCIDR[of])
		}
		e.tunnel(id, other[id], true, globalCIDR[other[id]])
		e.namespace(id, "gn")
		e.start(id)
	}
	ctx := context.Background()
	c1, c2 := e.c("c1"), e.c("c2")
	svcs := map[string]*corev1.Service{}
	for _, id := range []string{"c1", "c2"} {
		svcs[id] = kubetest.Service(t, e.c(id), "gn", "web", false, map[string]int32{"http": 80, "metrics": 9090})
		kubetest.LocalSlice(t, e.c(id), svcs[id], 8080, kubetest.Pod{IP: "10.244.1.5", Ready: true})
		kubetest.Export(t, e.c(id), "gn", "web")
	}

	gis := map[string]*causewayv1alpha1.GlobalIngress{}
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(t, "GlobalIngress in "+id, func() error {
			gi, err := globalIngress(e.c(id), "gn", "web")
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(gi.Spec.IP)
			if err != nil || !netip.MustParsePrefix(globalCIDR[id]).Contains(ip) {
				return fmt.Errorf("global IP %q outside %s", gi.Spec.IP, globalCIDR[id])
			}
			if gi.Spec.ClusterIP != svcs[id].Spec.ClusterIP || len(gi.Spec.Ports) != 2 || gi.Spec.Ports[0].GlobalPort == gi.Spec.Ports[1].GlobalPort {
				return fmt.Errorf("GlobalIngress spec %+v (ClusterIP %s)", gi.Spec, svcs[id].Spec.ClusterIP)
			}
			gis[id] = gi
			return nil
		})
	}
	for _, id := range []string{"c1", "c2"} {
		o := other[id]
		kubetest.Eventually(t, "import in "+id, wantSlicePorts(e.c(id), "gn", "web",
			fmt.Sprintf("%s/%s/true/http:80,metrics:9090", id, svcs[id].Spec.ClusterIP),
			fmt.Sprintf("%s/%s/true/http:%d,metrics:%d", o, gis[o].Spec.IP, pairOf(gis[o], "http"), pairOf(gis[o], "metrics"))))
		kubetest.Eventually(t, "Reachable in "+id, wantReachable(e.c(id), "gn", "web", metav1.ConditionTrue, ""))
	}
	// The record in the broker carries the pairs.
	var rec causewayv1alpha1.ServiceExportRecord
	if err := e.broker.Client.Get(ctx, types.NamespacedName{Namespace: broker.Namespace("c1"), Name: mcs.RecordName("gn", "web")}, &rec); err != nil {
		t.Fatal(err)
	}
	for _, p := range rec.Spec.Ports {
		if p.Global == nil || p.Global.IP != gis["c1"].Spec.IP || p.Global.Port != pairOf(gis["c1"], p.Name) {
			t.Errorf("record port %+v, GlobalIngress %+v", p, gis["c1"].Spec)
		}
	}

	t.Run("headless", func(t *testing.T) {
		// c2's headless Service: c1 reaches each ready pod at its global
		// IP (1:1), c2 itself at the pod IPs; the same pod IPs in c1 do not
		// clash.
		dbs := map[string]*corev1.Service{}
		for _, id := range []string{"c1", "c2"} {
			dbs[id] = kubetest.Service(t, e.c(id), "gn", "db", true, map[string]int32{"pg": 5432})
			kubetest.LocalSlice(t, e.c(id), dbs[id], 5432, kubetest.Pod{IP: "10.244.3.1", Hostname: "db-0", Ready: true}, kubetest.Pod{IP: "10.244.3.2", Hostname: "db-1", Ready: true})
			kubetest.Export(t, e.c(id), "gn", "db")
		}
		pods := func(id string) (map[string]string, error) {
			gi, err := globalIngress(e.c(id), "gn", "db")
			if err != nil {
				return nil, err
			}
			out := map[string]string{}
			for _, p := range gi.Spec.Pods {
				out[p.PodIP] = p.GlobalIP
			}
			if len(out) != 2 || gi.Spec.IP != "" || len(gi.Spec.Ports) != 0 {
				return nil, fmt.Errorf("headless GlobalIngress %+v", gi.Spec)
			}
			return out, nil
		}
		var g2 map[string]string
		kubetest.Eventually(t, "c2's pods allocated", func() error {
			var err error
			g2, err = pods("c2")
			return err
		})
		kubetest.Eventually(t, "c1 imports c2's pods at their global IPs", wantEndpoints(c1, "gn", "db",
			"c1/10.244.3.1/true/db-0", "c1/10.244.3.2/true/db-1",
			"c2/"+g2["10.244.3.1"]+"/true/db-0", "c2/"+g2["10.244.3.2"]+"/true/db-1"))
		kubetest.Eventually(t, "c2 imports itself at the pod IPs", func() error {
			g1, err := pods("c1")
			if err != nil {
				return err
			}
			return wantEndpoints(c2, "gn", "db", "c2/10.244.3.1/true/db-0", "c2/10.244.3.2/true/db-1",
				"c1/"+g1["10.244.3.1"]+"/true/db-0", "c1/"+g1["10.244.3.2"]+"/true/db-1")()
		})
		// A pod of c2 stops being ready: its global IP goes, the other's stays.
		kubetest.LocalSlice(t, c2, dbs["c2"], 5432, kubetest.Pod{IP: "10.244.3.1", Hostname: "db-0", Ready: false}, kubetest.Pod{IP: "10.244.3.2", Hostname: "db-1", Ready: true})
		kubetest.Eventually(t, "c2's not-ready pod loses its global IP", func() error {
			gi, err := globalIngress(c2, "gn", "db")
			if err != nil {
				return err
			}
			if len(gi.Spec.Pods) != 1 || gi.Spec.Pods[0].PodIP != "10.244.3.2" || gi.Spec.Pods[0].GlobalIP != g2["10.244.3.2"] {
				return fmt.Errorf("pods %+v, had %v", gi.Spec.Pods, g2)
			}
			return nil
		})
		kubetest.Eventually(t, "c1 without c2's not-ready pod", wantEndpoints(c1, "gn", "db",
			"c1/10.244.3.1/true/db-0", "c1/10.244.3.2/true/db-1", "c2/"+g2["10.244.3.2"]+"/true/db-1"))
		// A tenant of gn in c2 (RBAC on its namespace only) adds a slice of
		// its own to db: a pod address inside c2's pod CIDR gets a global
		// IP, a node address and the API server's ClusterIP get none (the
		// API server itself refuses link-local and loopback addresses).
		tenant := e.clusters["c2"].Tenant(t, "gn")
		extra := kubetest.LocalSliceObject(dbs["c2"], 5432, kubetest.Pod{IP: "10.244.3.9", Ready: true}, kubetest.Pod{IP: "172.18.1.11", Ready: true}, kubetest.Pod{IP: "10.96.0.1", Ready: true})
		extra.Name = "db-tenant"
		if err := tenant.Create(ctx, extra); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "only the tenant's pod address gets a global IP", func() error {
			gi, err := globalIngress(c2, "gn", "db")
			if err != nil {
				return err
			}
			var got []string
			for _, p := range gi.Spec.Pods {
				got = append(got, p.PodIP)
			}
			if !slices.Equal(got, []string{"10.244.3.2", "10.244.3.9"}) {
				return fmt.Errorf("pods with global IPs %v, want [10.244.3.2 10.244.3.9]", got)
			}
			return nil
		})
		for _, id := range []string{"c1", "c2"} {
			kubetest.Unexport(t, e.c(id), "gn", "db")
		}
	})

	t.Run("restart keeps the allocation", func(t *testing.T) {
		e.stop("c1")
		e.start("c1")
		kubetest.Service(t, c1, "gn", "other", false, map[string]int32{"http": 80})
		kubetest.Export(t, c1, "gn", "other")
		var gio *causewayv1alpha1.GlobalIngress
		kubetest.Eventually(t, "GlobalIngress of the new Service", func() error {
			var err error
			gio, err = globalIngress(c1, "gn", "other")
			return err
		})
		if gio.Spec.IP == gis["c1"].Spec.IP && (gio.Spec.Ports[0].GlobalPort == pairOf(gis["c1"], "http") || gio.Spec.Ports[0].GlobalPort == pairOf(gis["c1"], "metrics")) {
			t.Errorf("after restart the new Service got a held pair: %+v vs %+v", gio.Spec, gis["c1"].Spec)
		}
		gi, err := globalIngress(c1, "gn", "web")
		if err != nil || fmt.Sprint(gi.Spec) != fmt.Sprint(gis["c1"].Spec) {
			t.Errorf("after restart %+v, was %+v (%v)", gi.Spec, gis["c1"].Spec, err)
		}
		kubetest.Unexport(t, c1, "gn", "other")
	})

	t.Run("port change keeps unchanged pairs", func(t *testing.T) {
		svc := &corev1.Service{}
		if err := c1.Get(ctx, client.ObjectKeyFromObject(svcs["c1"]), svc); err != nil {
			t.Fatal(err)
		}
		svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9000}}
		if err := c1.Update(ctx, svc); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "new port pair", func() error {
			gi, err := globalIngress(c1, "gn", "web")
			if err != nil {
				return err
			}
			if gi.Spec.IP != gis["c1"].Spec.IP || pairOf(gi, "http") != pairOf(gis["c1"], "http") || pairOf(gi, "grpc") == 0 || pairOf(gi, "metrics") != 0 {
				return fmt.Errorf("after the port change %+v, was %+v", gi.Spec, gis["c1"].Spec)
			}
			gis["c1"] = gi
			return nil
		})
	})

	t.Run("deleted while exported: written again, same addresses", func(t *testing.T) {
		if err := c1.Delete(ctx, gis["c1"].DeepCopy()); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "GlobalIngress written again", func() error {
			gi, err := globalIngress(c1, "gn", "web")
			if err != nil {
				return err
			}
			if gi.UID == gis["c1"].UID {
				return fmt.Errorf("not deleted yet")
			}
			if fmt.Sprint(gi.Spec) != fmt.Sprint(gis["c1"].Spec) {
				return fmt.Errorf("spec %+v, was %+v", gi.Spec, gis["c1"].Spec)
			}
			return nil
		})
	})

	t.Run("unexport releases after the quarantine", func(t *testing.T) {
		kubetest.Unexport(t, c1, "gn", "web")
		var released time.Time
		kubetest.Eventually(t, "releasedAt", func() error {
			var gi causewayv1alpha1.GlobalIngress
			if err := c1.Get(ctx, types.NamespacedName{Namespace: "gn", Name: "web"}, &gi); err != nil {
				return err
			}
			if gi.Spec.ReleasedAt == nil {
				return fmt.Errorf("not released: %+v", gi.Spec)
			}
			released = time.Now()
			return nil
		})
		// c2 no longer lists c1.
		kubetest.Eventually(t, "c2 without c1", wantSlicePorts(c2, "gn", "web",
			fmt.Sprintf("c2/%s/true/http:80,metrics:9090", svcs["c2"].Spec.ClusterIP)))
		kubetest.Eventually(t, "deleted after the quarantine", gone(c1, &causewayv1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{Namespace: "gn", Name: "web"}}))
		if d := time.Since(released); d < time.Second {
			t.Errorf("deleted %v after release, quarantine is 2s", d)
		}
	})

	t.Run("remote without global addresses and no tunnel", func(t *testing.T) {
		// c2 loses its global CIDR: its GlobalIngress goes, its record has
		// no global address; c1 would have to reach 10.96.x, which overlaps.
		e.mirrorCluster("c2", "c2")
		kubetest.Eventually(t, "c2's GlobalIngress released", func() error {
			var gi causewayv1alpha1.GlobalIngress
			if err := c2.Get(ctx, types.NamespacedName{Namespace: "gn", Name: "web"}, &gi); err != nil {
				return nil // already deleted
			}
			if gi.Spec.ReleasedAt == nil {
				return fmt.Errorf("not released")
			}
			return nil
		})
		kubetest.Export(t, c1, "gn", "web")
		// c2's record names its ClusterIP 10.96.x, outside the global CIDR
		// c1 reaches it through: refused, nothing of it imported.
		kubetest.Eventually(t, "c2 refused in c1", wantEndpoints(c1, "gn", "web", "c1/"+svcs["c1"].Spec.ClusterIP+"/true"))
		kubetest.Eventually(t, "RemoteRecordRefused=True", wantImportCondition(c1, "gn", "web", mcs.ConditionRemoteRecordRefused,
			metav1.ConditionTrue, string(addrpolicy.RecordOutsideClaim), "cluster c2: AddressOutsideClaim: clusterIP "+svcs["c2"].Spec.ClusterIP))
		kubetest.Eventually(t, "Warning Event on the import", kubetest.WantEvent(c1, "gn", "ServiceImport", "web", mcs.EventRemoteRecordRefused, "record gn.web of cluster c2 refused"))
		// Without a tunnel nothing is reached and the record's addresses
		// are not placed: accepted, not ready, Reachable=False.
		e.tunnel("c1", "c2", false, globalCIDR["c2"])
		kubetest.Eventually(t, "Reachable=False (no tunnel)", wantReachable(c1, "gn", "web", metav1.ConditionFalse, "no tunnel to cluster c2"))
		kubetest.Eventually(t, "c2 not ready", wantEndpoints(c1, "gn", "web", "c1/"+svcs["c1"].Spec.ClusterIP+"/true", "c2/"+svcs["c2"].Spec.ClusterIP+"/false"))
		kubetest.Eventually(t, "RemoteRecordRefused=False", wantImportCondition(c1, "gn", "web", mcs.ConditionRemoteRecordRefused,
			metav1.ConditionFalse, mcs.ReasonNoneRefused, ""))
		cond, _ := importCondition(c1, "gn", "web", mcs.ConditionReachable)
		if cond.Reason != mcs.ReasonUnreachable {
			t.Errorf("reason %q", cond.Reason)
		}
	})
}
