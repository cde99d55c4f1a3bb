package lab

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/pkg/kube"
)

// TestWaitCausewayNamesFailingPods: while a chart workload's Pod is not
// Ready, `lab up`'s wait fails naming the Pod, with the last lines of its
// container's log from the kubelet's state directory.
func TestWaitCausewayNamesFailingPods(t *testing.T) {
	kc := kubetest.Start(t, "c1")
	top, err := Config{Prefix: "cwt-", Clusters: 1, Nodes: 2}.Topology()
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Dir: t.TempDir(), Prefix: "cwt-", Topology: top, Globalnet: true}
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kube.Namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: kube.Namespace, Name: kube.ServiceAccountName("mcs-controller")}},
	} {
		if err := kc.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: kube.Namespace, Name: "causeway-mcs-controller-x",
			Labels: map[string]string{"app.kubernetes.io/part-of": "causeway", "app.kubernetes.io/component": "mcs-controller"}},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: kube.ServiceAccountName("mcs-controller"),
			AutomountServiceAccountToken: new(bool), Containers: []corev1.Container{{Name: "mcs-controller", Image: ImageCauseway}}},
	}
	if err := kc.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	log := kubelet.ContainerLog(st.NodeStateDir("c1", "n1"), pod.Namespace, pod.Name, "mcs-controller")
	if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log, []byte("starting\nload in-cluster config: no token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = st.waitCauseway(ctx, map[string]client.Client{"c1": kc.Client}, 2*time.Second)
	if err == nil {
		t.Fatal("waitCauseway succeeded with the MCS controller's Pod not Ready")
	}
	t.Logf("lab up would fail with: %v", err)
	for _, want := range []string{"cluster c1", "causeway-mcs-controller: Pod causeway-mcs-controller-x", "c1/causeway-mcs-controller-x on n1", log, "load in-cluster config: no token"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
