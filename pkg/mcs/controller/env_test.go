package controller_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/broker"
	globalnetcontroller "github.com/causeway-net/causeway/pkg/globalnet/controller"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/mcs/controller"
)

// env is a ClusterSet of real API servers (members + broker) with one
// in-process MCS controller per member.
type env struct {
	t        testing.TB
	broker   *kubetest.Cluster
	clusters map[string]*kubetest.Cluster
	identity map[string]*rest.Config
	// local is the MCS controller's own ServiceAccount in each cluster,
	// with the least-privilege roles of the chart's templates/rbac.
	local map[string]*rest.Config
	cfg   controller.Config // template for every controller
	// globalnet, when set, is the template of a globalnet controller
	// started and stopped with each MCS controller (with its own
	// ServiceAccount, globalnetLocal): it writes the GlobalIngress objects
	// the MCS controller reads.
	globalnet      *globalnetcontroller.Config
	globalnetLocal map[string]*rest.Config

	daemons *kubetest.Daemons
	// metrics is the registry of each running controller, by name.
	metrics map[string]*prometheus.Registry
}

func newEnv(t testing.TB, members ...string) *env {
	t.Helper()
	all := kubetest.StartMany(t, append(slices.Clone(members), "broker")...)
	e := &env{t: t, broker: all["broker"], clusters: map[string]*kubetest.Cluster{}, identity: map[string]*rest.Config{},
		local: map[string]*rest.Config{}, globalnetLocal: map[string]*rest.Config{},
		daemons: kubetest.NewDaemons(t), metrics: map[string]*prometheus.Registry{},
		cfg: controller.Config{
			DeadClusterTimeout: time.Second,
			LivenessDuration:   time.Second,
			ResyncPeriod:       time.Minute,
		}}
	ctx := context.Background()
	for _, id := range members {
		e.clusters[id] = all[id]
		kc, err := broker.EnsureClusterIdentity(ctx, e.broker.Config, id)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.QPS, cfg.Burst = 200, 400
		e.identity[id] = cfg
		e.namespace(id, "causeway-system")
		e.local[id] = all[id].DaemonConfig(t, "mcs-controller")
	}
	// Flat network, as a gateway would mirror it: every other cluster
	// reachable through a Valid Endpoint whose subnets cover the pod and
	// service addresses the tests use.
	for _, in := range members {
		for _, to := range members {
			if in != to {
				e.tunnel(in, to, true, "10.96.0.0/16", "10.244.0.0/16")
			}
		}
	}
	return e
}

