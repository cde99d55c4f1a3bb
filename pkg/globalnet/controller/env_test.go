package controller_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

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

	mu      sync.Mutex
	running map[string]*running
}

type running struct {
	cancel context.CancelFunc
	done   chan error
}

func newEnv(t testing.TB, id string) *env {
	t.Helper()
	c := kubetest.Start(t, id)
	e := &env{t: t, cluster: c, running: map[string]*running{},
		cfg: controller.Config{ClusterID: id, ResyncPeriod: time.Minute}}
	e.namespace("causeway-system")
	e.local = c.DaemonConfig(t, "globalnet")
	t.Cleanup(e.stopAll)
	return e
}

// mirrorCluster writes the cluster's own mirrored Cluster, as its active
// gateway does, with the lab's pod and service CIDRs and the given
// global CIDRs.
func (e *env) mirrorCluster(globalCIDRs ...string) {
	e.t.Helper()
	ctx := context.Background()
	cl := &causewayv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-system", Name: e.cfg.ClusterID}}
	err := e.c().Get(ctx, client.ObjectKeyFromObject(cl), cl)
	cl.Spec = causewayv1alpha1.ClusterSpec{ClusterID: e.cfg.ClusterID, PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"}, GlobalCIDRs: globalCIDRs}
	switch {
	case apierrors.IsNotFound(err):
		err = e.c().Create(ctx, cl)
	case err == nil:
		err = e.c().Update(ctx, cl)
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) namespace(ns string) {
	e.t.Helper()
	err := e.c().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
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
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	e.mu.Lock()
	e.running[name] = r
	e.mu.Unlock()
}

func (e *env) stop(name string) {
	e.mu.Lock()
	r := e.running[name]
	delete(e.running, name)
	e.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		e.t.Errorf("globalnet controller %s: %v", name, err)
	}
}

func (e *env) stopAll() {
	e.mu.Lock()
	names := make([]string, 0, len(e.running))
	for n := range e.running {
		names = append(names, n)
	}
	e.mu.Unlock()
	for _, n := range names {
		e.stop(n)
	}
}

func (e *env) c() client.Client { return e.cluster.Client }

// eventually polls check until it returns nil; it fails the test with the
// last error after a generous bound (a hang, not a speed requirement).
func eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// service creates a Service (ClusterIP assigned by the API server, or
// headless) with the given named TCP ports.
func service(t testing.TB, c client.Client, ns, name string, headless bool, ports map[string]int32) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	names := make([]string, 0, len(ports))
	for n := range ports {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: n, Protocol: corev1.ProtocolTCP, Port: ports[n]})
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	if err := c.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	return svc
}

type pod struct {
	ip    string
	ready bool
}

// localSlice writes the Service's own EndpointSlice, as the EndpointSlice
// controller of kube-controller-manager would.
func localSlice(t testing.TB, c client.Client, svc *corev1.Service, targetPort int32, pods ...pod) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-local",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range svc.Spec.Ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: new(p.Name), Protocol: new(corev1.ProtocolTCP), Port: new(targetPort)})
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{p.ip}, Conditions: discoveryv1.EndpointConditions{
			Ready: new(p.ready), Serving: new(p.ready), Terminating: new(false)}})
	}
	ctx := context.Background()
	var have discoveryv1.EndpointSlice
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), &have); err == nil {
		s.ResourceVersion = have.ResourceVersion
		if err := c.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
}

func export(t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Create(context.Background(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

func unexport(t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Delete(context.Background(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
}

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

// wantEvent waits for a Warning Event (events.k8s.io) with the reason
// and a note containing note, regarding the object kind ns/name.
func wantEvent(c client.Client, ns, kind, name, reason, note string) func() error {
	return func() error {
		var list eventsv1.EventList
		if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, ev := range list.Items {
			if ev.Type == corev1.EventTypeWarning && ev.Reason == reason && ev.Regarding.Kind == kind && ev.Regarding.Name == name && strings.Contains(ev.Note, note) {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event %s regarding %s %s/%s with %q among %d", reason, kind, ns, name, note, len(list.Items))
	}
}
