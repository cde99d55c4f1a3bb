package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
)

// directCIDRs are this cluster's CIDRs that remotes reach directly, each
// claimed in the broker (addrpolicy.DirectCIDRs).
func (e *Engine) directCIDRs(t *activeTerm) []netip.Prefix {
	return addrpolicy.DirectCIDRs(e.cfg.subnets(), t.global != nil)
}

// claimCIDRs makes this cluster's CIDRClaims in its broker namespace the
// claims of direct: it creates the missing ones (a claim already held
// keeps its creation time, the age the ClusterSet settles overlaps by)
// and deletes those of CIDRs no longer announced (released: a CIDR
// claimed again later is as young as its new claim). It reads through
// e.broker's cache, so a sync that changes nothing makes no request.
func (e *Engine) claimCIDRs(ctx context.Context, direct []netip.Prefix) error {
	ns := brokerNamespace(e.cfg.ClusterID)
	var have v1alpha1.CIDRClaimList
	if err := e.broker.List(ctx, &have, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list CIDR claims of %s: %w", ns, err)
	}
	want := map[string]netip.Prefix{}
	for _, p := range direct {
		want[addrpolicy.CIDRClaimName(p)] = p
	}
	for i := range have.Items {
		c := &have.Items[i]
		if p, ok := want[c.Name]; ok && c.Spec.CIDR == p.String() && c.Spec.ClusterID == e.cfg.ClusterID {
			delete(want, c.Name)
			continue
		}
		if err := e.broker.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release CIDR claim %s/%s: %w", ns, c.Name, err)
		}
		e.log.Info("released CIDR claim", "name", c.Name, "cidr", c.Spec.CIDR)
	}
	for name, p := range want {
		c := broker.NewCIDRClaim(e.cfg.ClusterID, p)
		// AlreadyExists: claimed meanwhile (another candidate's term, or
		// a cache behind); a claim of ours under that name that was
		// being deleted is created at the next sync.
		err := e.broker.Create(ctx, c)
		switch {
		case err == nil:
			e.log.Info("claimed CIDR", "name", name, "cidr", p)
		case !apierrors.IsAlreadyExists(err):
			return fmt.Errorf("claim CIDR %s in %s: %w", p, ns, err)
		}
	}
	return nil
}

// readCIDRClaims returns every member's CIDR claims from the broker
// cache: cluster ID → claimed CIDR → creation time, never nil. A claim
// counts only in a member namespace cluster-<id>, with spec.clusterID
// <id>, a canonical spec.cidr and the name addrpolicy.CIDRClaimName of
// it (the broker's admission refuses other claims of members; this check
// stands where it is missing), and not being deleted.
func (e *Engine) readCIDRClaims(ctx context.Context) (map[string]map[netip.Prefix]time.Time, error) {
	var list v1alpha1.CIDRClaimList
	if err := e.broker.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list broker CIDR claims: %w", err)
	}
	return cidrClaims(list.Items), nil
}

// cidrClaims is readCIDRClaims' reading of a list.
func cidrClaims(items []v1alpha1.CIDRClaim) map[string]map[netip.Prefix]time.Time {
	out := map[string]map[netip.Prefix]time.Time{}
	for _, c := range items {
		id, ok := clusterIDFromNamespace(c.Namespace)
		if !ok || c.Spec.ClusterID != id || c.DeletionTimestamp != nil {
			continue
		}
		p, err := addrpolicy.ParseCIDRClaimName(c.Name)
		if err != nil || p.String() != c.Spec.CIDR {
			continue
		}
		if out[id] == nil {
			out[id] = map[netip.Prefix]time.Time{}
		}
		out[id][p] = c.CreationTimestamp.Time
	}
	return out
}
