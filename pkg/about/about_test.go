package about_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "github.com/causeway-net/causeway/api/about/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/about"
)

func TestClusterProperties(t *testing.T) {
	c := kubetest.Start(t, "about")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := about.ClusterID(ctx, c.Client); err == nil {
		t.Fatal("ClusterID of a cluster without ClusterProperties succeeded")
	}
	if err := about.Ensure(ctx, c.Client, "c1", "fleet"); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if id, err := about.ClusterID(ctx, c.Client); err != nil || id != "c1" {
		t.Fatalf("ClusterID = %q, %v; want c1", id, err)
	}
	if err := about.Ensure(ctx, c.Client, "c1", "fleet"); err != nil {
		t.Fatalf("Ensure again with the same values: %v", err)
	}
	for _, tc := range []struct{ id, set, want string }{
		{"c2", "fleet", `ClusterProperty cluster.clusterset.k8s.io is "c1", not "c2"`},
		{"c1", "other", `ClusterProperty clusterset.k8s.io is "fleet", not "other"`},
	} {
		if err := about.Ensure(ctx, c.Client, tc.id, tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Ensure(%s, %s) = %v, want an error containing %q", tc.id, tc.set, err, tc.want)
		}
	}
	if v := value(ctx, t, c.Client, about.ClusterSetProperty); v != "fleet" {
		t.Errorf("a refused Ensure changed clusterset.k8s.io to %q", v)
	}

	if err := about.Leave(ctx, c.Client); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	var p aboutv1alpha1.ClusterProperty
	if err := c.Client.Get(ctx, client.ObjectKey{Name: about.ClusterSetProperty}, &p); err == nil {
		t.Error("clusterset.k8s.io still exists after Leave")
	}
	if v := value(ctx, t, c.Client, about.ClusterIDProperty); v != "c1" {
		t.Errorf("Leave changed the cluster ID to %q", v)
	}
	if err := about.Ensure(ctx, c.Client, "c1", "other"); err != nil {
		t.Errorf("joining another ClusterSet after Leave: %v", err)
	}
}

func value(ctx context.Context, t *testing.T, c client.Client, name string) string {
	t.Helper()
	var p aboutv1alpha1.ClusterProperty
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatalf("read ClusterProperty %s: %v", name, err)
	}
	return p.Spec.Value
}
