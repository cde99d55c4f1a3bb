package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/globalnet"
)

// Namespace egress: a namespace labelled causeway.dev/global-egress gets
// its own global egress IPs, kept in the cluster-scoped GlobalEgress
// named after it together with its pods' addresses. Requests of this
// controller name a namespace (no Namespace field).

// setupEgress builds the namespace egress controller.
func (c *Controller) setupEgress() error {
	byNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: o.GetNamespace()}}}
	})
	err := builder.ControllerManagedBy(c.mgr).
		Named("globalnet-egress").
		WithOptions(ctrlcontroller.Options{MaxConcurrentReconciles: c.cfg.Workers}).
		Watches(&corev1.Namespace{}, &handler.EnqueueRequestForObject{}).
		Watches(&corev1.Pod{}, byNamespace).
		Watches(&causewayv1alpha1.GlobalEgress{}, c.allocationObject()).
		Watches(&causewayv1alpha1.Cluster{}, handler.EnqueueRequestsFromMapFunc(c.onOwnClusterEgress),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(c.egressTrigger, &handler.EnqueueRequestForObject{})).
		Complete(c.reconciler("namespace", func(ctx context.Context, req reconcile.Request) (time.Duration, error) {
			return c.syncEgress(ctx, req.Name)
		}))
	if err != nil {
		return fmt.Errorf("build egress controller: %w", err)
	}
	return nil
}

// podAddresses reduces a cached Pod to what namespace egress reads.
func podAddresses(o any) (any, error) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return o, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{HostNetwork: p.Spec.HostNetwork},
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIPs: p.Status.PodIPs},
	}, nil
}

// onOwnClusterEgress maps this cluster's mirrored Cluster to every
// labelled namespace and every GlobalEgress (the global CIDR or the pod
// CIDRs may have changed).
func (c *Controller) onOwnClusterEgress(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != c.cfg.Namespace || o.GetName() != c.cfg.ClusterID {
		return nil
	}
	var out []reconcile.Request
	var nss corev1.NamespaceList
	if err := c.local.List(ctx, &nss, client.HasLabels{causewayv1alpha1.LabelGlobalEgress}); err == nil {
		for _, ns := range nss.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: ns.Name}})
		}
	}
	var ges causewayv1alpha1.GlobalEgressList
	if err := c.local.List(ctx, &ges); err == nil {
		for _, ge := range ges.Items {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: ge.Name}})
		}
	}
	return out
}

