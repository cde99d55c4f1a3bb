package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
)

// TestNamespaceEgress: in a /29 (three ingress IPs) a namespace labelled
// causeway.dev/global-egress=1 gets one IP and its pods' addresses (not
// the host-network or finished ones, nor one outside the pod CIDRs),
// following pods as they come and go; an invalid label value gets
// Allocated=False and an Event on the Namespace; a namespace asking for
// more than is left waits (GlobalPoolExhausted) through the quarantine of
// an unlabelled namespace's IP and then gets it; a new leader replays
// the allocation; a deleted namespace's IP is quarantined too.
func TestNamespaceEgress(t *testing.T) {
	e := newEnv(t, "c1")
	e.cfg.Quarantine = 3 * time.Second
	e.mirrorCluster("242.0.9.0/29")
	e.start("a")
	ctx := context.Background()
	c1 := e.c()

	labelNS(t, c1, "blue", "1")
	pod(t, c1, "blue", "web-1", false, corev1.PodRunning, "10.244.1.2")
	pod(t, c1, "blue", "web-2", false, corev1.PodPending, "10.244.1.1")
	pod(t, c1, "blue", "host", true, corev1.PodRunning, "10.244.1.3")
	pod(t, c1, "blue", "done", false, corev1.PodSucceeded, "10.244.1.4")
	pod(t, c1, "blue", "odd", false, corev1.PodRunning, "192.168.7.7")
	kubetest.Eventually(t, "blue allocated with its pods", wantEgress(c1, "blue", []string{"242.0.9.4"}, []string{"10.244.1.1", "10.244.1.2"}))

	// Pods come and go.
	pod(t, c1, "blue", "web-3", false, corev1.PodRunning, "10.244.1.9")
	if err := c1.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "blue", Name: "web-1"}}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "blue follows its pods", wantEgress(c1, "blue", []string{"242.0.9.4"}, []string{"10.244.1.1", "10.244.1.9"}))

	// A label value that is no count: nothing allocated, said so.
	labelNS(t, c1, "red", "true")
	kubetest.Eventually(t, "red refused", wantFailure(c1, "red", causewayv1alpha1.ReasonInvalidGlobalEgress))
	kubetest.Eventually(t, "red's Event", kubetest.WantEvent(c1, "default", "Namespace", "red", causewayv1alpha1.ReasonInvalidGlobalEgress, "want the number"))
	labelNS(t, c1, "red", "2")
	kubetest.Eventually(t, "red allocated", wantEgress(c1, "red", []string{"242.0.9.3", "242.0.9.2"}, nil))

	// The pool is full: green waits, without a half allocation.
	labelNS(t, c1, "green", "1")
	kubetest.Eventually(t, "green exhausted", wantFailure(c1, "green", causewayv1alpha1.ReasonGlobalPoolExhausted))
	kubetest.Eventually(t, "green's Event", kubetest.WantEvent(c1, "default", "Namespace", "green", causewayv1alpha1.ReasonGlobalPoolExhausted, ""))

	// blue unlabelled: released at once, its IP free only after the
	// quarantine, then green's.
	var ns corev1.Namespace
	if err := c1.Get(ctx, types.NamespacedName{Name: "blue"}, &ns); err != nil {
		t.Fatal(err)
	}
	delete(ns.Labels, causewayv1alpha1.LabelGlobalEgress)
	if err := c1.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "blue released", func() error {
		ge, err := globalEgress(c1, "blue")
		if err != nil {
			return err
		}
		if ge.Spec.ReleasedAt == nil {
			return fmt.Errorf("blue not released: %+v", ge.Spec)
		}
		return nil
	})
	released := time.Now()
	kubetest.Eventually(t, "green gets blue's IP after the quarantine", wantEgress(c1, "green", []string{"242.0.9.4"}, nil))
	if waited := time.Since(released); waited < 2*time.Second {
		t.Errorf("green got blue's IP %v after its release, before the quarantine (3 s)", waited)
	}
	kubetest.Eventually(t, "blue's GlobalEgress deleted", func() error {
		if _, err := globalEgress(c1, "blue"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("blue: %v", err)
		}
		return nil
	})

	// A new leader replays what is held: red and green keep their IPs,
	// and the namespace asking now finds nothing left.
	e.start("b")
	e.stop("a")
	labelNS(t, c1, "yellow", "1")
	kubetest.Eventually(t, "yellow exhausted under the new leader", wantFailure(c1, "yellow", causewayv1alpha1.ReasonGlobalPoolExhausted))
	for ns, ips := range map[string][]string{"red": {"242.0.9.3", "242.0.9.2"}, "green": {"242.0.9.4"}} {
		if err := wantEgress(c1, ns, ips, nil)(); err != nil {
			t.Errorf("after the leader change: %v", err)
		}
	}

	// A namespace deleted: released, quarantined, then yellow's.
	if err := c1.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "green"}}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "yellow gets the deleted namespace's IP", wantEgress(c1, "yellow", []string{"242.0.9.4"}, nil))
}

