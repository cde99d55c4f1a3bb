package ctl

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
)

func TestJoin(t *testing.T) {
	cps := kubetest.StartMany(t, "c1", "impostor", "broker")
	c1, b := cps["c1"], cps["broker"]
	ctx := context.Background()
	run := func(args ...string) (string, error) {
		cmd := NewCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"join", "--broker-kubeconfig", b.AdminKubeconfig, "--kubeconfig", c1.AdminKubeconfig}, args...))
		err := cmd.Execute()
		return out.String(), err
	}

	if out, err := run(); err == nil || !strings.Contains(out+err.Error(), "cluster.clusterset.k8s.io") {
		t.Errorf("join without --cluster-id nor About API: err=%v out=%s, want an error naming the ClusterProperty", err, out)
	}
	if _, err := run("--cluster-id", "Bad_ID"); err == nil {
		t.Error("join accepted cluster ID Bad_ID")
	}
	file := filepath.Join(t.TempDir(), "broker.kubeconfig")
	for range 2 { // idempotent
		if out, err := run("--cluster-id", "c1", "--output", file); err != nil {
			t.Fatalf("join: %v\n%s", err, out)
		}
	}
	// Another cluster cannot join as c1 (nor get c1's credentials).
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"join", "--broker-kubeconfig", b.AdminKubeconfig, "--kubeconfig", cps["impostor"].AdminKubeconfig, "--cluster-id", "c1"})
	if err := cmd.Execute(); !errors.Is(err, broker.ErrClusterIDInUse) {
		t.Errorf("a second cluster joins as c1: err=%v, want ErrClusterIDInUse", err)
	}
	if err := cps["impostor"].Client.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: broker.Secret}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused cluster got a broker Secret: %v", err)
	}

	sec := &corev1.Secret{}
	if err := c1.Client.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: broker.Secret}, sec); err != nil {
		t.Fatalf("broker Secret: %v", err)
	}
	fromFile, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want, err := broker.SecretData(fromFile)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sec.Data, want) {
		t.Error("the Secret and --output hold different credentials")
	}
	rc, err := broker.RESTConfigFromSecret(sec.Data)
	if err != nil {
		t.Fatal(err)
	}
	member, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	own := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace("c1"), Name: "c1"},
		Spec:       v1alpha1.ClusterSpec{ClusterID: "c1", PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"}},
	}
	if err := member.Create(ctx, own); err != nil {
		t.Errorf("the joined identity cannot write its own broker namespace: %v", err)
	}
	// Another member's namespace exists but is not c1's to write.
	if _, err := broker.EnsureClusterIdentity(ctx, b.Config, "c2"); err != nil {
		t.Fatal(err)
	}
	other := own.DeepCopy()
	other.Namespace, other.ResourceVersion = broker.Namespace("c2"), ""
	if err := member.Create(ctx, other); !apierrors.IsForbidden(err) {
		t.Errorf("the joined identity creating in c2's namespace: err=%v, want Forbidden", err)
	}
}
