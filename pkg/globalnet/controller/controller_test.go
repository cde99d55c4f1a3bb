package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
)

// TestGlobalPoolExhausted: a /29 has three ingress IPs. A headless
// Service with four ready pods does not fit: Allocated=False, an Event,
// nothing half allocated; with three it does, and a
// ClusterSetIP Service then waits: the headless one's unexport does not
// free its addresses during the quarantine; deleting its released
// GlobalIngress by hand does.
func TestGlobalPoolExhausted(t *testing.T) {
	e := newEnv(t, "c1")
	e.cfg.Quarantine = time.Hour
	e.mirrorCluster("242.0.9.0/29")
	e.namespace("gn")
	e.start("a")
	ctx := context.Background()
	c1 := e.c()
	db := kubetest.Service(t, c1, "gn", "db", true, map[string]int32{"pg": 5432})
	pods := []kubetest.Pod{{IP: "10.244.1.1", Ready: true}, {IP: "10.244.1.2", Ready: true}, {IP: "10.244.1.3", Ready: true}, {IP: "10.244.1.4", Ready: true}}
	kubetest.LocalSlice(t, c1, db, 5432, pods...)
	kubetest.Export(t, c1, "gn", "db")

	exhausted := func(name string) func() error {
		return func() error {
			var gi causewayv1alpha1.GlobalIngress
			if err := c1.Get(ctx, types.NamespacedName{Namespace: "gn", Name: name}, &gi); err != nil {
				return err
			}
			cond := meta.FindStatusCondition(gi.Status.Conditions, causewayv1alpha1.ConditionAllocated)
			if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != causewayv1alpha1.ReasonGlobalPoolExhausted {
				return fmt.Errorf("Allocated %+v", cond)
			}
			return nil
		}
	}
	kubetest.Eventually(t, "db exhausted", exhausted("db"))
	var gi causewayv1alpha1.GlobalIngress
	if err := c1.Get(ctx, types.NamespacedName{Namespace: "gn", Name: "db"}, &gi); err != nil || len(gi.Spec.Pods) != 0 {
		t.Errorf("half allocated: %+v (%v)", gi.Spec, err)
	}
	kubetest.Eventually(t, "Warning event", kubetest.WantEvent(c1, "gn", "ServiceExport", "db", causewayv1alpha1.ReasonGlobalPoolExhausted, ""))

	// Three pods fit.
	kubetest.LocalSlice(t, c1, db, 5432, pods[:3]...)
	kubetest.Eventually(t, "db allocated", func() error {
		gi, err := globalIngress(c1, "gn", "db")
		if err != nil {
			return err
		}
		if len(gi.Spec.Pods) != 3 {
			return fmt.Errorf("pods %+v", gi.Spec.Pods)
		}
		return nil
	})

	// Nothing left for a ClusterSetIP Service until db is unexported and
	// its quarantine is over.
	web := kubetest.Service(t, c1, "gn", "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, web, 8080, kubetest.Pod{IP: "10.244.1.9", Ready: true})
	kubetest.Export(t, c1, "gn", "web")
	kubetest.Eventually(t, "web exhausted", exhausted("web"))
	kubetest.Unexport(t, c1, "gn", "db")
	kubetest.Eventually(t, "db released", func() error {
		var gi causewayv1alpha1.GlobalIngress
		if err := c1.Get(ctx, types.NamespacedName{Namespace: "gn", Name: "db"}, &gi); err != nil {
			return err
		}
		if gi.Spec.ReleasedAt == nil {
			return fmt.Errorf("not released")
		}
		return nil
	})
	// Quarantine: db's addresses are not handed to web.
	time.Sleep(2 * time.Second)
	if err := exhausted("web")(); err != nil {
		t.Fatalf("during db's quarantine: %v", err)
	}
	// Deleted by hand (or with its namespace): the addresses are free.
	if err := c1.Delete(ctx, &causewayv1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{Namespace: "gn", Name: "db"}}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "web allocated once db's GlobalIngress is gone", func() error {
		_, err := globalIngress(c1, "gn", "web")
		return err
	})
}

