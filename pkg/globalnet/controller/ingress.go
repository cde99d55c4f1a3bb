package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/globalnet"
)

// allocation is this cluster's global-address allocation: one
// globalnet.Allocator for the cluster's global CIDR, kept for the leadership
// term (reconciles run only on the leader, and losing leadership ends
// the process), seeded once from a live List of the GlobalIngress objects
// — the persisted allocations — before anything new is handed out. A
// rebuild per sync would replay every Service's allocation on every sync
// (O(n²) at 10 000 Services); this way a sync costs O(ports + pods) of
// its own Service. If the global CIDR changes, the allocator is rebuilt
// for the new CIDR; allocations that do not fit it are allocated anew.
type allocation struct {
	mu   sync.Mutex
	cidr netip.Prefix
	pool *globalnet.Allocator
	// held is what pool holds per Service: the spec of its GlobalIngress
	// (released ones included, until deleted after the quarantine).
	held map[types.NamespacedName]causewayv1alpha1.GlobalIngressSpec
	// egress is what pool holds per namespace with its own egress IPs:
	// the IPs of its GlobalEgress (released ones included, until deleted
	// after the quarantine).
	egress map[string][]string
	// waiting are Services, waitingEgress namespaces whose allocation
	// found the pool exhausted; they are queued again when addresses are
	// freed or an allocation object is updated or deleted.
	waiting       map[types.NamespacedName]bool
	waitingEgress map[string]bool
}

// ownCluster is this cluster's global CIDR (the first IPv4 one) and pod
// CIDRs from its mirrored Cluster; ok is false while it has no global
// CIDR.
func (c *Controller) ownCluster(ctx context.Context) (global netip.Prefix, podCIDRs []netip.Prefix, ok bool, err error) {
	var cl causewayv1alpha1.Cluster
	switch err := c.local.Get(ctx, types.NamespacedName{Namespace: c.cfg.Namespace, Name: c.cfg.ClusterID}, &cl); {
	case apierrors.IsNotFound(err):
		return netip.Prefix{}, nil, false, nil
	case err != nil:
		return netip.Prefix{}, nil, false, fmt.Errorf("get own Cluster: %w", err)
	}
	for _, s := range cl.Spec.GlobalCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Is4() {
			return p.Masked(), addrpolicy.ValidPrefixes(cl.Spec.PodCIDRs), true, nil
		}
	}
	return netip.Prefix{}, nil, false, nil
}

// allocator returns the allocator of cidr, building and seeding it on
// first use (or when the CIDR changed). Call with c.alloc.mu held.
func (c *Controller) allocator(ctx context.Context, cidr netip.Prefix) (*globalnet.Allocator, error) {
	g := &c.alloc
	if g.pool != nil && g.cidr == cidr {
		return g.pool, nil
	}
	a, err := globalnet.NewIngressAllocator(cidr)
	if err != nil {
		return nil, fmt.Errorf("global CIDR %s: %w", cidr, err)
	}
	// A live List, not the cache: the previous leader's last writes must
	// be replayed before anything is allocated.
	var list causewayv1alpha1.GlobalIngressList
	if err := c.reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list GlobalIngresses: %w", err)
	}
	var egresses causewayv1alpha1.GlobalEgressList
	if err := c.reader.List(ctx, &egresses); err != nil {
		return nil, fmt.Errorf("list GlobalEgresses: %w", err)
	}
	held := make(map[types.NamespacedName]causewayv1alpha1.GlobalIngressSpec, len(list.Items))
	for _, gi := range list.Items {
		if err := globalnet.ReplayIngress(a, gi.Namespace, gi.Name, gi.Spec); err != nil {
			c.log.Warn("global addresses not replayed, allocating anew", "service", client.ObjectKeyFromObject(&gi), "err", err)
			continue
		}
		held[client.ObjectKeyFromObject(&gi)] = gi.Spec
	}
	egress := make(map[string][]string, len(egresses.Items))
	for _, ge := range egresses.Items {
		if err := globalnet.ReplayEgress(a, ge.Name, ge.Spec.IPs); err != nil {
			c.log.Warn("global egress IPs not replayed, allocating anew", "namespace", ge.Name, "err", err)
			continue
		}
		egress[ge.Name] = ge.Spec.IPs
	}
	c.log.Info("allocator ready", "cidr", cidr, "replayed", len(held), "replayedEgress", len(egress))
	g.cidr, g.pool, g.held, g.egress = cidr, a, held, egress
	c.gauges()
	return a, nil
}

