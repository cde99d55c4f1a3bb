package gateway

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/broker"
)

// ErrKeyInUse is returned by a sync whose tunnel public key the broker
// holds a TunnelKey for in another cluster's name: the gateway does not
// publish that key (every remote would refuse it, ReasonKeyInUse).
var ErrKeyInUse = errors.New("tunnel public key claimed by another cluster")

// keyed reports whether the cable driver authenticates peers by public
// key (cable.Kind.Keyed): only those claim their keys in the broker and
// check the remotes'.
func (c Config) keyed() bool { return c.Drivers[c.CableDriver].Keyed }

// claimKey makes the broker hold the claim on key (this node's tunnel
// public key, as published) in this cluster's name, before the Endpoint
// announcing it is published: a TunnelKey named broker.TunnelKeyName(key),
// labelled with the cluster and this node. The first claim wins: a key
// another cluster claimed is ErrKeyInUse. Once the claim holds, this
// node's claims on other keys (left by a key rotation) are released;
// the claims of the cluster's other gateway nodes, each with its own key,
// are never touched.
func (e *Engine) claimKey(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	name := broker.TunnelKeyName(key)
	have := &v1alpha1.TunnelKey{}
	err := e.broker.Get(ctx, client.ObjectKey{Name: name}, have)
	if apierrors.IsNotFound(err) {
		want := &v1alpha1.TunnelKey{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1alpha1.LabelClusterID: e.cfg.ClusterID, v1alpha1.LabelNode: e.cfg.NodeName}},
			Spec:       v1alpha1.TunnelKeySpec{ClusterID: e.cfg.ClusterID, PublicKey: key},
		}
		err = e.broker.Create(ctx, want)
		switch {
		case err == nil:
			have = want
			e.log.Info("claimed the tunnel key in the broker", "tunnelKey", name)
		case apierrors.IsAlreadyExists(err):
			// Claimed since the cache was filled: whose is it?
			err = e.brokerAPI.Get(ctx, client.ObjectKey{Name: name}, have)
		}
	}
	if err != nil {
		return fmt.Errorf("claim tunnel key %s in the broker: %w", name, err)
	}
	if have.Spec.ClusterID != e.cfg.ClusterID || have.Spec.PublicKey != key {
		return fmt.Errorf("%w: TunnelKey %s (public key %s) is claimed by cluster %q in the broker", ErrKeyInUse, name, key, have.Spec.ClusterID)
	}
	var mine v1alpha1.TunnelKeyList
	if err := e.broker.List(ctx, &mine, client.MatchingLabels{v1alpha1.LabelClusterID: e.cfg.ClusterID, v1alpha1.LabelNode: e.cfg.NodeName}); err != nil {
		return fmt.Errorf("list this node's tunnel keys in the broker: %w", err)
	}
	for i := range mine.Items {
		if k := &mine.Items[i]; k.Name != name {
			if err := e.broker.Delete(ctx, k); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("release stale tunnel key %s in the broker: %w", k.Name, err)
			}
			e.log.Info("released a stale tunnel key of this node in the broker", "tunnelKey", k.Name)
		}
	}
	return nil
}

// keyOwners reads every tunnel key claim from the broker cache.
func (e *Engine) keyOwners(ctx context.Context) (map[string]string, error) {
	var keys v1alpha1.TunnelKeyList
	if err := e.broker.List(ctx, &keys); err != nil {
		return nil, fmt.Errorf("list broker tunnel keys: %w", err)
	}
	return broker.KeyOwners(keys.Items), nil
}

// noteKeyInUse records the outcome of the term's last claim (msg: why the
// key is not this cluster's; empty: claimed) for the Gateway status, and
// on a change to "in use" emits a Warning Event TunnelKeyInUse on this
// node's Gateway.
func (e *Engine) noteKeyInUse(ctx context.Context, t *activeTerm, msg string) {
	if msg == t.keyInUse {
		return
	}
	t.keyInUse = msg
	if msg == "" {
		return
	}
	gw := &v1alpha1.Gateway{}
	if e.local.Get(ctx, client.ObjectKey{Namespace: e.cfg.Namespace, Name: e.cfg.NodeName}, gw) == nil {
		e.recorder.Event(gw, corev1.EventTypeWarning, "TunnelKeyInUse", msg)
	}
}
