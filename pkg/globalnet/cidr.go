// Package globalnet is globalnet's pure policy and its broker claim. When
// clusters share pod and service CIDRs, each one is reached only through
// a global CIDR of the ClusterSet policy's supernet
// (pkg/addrpolicy.Policy): ClaimCIDR takes this cluster's in the broker
// (atomically, one GlobalCIDR object per range; run by the active
// gateway), NewLayout (layout.go) splits a global CIDR into health-check,
// pool and egress addresses and Allocator (alloc.go) hands out the pool's
// IP:port pairs and whole IPs, AssignIngress and its siblings (ingress.go) allocate the
// exported Services' global addresses inside it (run by the globalnet
// controller, pkg/globalnet/controller, which writes them as GlobalIngress
// objects), AssignEgress and its siblings (egress.go) the own egress IPs
// of labelled namespaces (written as GlobalEgress objects), and Rules
// turns those objects and the remote clusters' subnets into pkg/nat's
// desired netfilter state, which the active gateway applies. See
// README.md for the address plan.
package globalnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// ErrSupernetExhausted: every global CIDR of the supernet is claimed.
var ErrSupernetExhausted = errors.New("globalnet supernet exhausted")

// CIDRObjectName is the broker object name of the GlobalCIDR claiming p:
// "242.0.1.0-24" for 242.0.1.0/24 (a valid DNS subdomain).
func CIDRObjectName(p netip.Prefix) string {
	return p.Addr().String() + "-" + strconv.Itoa(p.Bits())
}

// ParseCIDRObjectName is the inverse of CIDRObjectName.
func ParseCIDRObjectName(name string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(strings.Replace(name, "-", "/", 1))
	if err != nil || !p.Addr().Is4() || p != p.Masked() || CIDRObjectName(p) != name {
		return netip.Prefix{}, fmt.Errorf("parse GlobalCIDR name %q: not <IPv4 network>-<bits>", name)
	}
	return p, nil
}

// blocks is the number of global CIDRs in the policy's supernet.
func blocks(pol addrpolicy.Policy) uint32 { return 1 << (pol.GlobalCIDRBits - pol.Supernet.Bits()) }

// block is the i-th global CIDR of the policy's supernet.
func block(pol addrpolicy.Policy, i uint32) netip.Prefix {
	b := pol.Supernet.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v := base + i<<(32-pol.GlobalCIDRBits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), pol.GlobalCIDRBits)
}

// ClaimedCIDRs reads every GlobalCIDR claim of the broker and returns those
// that count under the ClusterSet's policy: cluster ID → its global CIDRs,
// sorted. A claim counts when its name is a global CIDR of the policy (a
// block of exactly its size inside its supernet: the broker's admission
// refuses other names, and this check stands where admission is missing)
// and it is among its cluster's Quotas.GlobalCIDRs oldest claims (by
// creation time, then name): a member's further claims change nothing for
// anybody.
func ClaimedCIDRs(ctx context.Context, c client.Reader, pol addrpolicy.Policy) (map[string][]netip.Prefix, error) {
	var list v1alpha1.GlobalCIDRList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list GlobalCIDRs: %w", err)
	}
	type claim struct {
		p       netip.Prefix
		created time.Time
	}
	byCluster := map[string][]claim{}
	for _, o := range list.Items {
		p, err := ParseCIDRObjectName(o.Name)
		if err != nil || o.DeletionTimestamp != nil || !pol.IsGlobalCIDR(p) {
			continue
		}
		byCluster[o.Spec.ClusterID] = append(byCluster[o.Spec.ClusterID], claim{p, o.CreationTimestamp.Time})
	}
	out := map[string][]netip.Prefix{}
	for id, cs := range byCluster {
		slices.SortFunc(cs, func(a, b claim) int {
			return cmp.Or(a.created.Compare(b.created), addrpolicy.ComparePrefix(a.p, b.p))
		})
		for _, c := range cs[:min(len(cs), pol.Quotas.GlobalCIDRs)] {
			out[id] = append(out[id], c.p)
		}
		slices.SortFunc(out[id], addrpolicy.ComparePrefix)
	}
	return out, nil
}

// ClaimCIDR returns clusterID's global CIDR: the one it already holds in the
// broker (stable across restarts and gateway failovers), or a free one of
// the policy's supernet it claims now by creating its GlobalCIDR. Only the
// active gateway claims, so a cluster has one claim; should it hold more
// (two gateways active at once for a moment, or claims that do not count
// under the policy), the first that counts (ClaimedCIDRs) is kept and every
// other claim in its name released. The supernet must not overlap
// avoid (the cluster's own pod and service CIDRs). read may be a cache;
// writes go to the API server through w.
func ClaimCIDR(ctx context.Context, read client.Reader, w client.Writer, pol addrpolicy.Policy, avoid []netip.Prefix, clusterID string) (netip.Prefix, error) {
	for _, a := range avoid {
		if a.Overlaps(pol.Supernet) {
			return netip.Prefix{}, fmt.Errorf("the ClusterSet's globalnet supernet %s overlaps this cluster's %s", pol.Supernet, a)
		}
	}
	claims, err := ClaimedCIDRs(ctx, read, pol)
	if err != nil {
		return netip.Prefix{}, err
	}
	var list v1alpha1.GlobalCIDRList
	if err := read.List(ctx, &list); err != nil {
		return netip.Prefix{}, fmt.Errorf("list GlobalCIDRs: %w", err)
	}
	if own := claims[clusterID]; len(own) > 0 {
		keep := CIDRObjectName(own[0])
		for i := range list.Items {
			if o := &list.Items[i]; o.Spec.ClusterID == clusterID && o.Name != keep {
				if err := w.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
					return netip.Prefix{}, fmt.Errorf("release extra global CIDR claim %s: %w", o.Name, err)
				}
			}
		}
		return own[0], nil
	}
	taken := map[string]bool{}
	for _, o := range list.Items {
		taken[o.Name] = true
	}
	// First fit: the lowest free range. Two clusters claiming at once
	// may want the same one; the API server lets one create it and the
	// other moves on to the next.
	n := blocks(pol)
	for i := range n {
		p := block(pol, i)
		if taken[CIDRObjectName(p)] {
			continue
		}
		obj := &v1alpha1.GlobalCIDR{
			ObjectMeta: metav1.ObjectMeta{Name: CIDRObjectName(p), Labels: map[string]string{v1alpha1.LabelClusterID: clusterID}},
			Spec:       v1alpha1.GlobalCIDRSpec{ClusterID: clusterID},
		}
		switch err := w.Create(ctx, obj); {
		case err == nil:
			return p, nil
		case apierrors.IsAlreadyExists(err):
			continue // claimed by another cluster a moment ago
		default:
			return netip.Prefix{}, fmt.Errorf("claim global CIDR %s: %w", p, err)
		}
	}
	return netip.Prefix{}, fmt.Errorf("cluster %q: %w (%d ranges of /%d in %s)", clusterID, ErrSupernetExhausted, n, pol.GlobalCIDRBits, pol.Supernet)
}

// ReleaseCIDR deletes every GlobalCIDR clusterID holds (the cluster leaves).
func ReleaseCIDR(ctx context.Context, read client.Reader, w client.Writer, clusterID string) error {
	var list v1alpha1.GlobalCIDRList
	if err := read.List(ctx, &list); err != nil {
		return fmt.Errorf("list GlobalCIDRs: %w", err)
	}
	for _, o := range list.Items {
		if o.Spec.ClusterID != clusterID {
			continue
		}
		if err := w.Delete(ctx, &o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release global CIDR %s: %w", o.Name, err)
		}
	}
	return nil
}