// labelNS creates namespace name, or updates it, with the egress label
// set to value.
func labelNS(t *testing.T, c client.Client, name, value string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	switch err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); {
	case apierrors.IsNotFound(err):
		ns.Labels = map[string]string{causewayv1alpha1.LabelGlobalEgress: value}
		if err := c.Create(ctx, ns); err != nil {
			t.Fatalf("create namespace %s: %v", name, err)
		}
		// Pods need it (no kube-controller-manager here to create it).
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "default"}}); err != nil {
			t.Fatalf("service account of %s: %v", name, err)
		}
	case err != nil:
		t.Fatal(err)
	default:
		if ns.Labels == nil {
			ns.Labels = map[string]string{}
		}
		ns.Labels[causewayv1alpha1.LabelGlobalEgress] = value
		if err := c.Update(ctx, ns); err != nil {
			t.Fatalf("label namespace %s: %v", name, err)
		}
	}
}

// pod creates a pod with the given phase and address, as the kubelet
// reports it.
func pod(t *testing.T, c client.Client, ns, name string, hostNetwork bool, phase corev1.PodPhase, ip string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{HostNetwork: hostNetwork, Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	p.Status = corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatalf("pod %s/%s status: %v", ns, name, err)
	}
}

func globalEgress(c client.Client, ns string) (*causewayv1alpha1.GlobalEgress, error) {
	var ge causewayv1alpha1.GlobalEgress
	if err := c.Get(context.Background(), types.NamespacedName{Name: ns}, &ge); err != nil {
		return nil, err
	}
	return &ge, nil
}

// wantEgress checks that namespace ns's GlobalEgress is allocated with
// ips and pods.
func wantEgress(c client.Client, ns string, ips, pods []string) func() error {
	return func() error {
		ge, err := globalEgress(c, ns)
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(ge.Status.Conditions, causewayv1alpha1.ConditionAllocated) || ge.Spec.ReleasedAt != nil ||
			!slices.Equal(ge.Spec.IPs, ips) || !slices.Equal(ge.Spec.Pods, pods) {
			return fmt.Errorf("GlobalEgress %s: %+v %+v, want IPs %v pods %v", ns, ge.Spec, ge.Status.Conditions, ips, pods)
		}
		return nil
	}
}

// wantFailure checks that namespace ns's GlobalEgress is Allocated=False
// with reason and holds no IP.
func wantFailure(c client.Client, ns, reason string) func() error {
	return func() error {
		ge, err := globalEgress(c, ns)
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(ge.Status.Conditions, causewayv1alpha1.ConditionAllocated)
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != reason || len(ge.Spec.IPs) != 0 {
			return fmt.Errorf("GlobalEgress %s: %+v, Allocated %+v; want False %s and no IPs", ns, ge.Spec, cond, reason)
		}
		return nil
	}
}
