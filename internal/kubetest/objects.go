package kubetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/kube"
)

// What the controllers' tests write into a cluster in place of its other
// actors: a user (Namespaces, Services, ServiceExports),
// kube-controller-manager's EndpointSlice controller (a Service's own
// slice) and the active gateway (the mirrored Cluster).

// Eventually polls check until it returns nil; it fails t with the last
// error after a minute (a hang, not a speed requirement).
func Eventually(t testing.TB, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
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

// Namespace creates namespace ns unless it exists.
func Namespace(t testing.TB, c client.Client, ns string) {
	t.Helper()
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
}

// Service creates ServiceObject(ns, name, headless, ports) (its ClusterIP
// assigned by the API server) and returns it as created.
func Service(t testing.TB, c client.Client, ns, name string, headless bool, ports map[string]int32) *corev1.Service {
	t.Helper()
	svc := ServiceObject(ns, name, headless, ports)
	if err := c.Create(context.Background(), svc); err != nil {
		t.Fatalf("create Service %s/%s: %v", ns, name, err)
	}
	return svc
}

// ServiceObject is a Service, headless or not, with the given named TCP
// ports in name order.
func ServiceObject(ns, name string, headless bool, ports map[string]int32) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, n := range slices.Sorted(maps.Keys(ports)) {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: n, Protocol: corev1.ProtocolTCP, Port: ports[n]})
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	return svc
}

// Pod is a backing pod as a Service's own EndpointSlice lists it.
type Pod struct {
	IP       string
	Hostname string // "": none
	Ready    bool
}

// LocalSlice writes (creates or replaces) LocalSliceObject(svc,
// targetPort, pods...).
func LocalSlice(t testing.TB, c client.Client, svc *corev1.Service, targetPort int32, pods ...Pod) {
	t.Helper()
	s := LocalSliceObject(svc, targetPort, pods...)
	ctx := context.Background()
	var have discoveryv1.EndpointSlice
	err := c.Get(ctx, client.ObjectKeyFromObject(s), &have)
	switch {
	case err == nil:
		s.ResourceVersion = have.ResourceVersion
		err = c.Update(ctx, s)
	case apierrors.IsNotFound(err):
		err = c.Create(ctx, s)
	}
	if err != nil {
		t.Fatalf("write EndpointSlice %s/%s: %v", s.Namespace, s.Name, err)
	}
}

// LocalSliceObject is the Service's own IPv4 EndpointSlice ("<name>-local")
// as kube-controller-manager's EndpointSlice controller writes it: every
// port of svc to targetPort (TCP), one endpoint per pod.
func LocalSliceObject(svc *corev1.Service, targetPort int32, pods ...Pod) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-local",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, p := range svc.Spec.Ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: new(p.Name), Protocol: new(corev1.ProtocolTCP), Port: new(targetPort)})
	}
	for _, p := range pods {
		ep := discoveryv1.Endpoint{Addresses: []string{p.IP}, Conditions: discoveryv1.EndpointConditions{
			Ready: new(p.Ready), Serving: new(p.Ready), Terminating: new(false)}}
		if p.Hostname != "" {
			ep.Hostname = new(p.Hostname)
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// Export creates the ServiceExport ns/name.
func Export(t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Create(context.Background(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatalf("export %s/%s: %v", ns, name, err)
	}
}

// Unexport deletes the ServiceExport ns/name.
func Unexport(t testing.TB, c client.Client, ns, name string) {
	t.Helper()
	if err := c.Delete(context.Background(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatalf("unexport %s/%s: %v", ns, name, err)
	}
}

// WantEvent returns a check (for Eventually) that a Warning Event
// (events.k8s.io) with reason and a note containing note regards the
// object kind ns/name.
func WantEvent(c client.Client, ns, kind, name, reason, note string) func() error {
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

// MirrorCluster writes (creates or replaces) the mirrored Cluster of
// cluster id in Causeway's namespace, as an active gateway does, with the
// lab's shared pod and service CIDRs (10.244.0.0/16, 10.96.0.0/16) and
// globalCIDRs.
func MirrorCluster(t testing.TB, c client.Client, id string, globalCIDRs ...string) {
	t.Helper()
	ctx := context.Background()
	cl := &causewayv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: kube.Namespace, Name: id}}
	err := c.Get(ctx, client.ObjectKeyFromObject(cl), cl)
	cl.Spec = causewayv1alpha1.ClusterSpec{ClusterID: id, PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"}, GlobalCIDRs: globalCIDRs}
	switch {
	case apierrors.IsNotFound(err):
		err = c.Create(ctx, cl)
	case err == nil:
		err = c.Update(ctx, cl)
	}
	if err != nil {
		t.Fatalf("write the mirrored Cluster %s: %v", id, err)
	}
}
