package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// globalAddresses returns the global addresses to publish in key's
// record: what its GlobalIngress holds (mcs.GlobalAddressesOf). The
// globalnet controller allocates them and writes the object; without one
// (no global CIDR, globalnet off, not allocated yet or the pool
// exhausted) the record carries none, and importers treat this cluster
// as unreachable for the Service.
func (c *Controller) globalAddresses(ctx context.Context, key types.NamespacedName) (causewayv1alpha1.GlobalIngressSpec, bool, error) {
	var gi causewayv1alpha1.GlobalIngress
	switch err := c.local.Get(ctx, key, &gi); {
	case apierrors.IsNotFound(err):
		return causewayv1alpha1.GlobalIngressSpec{}, false, nil
	case err != nil:
		return causewayv1alpha1.GlobalIngressSpec{}, false, fmt.Errorf("get GlobalIngress: %w", err)
	}
	spec, ok := mcs.GlobalAddressesOf(&gi)
	return spec, ok, nil
}

// reach is how this cluster reaches cluster id, from the Endpoint object
// the gateway mirrors into the Causeway namespace.
func (c *Controller) reach(ctx context.Context, id string) mcs.Reach {
	var r mcs.Reach
	key := types.NamespacedName{Namespace: c.cfg.Namespace, Name: id}
	var ep causewayv1alpha1.Endpoint
	switch err := c.local.Get(ctx, key, &ep); {
	case apierrors.IsNotFound(err):
		r.NoTunnel = "no gateway endpoint of the cluster is known here"
	case err != nil:
		r.NoTunnel = "cannot read its gateway endpoint: " + err.Error()
	default:
		valid := meta.FindStatusCondition(ep.Status.Conditions, causewayv1alpha1.ConditionValid)
		switch {
		case valid == nil:
			r.NoTunnel = "its gateway endpoint has not been validated"
		case valid.Status != metav1.ConditionTrue:
			r.NoTunnel = fmt.Sprintf("its gateway endpoint is not valid (%s: %s)", valid.Reason, valid.Message)
		default:
			r.Tunnel = true
			r.Subnets = addrpolicy.ValidPrefixes(ep.Spec.Subnets)
		}
	}
	return r
}

// onMirror maps a mirrored Cluster or Endpoint of another cluster (named
// by cluster ID) to every Service it exports: its reachability changed.
// This cluster's own mirror concerns the globalnet controller, not this
// one.
func (c *Controller) onMirror(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != c.cfg.Namespace || o.GetName() == c.cfg.ClusterID {
		return nil
	}
	var out []reconcile.Request
	for _, key := range c.brokerStores.recordsOf(broker.Namespace(o.GetName()), "") {
		out = append(out, reconcile.Request{NamespacedName: key})
	}
	return out
}
