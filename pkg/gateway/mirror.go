package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// mirror makes the local namespace hold exactly the broker's Clusters and
// Endpoints (own cluster included), each with its Valid condition. A
// remote's Valid Endpoint is mirrored with the subnets the policy accepted
// as its spec.subnets (those the cable routes: a globalnet cluster's IPv6
// subnets left out by addrpolicy rule 8 are not among them), so the route
// agents and the MCS controller, which follow the mirror, reach exactly
// what the tunnel carries. A refusal that is new or changed also gets a
// Warning Event on the mirrored object. Errors for one object do not stop
// the others.
func (e *Engine) mirror(ctx context.Context, remotes []Remote, d Desired) error {
	verdicts := map[string]ClusterState{}
	for _, c := range d.Clusters {
		verdicts[c.ClusterID] = c
	}
	routed := map[string][]string{}
	for _, c := range d.Connections {
		routed[c.ClusterID] = prefixStrings(c.Subnets)
	}
	ns := e.cfg.Namespace
	var errs []error
	wantCl, wantEp := map[string]bool{}, map[string]bool{}
	// This cluster's own objects first: the route agents follow its
	// Endpoint to the active gateway.
	ordered := slices.Clone(remotes)
	slices.SortStableFunc(ordered, func(a, b Remote) int {
		return cmp.Compare(boolInt(a.ClusterID != e.cfg.ClusterID), boolInt(b.ClusterID != e.cfg.ClusterID))
	})
	for _, r := range ordered {
		st := verdicts[r.ClusterID]
		if r.Endpoint != nil && st.Endpoint != nil {
			wantEp[r.ClusterID] = true
			cond := st.Endpoint.Condition(0)
			spec := *r.Endpoint
			if subs, ok := routed[r.ClusterID]; ok {
				spec.Subnets = subs
			}
			changed, err := upsert(ctx, e.local, endpointKind, ns, r.ClusterID, spec, &cond)
			if err != nil {
				errs = append(errs, err)
			} else if changed {
				e.event(ctx, &v1alpha1.Endpoint{}, r.ClusterID, *st.Endpoint)
			}
		}
		if r.Cluster != nil && st.Cluster != nil {
			wantCl[r.ClusterID] = true
			cond := st.Cluster.Condition(0)
			changed, err := upsert(ctx, e.local, clusterKind, ns, r.ClusterID, *r.Cluster, &cond)
			if err != nil {
				errs = append(errs, err)
			} else if changed {
				e.event(ctx, &v1alpha1.Cluster{}, r.ClusterID, *st.Cluster)
			}
		}
	}
	// Remove mirrors of objects gone from the broker.
	var cls v1alpha1.ClusterList
	if err := e.local.List(ctx, &cls, client.InNamespace(ns)); err != nil {
		errs = append(errs, fmt.Errorf("list local clusters: %w", err))
	}
	for i := range cls.Items {
		if !wantCl[cls.Items[i].Name] {
			if err := e.local.Delete(ctx, &cls.Items[i]); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete local cluster %s: %w", cls.Items[i].Name, err))
			}
		}
	}
	var eps v1alpha1.EndpointList
	if err := e.local.List(ctx, &eps, client.InNamespace(ns)); err != nil {
		errs = append(errs, fmt.Errorf("list local endpoints: %w", err))
	}
	for i := range eps.Items {
		if !wantEp[eps.Items[i].Name] {
			if err := e.local.Delete(ctx, &eps.Items[i]); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete local endpoint %s: %w", eps.Items[i].Name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mirror broker objects: %w", err)
	}
	return nil
}

// event records v on the mirrored object: Warning for a refusal, Normal
// when an object becomes valid.
func (e *Engine) event(ctx context.Context, obj client.Object, name string, v Verdict) {
	if err := e.local.Get(ctx, client.ObjectKey{Namespace: e.cfg.Namespace, Name: name}, obj); err != nil {
		return
	}
	if v.Valid {
		e.recorder.Event(obj, corev1.EventTypeNormal, v.Reason, "accepted: programmed on the active gateway")
		return
	}
	e.recorder.Event(obj, corev1.EventTypeWarning, v.Reason, "refused: "+v.Message)
	e.log.Warn("refused remote object", "kind", fmt.Sprintf("%T", obj), "cluster", name, "reason", v.Reason, "message", v.Message)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
