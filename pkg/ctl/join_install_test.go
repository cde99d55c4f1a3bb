package ctl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/install"
	"github.com/causeway-net/causeway/pkg/kube"
)

// syncBuffer is an output buffer written by a running command and read
// by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func runCtl(args ...string) (string, error) {
	var out syncBuffer
	err := runCtlTo(&out, args...)
	return out.String(), err
}

func runCtlTo(out *syncBuffer, args ...string) error {
	cmd := NewCommand()
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(args)
	return cmd.Execute()
}

// daemonPod is a Pod as the workload's controller would make it for
// node, Ready or not.
func daemonPod(daemon, node string, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: kube.Namespace, Name: daemon + "-" + node,
			Labels: map[string]string{"app.kubernetes.io/part-of": "causeway", "app.kubernetes.io/component": daemon}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: kube.ServiceAccountName(daemon),
			AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: daemon, Image: "causeway"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// startPod creates p once its ServiceAccount exists (join applies the
// chart meanwhile) and gives it its status.
func startPod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	status := p.Status
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, p.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	if err != nil {
		return fmt.Errorf("create Pod %s: %w", p.Name, err)
	}
	have := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), have); err != nil {
		return err
	}
	have.Status = status
	return c.Status().Update(ctx, have)
}

// activeGateway reports the Gateway of node as active with no
// connection, once join has installed the CRDs.
func activeGateway(ctx context.Context, c client.Client, node string) error {
	gw := &v1alpha1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: kube.Namespace, Name: node}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := c.Create(ctx, gw)
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	if err != nil {
		return fmt.Errorf("create Gateway %s: %w", node, err)
	}
	gw.Status.HAStatus = v1alpha1.HAStatusActive
	return c.Status().Update(ctx, gw)
}

// playRollout plays the workload controllers once join has applied the
// chart: every DaemonSet and Deployment of Causeway reports its current
// generation rolled out (the Pods are the test's own).
func playRollout(ctx context.Context, c client.Client) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var dss appsv1.DaemonSetList
		if err := c.List(ctx, &dss, client.InNamespace(kube.Namespace)); err != nil {
			return false, err
		}
		var deps appsv1.DeploymentList
		if err := c.List(ctx, &deps, client.InNamespace(kube.Namespace)); err != nil {
			return false, err
		}
		if len(dss.Items) < 2 || len(deps.Items) < 1 { // gateway, route agent; MCS controller
			return false, nil
		}
		for i := range dss.Items {
			ds := &dss.Items[i]
			var nodes corev1.NodeList
			if err := c.List(ctx, &nodes, client.MatchingLabels(ds.Spec.Template.Spec.NodeSelector)); err != nil {
				return false, err
			}
			n := int32(len(nodes.Items))
			ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: n,
				CurrentNumberScheduled: n, UpdatedNumberScheduled: n, NumberReady: n, NumberAvailable: n}
			if err := c.Status().Update(ctx, ds); err != nil {
				return false, err
			}
		}
		for i := range deps.Items {
			d := &deps.Items[i]
			n := *d.Spec.Replicas
			d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
			if err := c.Status().Update(ctx, d); err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// playCleanup plays the garbage collector and the kubelets during
// uninstall: once the DaemonSets are gone it deletes their Pods, then it
// checks that want cleanup Pods run their DaemonSet's program with
// --cleanup bound to a node, and reports them Succeeded.
func playCleanup(ctx context.Context, c client.Client, want int) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var dss appsv1.DaemonSetList
		if err := c.List(ctx, &dss, client.InNamespace(kube.Namespace)); err != nil || len(dss.Items) > 0 {
			return false, err
		}
		var deps appsv1.DeploymentList
		if err := c.List(ctx, &deps, client.InNamespace(kube.Namespace)); err != nil || len(deps.Items) > 0 {
			return false, err
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(kube.Namespace)); err != nil {
			return false, err
		}
		cleanup := 0
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Labels[install.CleanupLabel] == "" {
				if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
					return false, err
				}
				continue
			}
			cleanup++
			if args := p.Spec.Containers[0].Args; p.Spec.NodeName == "" || len(args) == 0 || args[len(args)-1] != "--cleanup" ||
				p.Spec.RestartPolicy != corev1.RestartPolicyNever {
				return false, fmt.Errorf("cleanup Pod %s: node %q, args %v, restart %s", p.Name, p.Spec.NodeName, args, p.Spec.RestartPolicy)
			}
			if p.Status.Phase != corev1.PodSucceeded {
				p.Status.Phase = corev1.PodSucceeded
				if err := c.Status().Update(ctx, p); err != nil && !apierrors.IsConflict(err) {
					return false, err
				}
			}
		}
		if cleanup > want {
			return false, fmt.Errorf("%d cleanup Pods, want %d", cleanup, want)
		}
		return cleanup == want, nil
	})
}

