package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/globalnet/controller"
)

// env is one cluster (a real API server) with in-process globalnet
// controllers acting as the chart's ServiceAccount causeway-globalnet,
// with its generated least-privilege roles.
type env struct {
	t       testing.TB
	cluster *kubetest.Cluster
	local   *rest.Config
	cfg     controller.Config // template for every replica
	daemons *kubetest.Daemons
}

func newEnv(t testing.TB, id string) *env {
	t.Helper()
	c := kubetest.Start(t, id)
	e := &env{t: t, cluster: c, daemons: kubetest.NewDaemons(t),
		cfg: controller.Config{ClusterID: id, ResyncPeriod: time.Minute}}
	e.namespace("causeway-system")
	e.local = c.DaemonConfig(t, "globalnet")
	return e
}

// mirrorCluster writes the cluster's own mirrored Cluster, as its active
// gateway does, with the given global CIDRs.
func (e *env) mirrorCluster(globalCIDRs ...string) {
	e.t.Helper()
	kubetest.MirrorCluster(e.t, e.c(), e.cfg.ClusterID, globalCIDRs...)
}

func (e *env) namespace(ns string) {
	e.t.Helper()
	kubetest.Namespace(e.t, e.c(), ns)
}

// start runs a replica, stopped by stop(name) or at the end of the test.
func (e *env) start(name string) {
	e.t.Helper()
	cfg := e.cfg
	level := slog.LevelWarn
	if os.Getenv("GLOBALNET_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("replica", name)
	c, err := controller.New(rest.CopyConfig(e.local), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.daemons.Start("globalnet controller "+name, c.Run)
}

func (e *env) stop(name string) { e.daemons.Stop("globalnet controller " + name) }

func (e *env) c() client.Client { return e.cluster.Client }

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
