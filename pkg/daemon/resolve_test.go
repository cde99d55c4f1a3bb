package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	aboutv1alpha1 "github.com/causeway-net/causeway/api/about/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/daemon"
	"github.com/causeway-net/causeway/pkg/kube"
)

// TestResolveClusterID: a daemon started without --cluster-id takes the
// ID from the About API, with exactly the rights the chart gives it.
func TestResolveClusterID(t *testing.T) {
	c := kubetest.Start(t, "resolve")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kube.Namespace}}
	if err := c.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := about.Ensure(ctx, c.Client, "c7", "fleet"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"gateway", "route-agent", "mcs-controller"} {
		o := daemon.DefaultOptions(0, 0)
		o.Kubeconfig = c.DaemonKubeconfig(t, d, c.Config.Host)
		if err := o.ResolveClusterID(ctx); err != nil {
			t.Errorf("%s: %v", d, err)
			continue
		}
		if o.ClusterID != "c7" {
			t.Errorf("%s: cluster ID %q, want c7", d, o.ClusterID)
		}
	}

	// A flag wins over the About API.
	defer func() {
		o := daemon.DefaultOptions(0, 0)
		o.Kubeconfig = c.DaemonKubeconfig(t, "gateway", c.Config.Host)
		if err := c.Client.Delete(ctx, &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: about.ClusterIDProperty}}); err != nil {
			t.Fatal(err)
		}
		if err := o.ResolveClusterID(ctx); err == nil || !strings.Contains(err.Error(), "no --cluster-id") {
			t.Errorf("without the ClusterProperty: %q, %v; want an error", o.ClusterID, err)
		}
	}()
	o := daemon.DefaultOptions(0, 0)
	o.ClusterID = "c9"
	o.Kubeconfig = c.DaemonKubeconfig(t, "gateway", c.Config.Host)
	if err := o.ResolveClusterID(ctx); err != nil || o.ClusterID != "c9" {
		t.Errorf("with --cluster-id c9: %q, %v", o.ClusterID, err)
	}
}
