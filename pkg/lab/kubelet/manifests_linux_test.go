package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/lab/apps"
)

// TestKubeletRunsManifestPods: a Pod of the install manifests' route-agent
// DaemonSet (deploy/manifests, as the DaemonSet controller makes it for a
// node) runs the binary its image's /usr/local/bin/route-agent maps to,
// in the node's namespace, with its args expanded from env that comes
// from the downward API and the causeway-config ConfigMap.
func TestKubeletRunsManifestPods(t *testing.T) {
	l := newLab(t, 1)
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"args: $*\"\necho \"api: $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT\"\nexec sleep 3600\n"
	if err := os.WriteFile(filepath.Join(bin, "route-agent"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	l.reg.Register("ghcr.io/causeway-net/causeway", apps.BinariesIn("/usr/local/bin", bin))
	l.startKubelet("n0")
	ctx := context.Background()

	objs, err := kube.Manifests("manifests/namespace.yaml", "manifests/config.yaml", "manifests/route-agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := kube.Apply(ctx, l.cp.Client, objs[:2], false); err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(objs[2].Object, ds); err != nil {
		t.Fatal(err)
	}
	ns := ds.Namespace
	if _, err := l.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ds.Spec.Template.Spec.ServiceAccountName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "route-agent-n0", Namespace: ns, Labels: ds.Spec.Template.Labels}, Spec: ds.Spec.Template.Spec}
	pod.Spec.NodeName = "n0"
	pod.Spec.PriorityClassName = "" // no priority classes in a bare API server
	pod.Spec.AutomountServiceAccountToken = ptrTo(false)
	if _, err := l.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(l.dir, "n0", "pods", ns+"_route-agent-n0", "route-agent.log")
	want := []string{
		"args: --cluster-id=cluster1 --node-name=n0 --pod-cidrs=10.244.0.0/16 --service-cidrs=10.96.0.0/12 --metrics-addr=:9532",
		"api: 127.0.0.1:6443",
	}
	eventually(t, "the route agent's log", func() (bool, string) {
		b, err := os.ReadFile(logFile)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				return false, fmt.Sprintf("%q lacks %q", b, w)
			}
		}
		return true, ""
	})
	p, err := l.kube.CoreV1().Pods(ns).Get(ctx, "route-agent-n0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pidOf(t, p)))
	if err != nil {
		t.Fatal(err)
	}
	var node string
	if err := l.host.Do(l.host.Names().Node("c1", "n0"), func() error {
		node, err = os.Readlink("/proc/thread-self/ns/net")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got != node || p.Status.PodIP != "172.18.1.10" {
		t.Errorf("hostNetwork pod in %s with IP %s; want the node's namespace %s and address", got, p.Status.PodIP, node)
	}
}
