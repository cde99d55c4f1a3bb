package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/kube"
)

// TestKubeletRunsManifestPods: a Pod of the Helm chart's route-agent
// DaemonSet (deploy/helm/causeway rendered by pkg/chart, as the DaemonSet
// controller makes it for a node) runs the binary its image's
// /usr/local/bin/route-agent maps to, in the node's namespace, with its
// args expanded from env that comes from the downward API and the
// causeway-config ConfigMap.
func TestKubeletRunsManifestPods(t *testing.T) {
	l := newLab(t, 1)
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"args: $*\"\necho \"api: $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT\"\nexec sleep 3600\n"
	if err := os.WriteFile(filepath.Join(bin, "route-agent"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	gateway := `echo "args: $*"
sa=/var/run/secrets/kubernetes.io/serviceaccount
echo "broker: $(cat /etc/causeway/broker/kubeconfig)"
echo "namespace: $(cat $sa/namespace)"
grep -q "BEGIN CERTIFICATE" $sa/ca.crt && echo "ca.crt: ok"
test -c /dev/net/tun && echo "tun: ok"
echo written > /var/lib/causeway/gateway/probe
exec sleep 3600
`
	if err := os.WriteFile(filepath.Join(bin, "gateway"), []byte("#!/bin/sh\n"+gateway), 0o755); err != nil {
		t.Fatal(err)
	}
	// Mount points missing on the host are made there (the lab has no
	// image filesystem): remove those this test makes.
	var made []string // innermost first
	for _, dir := range []string{"/etc/causeway/broker", "/var/run/secrets/kubernetes.io/serviceaccount", "/var/lib/causeway/gateway"} {
		for d := dir; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Stat(d); err == nil {
				break
			}
			made = append(made, d)
		}
	}
	t.Cleanup(func() {
		for _, d := range made {
			os.Remove(d) // only if empty
		}
	})
	l.reg.Register("ghcr.io/causeway-net/causeway", apps.BinariesIn("/usr/local/bin", bin))
	hostLib := t.TempDir()
	l.hostPaths = map[string]string{"/var/lib/causeway": hostLib}
	l.startKubelet("n0")
	ctx := context.Background()

	objs, err := chart.Render(map[string]any{"clusterID": "c1", "podCIDRs": []any{"10.244.0.0/16"}, "serviceCIDRs": []any{"10.96.0.0/16"},
		"namespace": map[string]any{"create": true}})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		byName[o.GetKind()+"/"+o.GetName()] = o
	}
	for _, name := range []string{"Namespace/causeway-system", "ConfigMap/causeway-config", "DaemonSet/causeway-route-agent", "DaemonSet/causeway-gateway"} {
		if byName[name] == nil {
			t.Fatalf("the chart renders no %s", name)
		}
	}
	if err := kube.Apply(ctx, l.cp.Client, []*unstructured.Unstructured{byName["Namespace/causeway-system"], byName["ConfigMap/causeway-config"]}, false); err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byName["DaemonSet/causeway-route-agent"].Object, ds); err != nil {
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
		"args: --cluster-id=c1 --node-name=n0 --pod-cidrs=10.244.0.0/16 --service-cidrs=10.96.0.0/16 --tunnel-mtu=1420",
		"api: 127.0.0.1:6443",
	}
	waitLog(t, logFile, want)
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

	// The gateway's Pod mounts the broker Secret, a hostPath state
	// directory (here remapped by HostPaths), /dev/net/tun and the
	// ServiceAccount token the admission plugin adds (TokenRequest, with
	// the cluster CA of kube-root-ca.crt, which kube-controller-manager
	// would publish).
	gw := &appsv1.DaemonSet{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(byName["DaemonSet/causeway-gateway"].Object, gw); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(l.cp.CACertFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gw.Spec.Template.Spec.ServiceAccountName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "causeway-broker"}, Data: map[string][]byte{"kubeconfig": []byte("broker-credentials")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-root-ca.crt"}, Data: map[string]string{"ca.crt": string(ca)}},
	} {
		if err := l.cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// A pod whose network namespace exists when the gateway's mount
	// namespace is made (see below).
	l.createPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "brief"},
		Spec: corev1.PodSpec{NodeName: "n0", Containers: []corev1.Container{{Name: "c", Image: apps.ImageClient}}}})
	l.runningReady("brief")
	gwPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gateway-n0", Namespace: ns}, Spec: gw.Spec.Template.Spec}
	gwPod.Spec.NodeName, gwPod.Spec.PriorityClassName = "n0", ""
	if _, err := l.kube.CoreV1().Pods(ns).Create(ctx, gwPod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gwLog := filepath.Join(l.dir, "n0", "pods", ns+"_gateway-n0", "gateway.log")
	want = []string{"args: --cluster-id=c1 --node-name=n0", "--private-ip=172.18.1.10 --cable-driver=wireguard",
		"broker: broker-credentials", "namespace: " + ns, "ca.crt: ok", "tun: ok"}
	waitLog(t, gwLog, want)
	if b, err := os.ReadFile(filepath.Join(hostLib, "gateway", "probe")); err != nil || string(b) != "written\n" {
		t.Errorf("hostPath /var/lib/causeway/gateway not remapped to %s: %q, %v", hostLib, b, err)
	}
	// The gateway's mount namespace was made while the brief pod's
	// network namespace was mounted under /run/netns: deleting the pod
	// leaves no mount of it there (which would keep the namespace, and
	// its veth, alive).
	briefNS := l.host.Names().Pod("c1", "n0", testNS, "brief")
	gwRunning, err := l.kube.CoreV1().Pods(ns).Get(ctx, "gateway-n0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.kube.CoreV1().Pods(testNS).Delete(ctx, "brief", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	mountinfo := fmt.Sprintf("/proc/%d/mountinfo", pidOf(t, gwRunning))
	eventually(t, "the deleted pod's namespace unmounted in the gateway's mount namespace", func() (bool, string) {
		b, err := os.ReadFile(mountinfo)
		if err != nil {
			return false, err.Error()
		}
		_, gone := l.pod("brief")
		return gone != nil && !strings.Contains(string(b), briefNS), fmt.Sprintf("pod deleted: %v", gone != nil)
	})

	// The token in the pod's volume authenticates as the ServiceAccount.
	tokens, _ := filepath.Glob(filepath.Join(l.dir, "n0", "pods", ns+"_gateway-n0", "volumes", "kube-api-access-*", "token"))
	if len(tokens) != 1 {
		t.Fatalf("token files %v", tokens)
	}
	tok, err := os.ReadFile(tokens[0])
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(l.cp.Config)
	cfg.BearerToken = string(tok)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if want := "system:serviceaccount:" + ns + ":" + gw.Spec.Template.Spec.ServiceAccountName; err != nil || review.Status.UserInfo.Username != want {
		t.Errorf("token authenticates as %+v (%v), want %s", review, err, want)
	}
}

// waitLog waits until the log file holds every string of want.
func waitLog(t *testing.T, file string, want []string) {
	t.Helper()
	eventually(t, "log "+file, func() (bool, string) {
		b, err := os.ReadFile(file)
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
}
