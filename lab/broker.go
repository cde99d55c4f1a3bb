package lab

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
)

// ClusterSetPolicy is the lab's ClusterSet policy, which joinBroker
// writes into its broker: the defaults (addrpolicy.DefaultPolicy), which
// hold the lab's CIDRs (10.x and fd00:…, Topology) and its globalnet plan
// (a /24 of 242.0.0.0/8 per cluster).
func (s *State) ClusterSetPolicy() addrpolicy.Policy { return addrpolicy.DefaultPolicy() }

// joinBroker sets the broker up as `causewayctl deploy-broker` does
// (pkg/broker): the CRDs, the lab's ClusterSetPolicy, the admission
// policies and quotas (EnsureClusterSet), then every cluster's broker
// identity (namespace, quota, ServiceAccount, RBAC, token;
// EnsureClusterIdentity); once the broker enforces the quotas
// (EnforceQuotas) it announces every cluster in order and returns each
// one's kubeconfig (the broker on the root namespace's loopback) by
// cluster name. Only then (installCauseway) are the credentials handed
// to the daemons: when two clusters' CIDRs overlap, the ClusterSet keeps
// the older claim (of the same second: the lower cluster ID), so c1's
// CIDRs must be claimed before any gateway claims c2's (c1 before c2,
// as users of the lab expect; the gateways adopt these claims and
// update the Cluster objects later).
func (s *State) joinBroker(ctx context.Context) (map[string][]byte, error) {
	admin, err := s.RESTConfig("broker")
	if err != nil {
		return nil, err
	}
	bc, err := s.Client("broker")
	if err != nil {
		return nil, err
	}
	if err := broker.EnsureClusterSet(ctx, admin, s.ClusterSetPolicy()); err != nil {
		return nil, err
	}
	ids := map[string][]byte{}
	for _, c := range s.Members() {
		raw, err := broker.EnsureClusterIdentity(ctx, admin, c)
		if err != nil {
			return nil, fmt.Errorf("broker identity of %s: %w", c, err)
		}
		ids[c] = raw
	}
	if err := broker.EnforceQuotas(ctx, admin, s.ClusterSetPolicy(), s.Members(), 2*time.Minute); err != nil {
		return nil, err
	}
	for _, c := range s.Members() {
		if err := s.announce(ctx, bc, c); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

func (s *State) announce(ctx context.Context, bc client.Client, cluster string) error {
	c, _ := s.Topology.Cluster(cluster)
	obj := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(cluster), Name: cluster},
		Spec: v1alpha1.ClusterSpec{ClusterID: cluster,
			PodCIDRs: prefixStrings(c.PodCIDRs()), ServiceCIDRs: prefixStrings(c.ServiceCIDRs())},
	}
	if err := bc.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("announce cluster %s in the broker: %w", cluster, err)
	}
	// The CIDR claims the gateway makes (pkg/gateway claimCIDRs).
	for _, p := range addrpolicy.DirectCIDRs(append(c.PodCIDRs(), c.ServiceCIDRs()...), s.Globalnet) {
		if err := bc.Create(ctx, broker.NewCIDRClaim(cluster, p)); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("claim %s for cluster %s in the broker: %w", p, cluster, err)
		}
	}
	return nil
}