// syncEgress brings the GlobalEgress of namespace ns up to date:
// allocated while the namespace carries the label and this cluster has a
// global CIDR, released otherwise and deleted after the quarantine. It
// returns when to sync again without an event, 0 for never.
func (c *Controller) syncEgress(ctx context.Context, ns string) (time.Duration, error) {
	key := types.NamespacedName{Name: ns}
	have := &causewayv1alpha1.GlobalEgress{}
	switch err := c.local.Get(ctx, key, have); {
	case apierrors.IsNotFound(err):
		have = nil
	case err != nil:
		return 0, fmt.Errorf("get GlobalEgress: %w", err)
	}
	namespace := &corev1.Namespace{}
	switch err := c.local.Get(ctx, key, namespace); {
	case apierrors.IsNotFound(err):
		return c.releaseEgress(ctx, ns, have)
	case err != nil:
		return 0, fmt.Errorf("get Namespace: %w", err)
	}
	value, labelled := namespace.Labels[causewayv1alpha1.LabelGlobalEgress]
	if !labelled || namespace.DeletionTimestamp != nil {
		return c.releaseEgress(ctx, ns, have)
	}
	cidr, podCIDRs, ok, err := c.ownCluster(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		return c.releaseEgress(ctx, ns, have) // no global CIDR (yet): no GlobalEgress
	}
	var pods corev1.PodList
	if err := c.local.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return 0, fmt.Errorf("list Pods: %w", err)
	}
	want := globalnet.EgressPodsOf(pods.Items, podCIDRs)

	g := &c.alloc
	g.mu.Lock()
	a, err := c.allocator(ctx, cidr)
	if err != nil {
		g.mu.Unlock()
		return 0, err
	}
	ips := g.egress[ns]
	cond := metav1.Condition{Type: causewayv1alpha1.ConditionAllocated, Status: metav1.ConditionTrue, Reason: "Allocated"}
	n, err := globalnet.EgressIPCount(value)
	switch {
	case err != nil:
		cond.Reason = causewayv1alpha1.ReasonInvalidGlobalEgress
	case len(want) > globalnet.MaxEgressPods:
		cond.Reason = causewayv1alpha1.ReasonTooManyPods
		err = fmt.Errorf("%d pods, a GlobalEgress holds at most %d", len(want), globalnet.MaxEgressPods)
	default:
		ips, err = globalnet.AssignEgress(a, ns, ips, n)
		switch {
		case errors.Is(err, globalnet.ErrExhausted):
			cond.Reason = causewayv1alpha1.ReasonGlobalPoolExhausted
			g.waitingEgress[ns] = true
		case err != nil:
			g.mu.Unlock()
			return 0, err
		default:
			delete(g.waitingEgress, ns)
			g.egress[ns] = ips
		}
	}
	c.gauges()
	g.mu.Unlock()

	// On failure the object keeps the IPs it holds (none, or the previous
	// allocation, still reserved) and follows the pods.
	spec := causewayv1alpha1.GlobalEgressSpec{IPs: ips, Pods: addrStrings(want)}
	if cond.Reason == causewayv1alpha1.ReasonTooManyPods && have != nil {
		spec.Pods = have.Spec.Pods
	}
	if err != nil {
		cond.Status, cond.Message = metav1.ConditionFalse, truncate(err.Error(), 1000)
	} else {
		cond.Message = fmt.Sprintf("%d global egress IPs allocated in %s", len(ips), cidr)
	}
	var before *metav1.Condition
	if have != nil {
		before = meta.FindStatusCondition(have.Status.Conditions, causewayv1alpha1.ConditionAllocated)
	}
	if err := c.applyEgress(ctx, ns, have, spec, cond); err != nil {
		return 0, err
	}
	if cond.Status == metav1.ConditionFalse && (before == nil || before.Status != cond.Status || before.Reason != cond.Reason) {
		c.recorder.Eventf(namespace, nil, corev1.EventTypeWarning, cond.Reason, "Assign", "%s", cond.Message)
	}
	return 0, nil
}

// applyEgress creates or updates namespace ns's GlobalEgress with spec
// and cond.
func (c *Controller) applyEgress(ctx context.Context, ns string, have *causewayv1alpha1.GlobalEgress, spec causewayv1alpha1.GlobalEgressSpec, cond metav1.Condition) error {
	want := &causewayv1alpha1.GlobalEgress{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	var old client.Object
	if have != nil {
		want, old = have.DeepCopy(), have
	}
	want.Spec = spec
	meta.SetStatusCondition(&want.Status.Conditions, cond)
	return c.write(ctx, "GlobalEgress", old, want)
}

// releaseEgress marks namespace ns's GlobalEgress released (the gateway
// stops translating) and deletes it once the quarantine has passed,
// freeing its IPs.
func (c *Controller) releaseEgress(ctx context.Context, ns string, have *causewayv1alpha1.GlobalEgress) (time.Duration, error) {
	free := func(g *allocation) {
		if ips, ok := g.egress[ns]; ok && g.pool != nil {
			globalnet.FreeEgress(g.pool, ns, ips)
			delete(g.egress, ns)
		}
		delete(g.waitingEgress, ns)
	}
	if have == nil || have.DeletionTimestamp != nil {
		return 0, c.forget(ctx, types.NamespacedName{Name: ns}, &causewayv1alpha1.GlobalEgress{},
			func(g *allocation) bool { _, ok := g.egress[ns]; return ok }, free)
	}
	mark := func() client.Object {
		upd := have.DeepCopy()
		upd.Spec.ReleasedAt = &metav1.MicroTime{Time: time.Now()}
		return upd
	}
	return c.quarantine(ctx, "GlobalEgress", have, have.Spec.ReleasedAt, mark, free)
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, 0, len(as))
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}