// tunnel writes, in cluster in, the mirrored Endpoint of cluster to (as
// the gateway does): subnets, and the Valid condition.
func (e *env) tunnel(in, to string, valid bool, subnets ...string) {
	e.t.Helper()
	ctx := context.Background()
	c := e.clusters[in].Client
	ep := &causewayv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-system", Name: to}}
	err := c.Get(ctx, client.ObjectKeyFromObject(ep), ep)
	ep.Spec = causewayv1alpha1.EndpointSpec{ClusterID: to, Hostname: to + "-gw", CableDriver: causewayv1alpha1.CableWireGuard,
		PublicIP: "192.0.2.1", Port: 4500, Subnets: subnets}
	switch {
	case apierrors.IsNotFound(err):
		err = c.Create(ctx, ep)
	case err == nil:
		err = c.Update(ctx, ep)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	cond := metav1.Condition{Type: causewayv1alpha1.ConditionValid, Status: metav1.ConditionTrue, Reason: causewayv1alpha1.ReasonValid, Message: "accepted"}
	if !valid {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, causewayv1alpha1.ReasonOverlappingCIDR, "subnets overlap this cluster's"
	}
	meta.SetStatusCondition(&ep.Status.Conditions, cond)
	if err := c.Status().Update(ctx, ep); err != nil {
		e.t.Fatal(err)
	}
}

// mirrorCluster writes, in cluster in, the mirrored Cluster of cluster of
// with the given global CIDRs.
func (e *env) mirrorCluster(in, of string, globalCIDRs ...string) {
	e.t.Helper()
	kubetest.MirrorCluster(e.t, e.c(in), of, globalCIDRs...)
}

func (e *env) namespace(id, ns string) {
	e.t.Helper()
	kubetest.Namespace(e.t, e.c(id), ns)
}

// start runs cluster id's controller until stop or the end of the test.
func (e *env) start(id string) {
	e.t.Helper()
	e.startReplica(id, id)
}

// startReplica runs a replica of cluster id's controller, stopped by
// stop(name).
func (e *env) startReplica(id, name string) {
	e.t.Helper()
	cfg := e.cfg
	cfg.ClusterID = id
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	level := slog.LevelWarn
	if os.Getenv("MCS_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("cluster", id)
	local := rest.CopyConfig(e.local[id])
	local.QPS, local.Burst = 200, 400
	c, err := controller.New(local, e.identity[id], cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	run := c.Run
	if e.globalnet != nil {
		gcfg := *e.globalnet
		gcfg.ClusterID, gcfg.LeaderElection, gcfg.Log = id, cfg.LeaderElection, cfg.Log.With("daemon", "globalnet")
		if e.globalnetLocal[id] == nil {
			e.globalnetLocal[id] = e.clusters[id].DaemonConfig(e.t, "globalnet")
		}
		g, err := globalnetcontroller.New(rest.CopyConfig(e.globalnetLocal[id]), gcfg)
		if err != nil {
			e.t.Fatal(err)
		}
		run = func(ctx context.Context) error {
			gdone := make(chan error, 1)
			go func() { gdone <- g.Run(ctx) }()
			return errors.Join(c.Run(ctx), <-gdone)
		}
	}
	e.metrics[name] = reg
	e.daemons.Start("controller "+name, run)
}

func (e *env) stop(name string) { e.daemons.Stop("controller " + name) }

func (e *env) c(id string) client.Client { return e.clusters[id].Client }

// series returns the series of metric name in controller id's registry
// that carry every label of labels.
func (e *env) series(id, name string, labels map[string]string) []*dto.Metric {
	e.t.Helper()
	mfs, err := e.metrics[id].Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range labels {
				match = match && have[k] == v
			}
			if match {
				out = append(out, m)
			}
		}
	}
	return out
}

// importVIP returns the ServiceImport's VIP, or an error while it has none.
func importVIP(c client.Client, ns, name string) (netip.Addr, error) {
	var si mcsv1beta1.ServiceImport
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &si); err != nil {
		return netip.Addr{}, err
	}
	if len(si.Spec.IPs) != 1 {
		return netip.Addr{}, fmt.Errorf("ServiceImport %s/%s has IPs %v", ns, name, si.Spec.IPs)
	}
	return netip.ParseAddr(si.Spec.IPs[0])
}

// endpoints lists the multi-cluster slices' endpoints of a Service as
// "cluster/address/ready[/hostname]", sorted.
func endpoints(c client.Client, ns, name string) ([]string, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{mcsv1beta1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			e := fmt.Sprintf("%s/%s/%v", s.Labels[mcsv1beta1.LabelSourceCluster], ep.Addresses[0], *ep.Conditions.Ready)
			if ep.Hostname != nil {
				e += "/" + *ep.Hostname
			}
			out = append(out, e)
		}
	}
	sort.Strings(out)
	return out, nil
}

func wantEndpoints(c client.Client, ns, name string, want ...string) func() error {
	return func() error {
		got, err := endpoints(c, ns, name)
		if err != nil {
			return err
		}
		sort.Strings(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("endpoints %v, want %v", got, want)
		}
		return nil
	}
}

// condition returns the ServiceExport's condition as "Status/Reason".
func condition(c client.Client, ns, name, typ string) (string, *mcsv1beta1.ServiceExport, error) {
	var se mcsv1beta1.ServiceExport
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &se); err != nil {
		return "", nil, err
	}
	cond := meta.FindStatusCondition(se.Status.Conditions, typ)
	if cond == nil {
		return "", &se, nil
	}
	if cond.ObservedGeneration != se.Generation {
		return "", &se, fmt.Errorf("condition %s observedGeneration %d, generation %d", typ, cond.ObservedGeneration, se.Generation)
	}
	return string(cond.Status) + "/" + cond.Reason, &se, nil
}

func wantCondition(c client.Client, ns, name, typ, want string) func() error {
	return func() error {
		got, _, err := condition(c, ns, name, typ)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s/%s %s = %q, want %q", ns, name, typ, got, want)
		}
		return nil
	}
}

func gone(c client.Client, obj client.Object) func() error {
	return func() error {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%T %s still there (%v)", obj, client.ObjectKeyFromObject(obj), err)
	}
}

func ptr[T any](v T) *T { return &v }

func vipRange() mcs.VIPRange { return mcs.MustParseVIPRange(mcs.DefaultVIPRange) }