// TestGlobalLeaderChange: two leader-elected replicas (Lease
// causeway-globalnet); the standby's
// caches are warm before it leads. After the leader stops, the new leader
// replays the allocation (a live List) before handing anything out: the
// first Service keeps its pairs, a new one gets others.
func TestGlobalLeaderChange(t *testing.T) {
	e := newEnv(t, "c1")
	e.cfg.LeaderElection = true
	e.mirrorCluster("242.0.1.0/24")
	e.namespace("gn")
	e.start("a")
	c1 := e.c()
	web := kubetest.Service(t, c1, "gn", "web", false, map[string]int32{"http": 80, "https": 443})
	kubetest.LocalSlice(t, c1, web, 8080, kubetest.Pod{IP: "10.244.1.5", Ready: true})
	kubetest.Export(t, c1, "gn", "web")
	var first *causewayv1alpha1.GlobalIngress
	kubetest.Eventually(t, "web allocated by replica a", func() error {
		var err error
		first, err = globalIngress(c1, "gn", "web")
		return err
	})
	e.start("b") // standby, caches warm
	time.Sleep(time.Second)
	e.stop("a") // releases the Lease on cancel
	api := kubetest.Service(t, c1, "gn", "api", false, map[string]int32{"http": 80, "https": 443})
	kubetest.LocalSlice(t, c1, api, 8080, kubetest.Pod{IP: "10.244.1.6", Ready: true})
	kubetest.Export(t, c1, "gn", "api")
	var second *causewayv1alpha1.GlobalIngress
	kubetest.Eventually(t, "api allocated by replica b", func() error {
		var err error
		second, err = globalIngress(c1, "gn", "api")
		return err
	})
	taken := map[string]bool{}
	for _, p := range first.Spec.Ports {
		taken[fmt.Sprintf("%s:%d", first.Spec.IP, p.GlobalPort)] = true
	}
	for _, p := range second.Spec.Ports {
		if taken[fmt.Sprintf("%s:%d", second.Spec.IP, p.GlobalPort)] {
			t.Errorf("new leader handed out a held pair: %+v vs %+v", second.Spec, first.Spec)
		}
	}
	now, err := globalIngress(c1, "gn", "web")
	if err != nil || fmt.Sprint(now.Spec) != fmt.Sprint(first.Spec) {
		t.Errorf("web after the leader change %+v, was %+v (%v)", now.Spec, first.Spec, err)
	}
}

// TestGlobalCIDRFollowsTheGateway: the controller allocates only out of
// the global CIDR the gateway wrote into the cluster's mirrored Cluster:
// nothing before there is one, an allocation inside it once it appears,
// released (then deleted after the quarantine) when it is withdrawn. An
// invalid export (an ExternalName Service) never gets addresses.
func TestGlobalCIDRFollowsTheGateway(t *testing.T) {
	e := newEnv(t, "c1")
	e.cfg.Quarantine = time.Second
	e.namespace("gn")
	e.start("a")
	ctx := context.Background()
	c1 := e.c()
	web := kubetest.Service(t, c1, "gn", "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, web, 8080, kubetest.Pod{IP: "10.244.1.5", Ready: true})
	kubetest.Export(t, c1, "gn", "web")
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "gn", Name: "ext"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}}
	if err := c1.Create(ctx, ext); err != nil {
		t.Fatal(err)
	}
	kubetest.Export(t, c1, "gn", "ext")

	time.Sleep(time.Second)
	var gi causewayv1alpha1.GlobalIngress
	if err := c1.Get(ctx, types.NamespacedName{Namespace: "gn", Name: "web"}, &gi); !apierrors.IsNotFound(err) {
		t.Fatalf("GlobalIngress without a global CIDR: %+v (%v)", gi.Spec, err)
	}

	e.mirrorCluster("242.0.4.0/24")
	kubetest.Eventually(t, "web allocated in the new CIDR", func() error {
		gi, err := globalIngress(c1, "gn", "web")
		if err != nil {
			return err
		}
		if ip, err := netip.ParseAddr(gi.Spec.IP); err != nil || !netip.MustParsePrefix("242.0.4.0/24").Contains(ip) || gi.Spec.ClusterIP != web.Spec.ClusterIP {
			return fmt.Errorf("spec %+v", gi.Spec)
		}
		return nil
	})
	if err := c1.Get(ctx, types.NamespacedName{Namespace: "gn", Name: "ext"}, &gi); !apierrors.IsNotFound(err) {
		t.Errorf("GlobalIngress of an invalid export: %+v (%v)", gi.Spec, err)
	}

	e.mirrorCluster() // withdrawn
	kubetest.Eventually(t, "released, then deleted after the quarantine", func() error {
		err := c1.Get(ctx, types.NamespacedName{Namespace: "gn", Name: "web"}, &gi)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (releasedAt %v, %v)", gi.Spec.ReleasedAt, err)
	})
}