// deploy-broker writes a join file; join with it claims the ID, stores
// the member credentials, discovers the CIDRs, labels the gateway node,
// installs the chart and waits until the daemons' Pods are Ready and the
// tunnel is up (the test plays their controllers and the gateway); another cluster joining under the same
// ID is refused; a join that times out names the Pod that is missing;
// uninstall removes what join created and frees the ID.
func TestJoinFileInstall(t *testing.T) {
	const svc = "10.96.0.0/16" // the test control planes' service CIDR
	cps := kubetest.StartMany(t, "c1", "c2", "broker")
	c1, c2, b := cps["c1"], cps["c2"], cps["broker"]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// No quota controller in this broker: deploy-broker does not wait for
	// one (TestDeployBrokerPolicy does).
	if out, err := runCtl("deploy-broker", "--kubeconfig", b.AdminKubeconfig, "--cluster-id", "c1", "--output-dir", dir, "--quota-timeout=0"); err != nil {
		t.Fatalf("deploy-broker: %v\n%s", err, out)
	}
	joinFile := filepath.Join(dir, "c1.join.yaml")
	for i, pod := range []string{"10.244.0.0/24", "10.244.1.0/24"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}, Spec: corev1.NodeSpec{PodCIDR: pod, PodCIDRs: []string{pod}}}
		if err := c1.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}

	// A bad chart value is refused before anything changes.
	if out, err := runCtl("join", "--join-file", joinFile, "--kubeconfig", c1.AdminKubeconfig, "--set", "cable.driver=gre"); err == nil ||
		!strings.Contains(err.Error(), "/cable/driver") {
		t.Errorf("join with cable.driver=gre: %v, want the schema's refusal\n%s", err, out)
	}
	claim := &coordinationv1.Lease{}
	if err := b.Client.Get(ctx, client.ObjectKey{Namespace: broker.Namespace("c1"), Name: broker.ClaimLease}, claim); !apierrors.IsNotFound(err) {
		t.Errorf("claim after a refused join: %v, want NotFound", err)
	}

	// The test plays the workloads' controllers: three Pods Ready, the
	// MCS controller's only once join reports waiting for it.
	pods := []*corev1.Pod{daemonPod("gateway", "n0", true), daemonPod("route-agent", "n0", true),
		daemonPod("route-agent", "n1", true), daemonPod("mcs-controller", "n1", false)}
	errc := make(chan error, len(pods)+1)
	for _, p := range pods {
		go func() { errc <- startPod(ctx, c1.Client, p) }()
	}
	// … and the gateway: active, the first cluster of the ClusterSet.
	go func() { errc <- activeGateway(ctx, c1.Client, "n0") }()
	// … and the workloads' rollout.
	go func() { errc <- playRollout(ctx, c1.Client) }()
	var joinOut syncBuffer
	joined := make(chan error, 1)
	go func() {
		joined <- runCtlTo(&joinOut, "join", "--join-file", joinFile, "--kubeconfig", c1.AdminKubeconfig, "--gateway-node", "n0", "--timeout", "2m")
	}()
	for range len(pods) + 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	const waiting = "3/4 Pods Ready; waiting for causeway-mcs-controller: Pod mcs-controller-n1 Running"
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(joinOut.String(), waiting), nil
	})
	if err != nil {
		t.Fatalf("join does not report %q:\n%s", waiting, joinOut.String())
	}
	select {
	case err := <-joined:
		t.Fatalf("join ended before the MCS controller was Ready: %v\n%s", err, joinOut.String())
	default:
	}
	if err := startPod(ctx, c1.Client, daemonPod("mcs-controller", "n1", true)); err != nil {
		t.Fatal(err)
	}
	if err := <-joined; err != nil {
		t.Fatalf("join: %v\n%s", err, joinOut.String())
	}
	out := joinOut.String()
	for _, want := range []string{"pod CIDRs from the nodes' spec.podCIDRs: [10.244.0.0/24 10.244.1.0/24]", "gateway nodes: [n0]",
		"4/4 Pods Ready", "cluster c1: every daemon is Ready",
		"tunnel: gateway n0 active; no other cluster's gateway in the broker yet", "cluster c1: the tunnel is up",
		"ClusterProperties: cluster.clusterset.k8s.io=c1, clusterset.k8s.io=clusterset"} {
		if !strings.Contains(out, want) {
			t.Errorf("join output lacks %q:\n%s", want, out)
		}
	}
	cm := &corev1.ConfigMap{}
	if err := c1.Client.Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: "causeway-config"}, cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["cluster-id"] != "c1" || cm.Data["pod-cidrs"] != "10.244.0.0/24,10.244.1.0/24" || cm.Data["service-cidrs"] != svc {
		t.Errorf("config %v, want c1, the nodes' pod CIDRs and service CIDR %s", cm.Data, svc)
	}
	if missing, err := about.Check(ctx, c1.Client, "c1", "clusterset"); err != nil || len(missing) > 0 {
		t.Errorf("About API after join: missing %v, %v", missing, err)
	}
	n0 := &corev1.Node{}
	if err := c1.Client.Get(ctx, client.ObjectKey{Name: "n0"}, n0); err != nil || n0.Labels[install.GatewayLabel] != "true" {
		t.Errorf("n0 labels %v (%v), want the gateway label", n0.Labels, err)
	}
	ds := &unstructured.Unstructured{}
	ds.SetAPIVersion("apps/v1")
	ds.SetKind("DaemonSet")
	if err := c1.Client.Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: "causeway-gateway"}, ds); err != nil {
		t.Fatal(err)
	}
	if m := ds.GetManagedFields(); len(m) == 0 || m[0].Manager != install.FieldOwner {
		t.Errorf("gateway DaemonSet managed by %v, want %s", m, install.FieldOwner)
	}
	sec := &corev1.Secret{}
	if err := c1.Client.Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: broker.Secret}, sec); err != nil {
		t.Fatal(err)
	}
	rc, err := broker.RESTConfigFromSecret(sec.Data)
	if err != nil {
		t.Fatal(err)
	}
	member, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	// The credentials on the member are its own identity, not an admin's.
	if err := member.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}); !apierrors.IsForbidden(err) {
		t.Errorf("the member's broker credentials creating a namespace: %v, want Forbidden", err)
	}

	// Another cluster under the same ID: refused before it changes anything.
	out, err = runCtl("join", "--join-file", joinFile, "--kubeconfig", c2.AdminKubeconfig, "--pod-cidrs", "10.1.0.0/16", "--service-cidrs", "10.2.0.0/16")
	if !errors.Is(err, broker.ErrClusterIDInUse) || !strings.Contains(err.Error(), "c1") {
		t.Errorf("second cluster joining as c1: %v, want %v\n%s", err, broker.ErrClusterIDInUse, out)
	}
	if err := c2.Client.Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: broker.Secret}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused cluster got a broker Secret: %v", err)
	}

	// An upgrade (a changed image tag: every Pod template changes) is
	// not done while the old Pods are Ready: join waits until each
	// workload is rolled out.
	out, err = runCtl("join", "--join-file", joinFile, "--kubeconfig", c1.AdminKubeconfig, "--set", "image.tag=next", "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "DaemonSet causeway-gateway: its update not yet seen by the controller") ||
		!strings.Contains(out, "4/4 Pods Ready") {
		t.Errorf("join of a new image tag, not rolled out: %v, want a timeout naming the DaemonSet\n%s", err, out)
	}
	if err := playRollout(ctx, c1.Client); err != nil {
		t.Fatal(err)
	}
	if out, err := runCtl("join", "--join-file", joinFile, "--kubeconfig", c1.AdminKubeconfig, "--set", "image.tag=next", "--timeout", "30s"); err != nil {
		t.Errorf("join of a new image tag, rolled out: %v\n%s", err, out)
	}

	// A route agent gone: joining again (idempotent) waits for it and
	// fails naming it.
	if err := c1.Client.Delete(ctx, daemonPod("route-agent", "n1", true)); err != nil {
		t.Fatal(err)
	}
	out, err = runCtl("join", "--join-file", joinFile, "--kubeconfig", c1.AdminKubeconfig, "--timeout", "2s")
	if err == nil || !strings.Contains(err.Error(), "causeway-route-agent on n1: no Pod") || !strings.Contains(out, "3/4 Pods Ready") {
		t.Errorf("join with a route agent missing: %v, want a timeout naming it\n%s", err, out)
	}

	// What the daemons would write in the broker, removed by uninstall.
	own := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace("c1"), Name: "c1"},
		Spec: v1alpha1.ClusterSpec{ClusterID: "c1", PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{svc}}}
	if err := member.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	cleaned := make(chan error, 1)
	go func() { cleaned <- playCleanup(ctx, c1.Client, 3) }()
	out, err = runCtl("uninstall", "--kubeconfig", c1.AdminKubeconfig, "--broker-server", b.URL)
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	if err := <-cleaned; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "nodes cleaned up: 3 cleanup Pods (--cleanup) Succeeded") {
		t.Errorf("uninstall output lacks the node cleanup:\n%s", out)
	}
	var leases coordinationv1.LeaseList
	if err := b.Client.List(ctx, &leases, client.InNamespace(broker.Namespace("c1"))); err != nil || len(leases.Items) != 0 {
		t.Errorf("broker Leases of c1 after uninstall: %v (%v)", leases.Items, err)
	}
	if err := b.Client.Get(ctx, client.ObjectKeyFromObject(own), own); !apierrors.IsNotFound(err) {
		t.Errorf("c1's Cluster in the broker after uninstall: %v", err)
	}
	if err := c1.Client.Get(ctx, client.ObjectKeyFromObject(ds), ds); !apierrors.IsNotFound(err) {
		t.Errorf("gateway DaemonSet after uninstall: %v", err)
	}
	ns := &corev1.Namespace{}
	if err := c1.Client.Get(ctx, client.ObjectKey{Name: kube.Namespace}, ns); err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("namespace %s not deleted", kube.Namespace)
	}
	if err := c1.Client.Get(ctx, client.ObjectKey{Name: "n0"}, n0); err != nil || n0.Labels[install.GatewayLabel] != "" {
		t.Errorf("n0 labels after uninstall %v (%v)", n0.Labels, err)
	}
	crds, err := kube.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, crd := range crds {
		err := c1.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd)
		switch {
		case kube.SharedCRD(crd) && err != nil:
			t.Errorf("uninstall deleted the shared CRD %s: %v", crd.Name, err)
		case !kube.SharedCRD(crd) && err == nil && crd.DeletionTimestamp == nil:
			t.Errorf("CRD %s not deleted", crd.Name)
		}
	}
	// The cluster left the ClusterSet; its ID stays.
	if id, err := about.ClusterID(ctx, c1.Client); err != nil || id != "c1" {
		t.Errorf("cluster ID after uninstall: %q, %v; want c1", id, err)
	}
	if missing, err := about.Check(ctx, c1.Client, "c1", "x"); err != nil || len(missing) != 1 {
		t.Errorf("ClusterProperty %s after uninstall: missing %v, %v; want it deleted", about.ClusterSetProperty, missing, err)
	}
	// The member's broker identity is revoked: its token is refused (the
	// API server caches accepted tokens for 10 s).
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err = member.List(ctx, &leases, client.InNamespace(broker.Namespace("c1")))
		return apierrors.IsUnauthorized(err), nil
	})
	if err != nil {
		t.Errorf("c1's broker token after uninstall: %v, want Unauthorized", err)
	}
	// The ID is free again, for a new identity from deploy-broker.
	if out, err := runCtl("deploy-broker", "--kubeconfig", b.AdminKubeconfig, "--cluster-id", "c1", "--output-dir", dir, "--quota-timeout=0"); err != nil {
		t.Fatalf("deploy-broker again: %v\n%s", err, out)
	}
	again, err := os.ReadFile(joinFile)
	if err != nil {
		t.Fatal(err)
	}
	member, err = install.ClientFromKubeconfig(again)
	if err != nil {
		t.Fatal(err)
	}
	uid, err := broker.MemberUID(ctx, c2.Client)
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.Claim(ctx, member, "c1", uid); err != nil {
		t.Errorf("claiming c1 for another cluster after uninstall: %v", err)
	}
}