// syncIngress keeps the GlobalIngress of key: allocated while the Service
// is exported (svc non-nil) and this cluster has a global CIDR, released
// (releasedAt) otherwise and deleted after the quarantine; it returns
// when to sync again without an event (a quarantine ending), 0 for never.
func (c *Controller) syncIngress(ctx context.Context, key types.NamespacedName, se *mcsv1beta1.ServiceExport, svc *corev1.Service, local []discoveryv1.EndpointSlice) (requeue time.Duration, err error) {
	have := &causewayv1alpha1.GlobalIngress{}
	switch err := c.local.Get(ctx, key, have); {
	case apierrors.IsNotFound(err):
		have = nil
	case err != nil:
		return 0, fmt.Errorf("get GlobalIngress: %w", err)
	}
	if svc == nil {
		return c.releaseIngress(ctx, key, have)
	}
	cidr, podCIDRs, ok, err := c.ownCluster(ctx)
	if err != nil {
		return 0, err
	}
	if !ok {
		return c.releaseIngress(ctx, key, have) // no global CIDR (yet): no GlobalIngress
	}
	want := globalnet.IngressWantFor(svc, local, podCIDRs)

	g := &c.alloc
	g.mu.Lock()
	a, err := c.allocator(ctx, cidr)
	if err != nil {
		g.mu.Unlock()
		return 0, err
	}
	spec, err := globalnet.AssignIngress(a, key.Namespace, key.Name, g.held[key], want)
	exhausted := errors.Is(err, globalnet.ErrExhausted)
	switch {
	case exhausted:
		g.waiting[key] = true
	case err != nil:
		g.mu.Unlock()
		return 0, err
	default:
		delete(g.waiting, key)
		g.held[key] = spec
	}
	c.gauges()
	g.mu.Unlock()

	cond := metav1.Condition{Type: causewayv1alpha1.ConditionAllocated, Status: metav1.ConditionTrue, Reason: "Allocated",
		Message: "global addresses allocated in " + cidr.String()}
	if exhausted {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, causewayv1alpha1.ReasonGlobalPoolExhausted, truncate(err.Error(), 1000)
		// The object keeps what it holds (nothing, or a complete earlier
		// allocation, still reserved); Allocated=False keeps it out of the
		// MCS controller's record meanwhile (mcs.GlobalAddressesOf), so
		// importers treat this cluster as unreachable for the Service.
		if have != nil {
			spec = have.Spec
		}
	}
	wasExhausted := have != nil && meta.IsStatusConditionFalse(have.Status.Conditions, causewayv1alpha1.ConditionAllocated)
	if err := c.apply(ctx, key, have, spec, cond); err != nil {
		return 0, err
	}
	if exhausted && !wasExhausted && se != nil {
		c.recorder.Eventf(se, nil, corev1.EventTypeWarning, causewayv1alpha1.ReasonGlobalPoolExhausted, "Assign", "%s", cond.Message)
	}
	return 0, nil
}

// apply creates or updates key's GlobalIngress with spec and cond.
func (c *Controller) apply(ctx context.Context, key types.NamespacedName, have *causewayv1alpha1.GlobalIngress, spec causewayv1alpha1.GlobalIngressSpec, cond metav1.Condition) error {
	want := &causewayv1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	var old client.Object
	if have != nil {
		want, old = have.DeepCopy(), have
	}
	want.Spec = spec
	meta.SetStatusCondition(&want.Status.Conditions, cond)
	return c.write(ctx, "GlobalIngress", old, want)
}

// write creates want (an allocation object) when have is nil, else
// updates have to want unless they are equal.
func (c *Controller) write(ctx context.Context, kind string, have, want client.Object) error {
	op := "create"
	var err error
	switch {
	case have == nil:
		err = c.local.Create(ctx, want)
	case equality.Semantic.DeepEqual(have, want):
		return nil
	default:
		op = "update"
		err = c.local.Update(ctx, want)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, kind, err)
	}
	c.metrics.apiWrites.WithLabelValues(op).Inc()
	return nil
}

