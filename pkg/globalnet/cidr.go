// Package globalnet is the gateway's globalnet half. When clusters share
// pod and service CIDRs, each one is reached only through a global CIDR of
// the clusterset supernet: Claim takes this cluster's in the broker
// (atomically, one GlobalCIDR object per range), and Rules turns the
// cluster's GlobalIngress objects (written by the MCS controller) and the
// remote clusters' subnets into pkg/nat's desired netfilter state, which
// the active gateway applies. See README.md for the address plan.
package globalnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// Defaults of the clusterset's global address plan.
const (
	// DefaultSupernet is the clusterset supernet global CIDRs come from.
	// It lies in 240.0.0.0/4 (never routed on the Internet) beside the
	// clusterset VIP range (243.0.0.0/12) and the route agent's overlay
	// addresses (241.0.0.0/8).
	DefaultSupernet = addrpolicy.DefaultSupernet
	// DefaultCIDRBits is the size of one cluster's global CIDR.
	DefaultCIDRBits = 24
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

// Plan is the clusterset's global address plan.
type Plan struct {
	// Supernet holds every cluster's global CIDR.
	Supernet netip.Prefix
	// Bits is the prefix length of one cluster's global CIDR.
	Bits int
}

// ParsePlan checks a supernet and a per-cluster size, and that the
// supernet overlaps none of avoid (the clusterset VIP range, the local
// pod and service CIDRs).
func ParsePlan(supernet string, bits int, avoid ...netip.Prefix) (Plan, error) {
	p, err := netip.ParsePrefix(supernet)
	if err != nil {
		return Plan{}, fmt.Errorf("supernet: %w", err)
	}
	switch {
	case !p.Addr().Is4():
		return Plan{}, fmt.Errorf("supernet %s: only IPv4 is supported", p)
	case p != p.Masked():
		return Plan{}, fmt.Errorf("supernet %s has host bits set", p)
	case bits < p.Bits() || bits > 29:
		return Plan{}, fmt.Errorf("global CIDR size /%d: must lie between the supernet's /%d and /29", bits, p.Bits())
	case bits-p.Bits() > 20:
		return Plan{}, fmt.Errorf("global CIDR size /%d: more than 2^20 ranges in supernet %s", bits, p)
	}
	for _, a := range avoid {
		if a.Overlaps(p) {
			return Plan{}, fmt.Errorf("supernet %s overlaps %s", p, a)
		}
	}
	return Plan{Supernet: p, Bits: bits}, nil
}

// size is the number of global CIDRs in the supernet.
func (pl Plan) size() uint32 { return 1 << (pl.Bits - pl.Supernet.Bits()) }

// block is the i-th global CIDR of the supernet.
func (pl Plan) block(i uint32) netip.Prefix {
	b := pl.Supernet.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v := base + i<<(32-pl.Bits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), pl.Bits)
}

// Claims reads every GlobalCIDR claim of the broker: cluster ID → its
// global CIDRs, sorted. Objects whose name is not a CIDR are ignored.
func Claims(ctx context.Context, c client.Reader) (map[string][]netip.Prefix, error) {
	var list v1alpha1.GlobalCIDRList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list GlobalCIDRs: %w", err)
	}
	out := map[string][]netip.Prefix{}
	for _, o := range list.Items {
		p, err := ParseCIDRObjectName(o.Name)
		if err != nil || o.DeletionTimestamp != nil {
			continue
		}
		out[o.Spec.ClusterID] = append(out[o.Spec.ClusterID], p)
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	}
	return out, nil
}

// Claim returns clusterID's global CIDR: the one it already holds in the
// broker (stable across restarts and gateway failovers), or a free one it
// claims now by creating its GlobalCIDR. Only the active gateway claims,
// so a cluster has one claim; should two ever exist (two gateways active
// at once for a moment), the first in address order is kept and the other
// released. read may be a cache; writes go to the API server through w.
func Claim(ctx context.Context, read client.Reader, w client.Writer, plan Plan, clusterID string) (netip.Prefix, error) {
	claims, err := Claims(ctx, read)
	if err != nil {
		return netip.Prefix{}, err
	}
	if own := claims[clusterID]; len(own) > 0 {
		for _, extra := range own[1:] {
			if err := deleteClaim(ctx, w, extra); err != nil {
				return netip.Prefix{}, err
			}
		}
		return own[0], nil
	}
	taken := map[netip.Prefix]bool{}
	for _, ps := range claims {
		for _, p := range ps {
			taken[p] = true
		}
	}
	// First fit: the lowest free range. Two clusters claiming at once
	// may want the same one; the API server lets one create it and the
	// other moves on to the next.
	n := plan.size()
	for i := range n {
		p := plan.block(i)
		if taken[p] {
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
	return netip.Prefix{}, fmt.Errorf("cluster %q: %w (%d ranges of /%d in %s)", clusterID, ErrSupernetExhausted, n, plan.Bits, plan.Supernet)
}

// Release deletes every GlobalCIDR clusterID holds (the cluster leaves).
func Release(ctx context.Context, read client.Reader, w client.Writer, clusterID string) error {
	claims, err := Claims(ctx, read)
	if err != nil {
		return err
	}
	for _, p := range claims[clusterID] {
		if err := deleteClaim(ctx, w, p); err != nil {
			return err
		}
	}
	return nil
}

func deleteClaim(ctx context.Context, w client.Writer, p netip.Prefix) error {
	obj := &v1alpha1.GlobalCIDR{ObjectMeta: metav1.ObjectMeta{Name: CIDRObjectName(p)}}
	if err := w.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release global CIDR %s: %w", p, err)
	}
	return nil
}