// releaseIngress marks have released (the gateway stops translating)
// and deletes it once the quarantine has passed, freeing its addresses.
func (c *Controller) releaseIngress(ctx context.Context, key types.NamespacedName, have *causewayv1alpha1.GlobalIngress) (requeue time.Duration, err error) {
	free := func(g *allocation) {
		if h, ok := g.held[key]; ok && g.pool != nil {
			globalnet.FreeIngress(g.pool, key.Namespace, key.Name, h)
			delete(g.held, key)
		}
		delete(g.waiting, key)
	}
	if have == nil || have.DeletionTimestamp != nil {
		return 0, c.forget(ctx, key, &causewayv1alpha1.GlobalIngress{}, func(g *allocation) bool { _, ok := g.held[key]; return ok }, free)
	}
	mark := func() client.Object {
		upd := have.DeepCopy()
		upd.Spec.ReleasedAt = &metav1.MicroTime{Time: time.Now()}
		return upd
	}
	return c.quarantine(ctx, "GlobalIngress", have, have.Spec.ReleasedAt, mark, free)
}

// quarantine is the release of an allocation object (a GlobalIngress or
// GlobalEgress, have): marked released (releasedAt: mark returns the
// object to write) so the gateway stops translating, and deleted once the
// quarantine after releasedAt has passed, when free gives its addresses
// back.
func (c *Controller) quarantine(ctx context.Context, kind string, have client.Object, releasedAt *metav1.MicroTime, mark func() client.Object, free func(*allocation)) (requeue time.Duration, err error) {
	if releasedAt == nil {
		if err := c.local.Update(ctx, mark()); err != nil {
			return 0, fmt.Errorf("release %s: %w", kind, err)
		}
		c.metrics.apiWrites.WithLabelValues("update").Inc()
		return c.cfg.Quarantine, nil
	}
	if left := time.Until(releasedAt.Add(c.cfg.Quarantine)); left > 0 {
		return left, nil
	}
	// The lock spans the delete: the delete event queues the Services
	// and namespaces waiting for room, which must find the addresses free.
	g := &c.alloc
	g.mu.Lock()
	defer g.mu.Unlock()
	uid := have.GetUID()
	if err := c.local.Delete(ctx, have, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("delete %s: %w", kind, err)
	}
	c.metrics.apiWrites.WithLabelValues("delete").Inc()
	free(g)
	c.gauges()
	c.requeueWaiting()
	return 0, nil
}

// forget frees the addresses of an allocation object (obj's kind, key)
// that someone else deleted (its namespace went, or by hand), once the
// API server confirms it is gone (the cache may not have seen our own
// create yet). holds reports whether the allocator holds addresses for
// it, free gives them back.
func (c *Controller) forget(ctx context.Context, key types.NamespacedName, obj client.Object, holds func(*allocation) bool, free func(*allocation)) error {
	g := &c.alloc
	g.mu.Lock()
	defer g.mu.Unlock()
	if !holds(g) || g.pool == nil {
		return nil
	}
	switch err := c.reader.Get(ctx, key, obj); {
	case err == nil:
		return nil // still there: its events bring us back
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get %T: %w", obj, err)
	}
	free(g)
	c.gauges()
	c.requeueWaiting()
	return nil
}

// requeueWaiting queues the Services and namespaces waiting for room in
// the global pool (addresses were just freed); call with c.alloc.mu
// held. The events go through the trigger channels from a goroutine, so
// a full channel never blocks a sync.
func (c *Controller) requeueWaiting() {
	g := &c.alloc
	if len(g.waiting)+len(g.waitingEgress) == 0 {
		return
	}
	services := make([]*causewayv1alpha1.GlobalIngress, 0, len(g.waiting))
	for k := range g.waiting {
		services = append(services, &causewayv1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}})
	}
	namespaces := make([]*causewayv1alpha1.GlobalEgress, 0, len(g.waitingEgress))
	for ns := range g.waitingEgress {
		namespaces = append(namespaces, &causewayv1alpha1.GlobalEgress{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	go func() {
		for _, o := range services {
			c.trigger <- event.GenericEvent{Object: o}
		}
		for _, o := range namespaces {
			c.egressTrigger <- event.GenericEvent{Object: o}
		}
	}()
}

// wakeWaiting queues everything waiting for room: an allocation object
// was updated (it may hold less) or deleted.
func (c *Controller) wakeWaiting() {
	c.alloc.mu.Lock()
	defer c.alloc.mu.Unlock()
	c.requeueWaiting()
}

// gauges updates the allocation gauges; call with c.alloc.mu held.
func (c *Controller) gauges() {
	c.metrics.ingresses.Set(float64(len(c.alloc.held)))
	c.metrics.egresses.Set(float64(len(c.alloc.egress)))
	c.metrics.waiting.Set(float64(len(c.alloc.waiting) + len(c.alloc.waitingEgress)))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
