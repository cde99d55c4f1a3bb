package mcs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// Labels on VIPAllocation objects, to list a Service's allocations.
const (
	LabelVIPServiceNamespace = "causeway.dev/service-namespace"
	LabelVIPServiceName      = "causeway.dev/service-name"
)

// BrokerVIPStore keeps VIP allocations as VIPAllocation objects in the
// broker API server, one per address, named VIPObjectName(addr). The
// API server's refusal to create a second object of the same name makes
// Claim atomic across clusters.
//
// Each allocation is owned by the cluster that created it (label
// causeway.dev/cluster-id), and only that cluster deletes it: the broker
// refuses a member's delete of another's allocation
// (broker.OwnershipPolicy). Every cluster runs the same release logic,
// so each releases its own share (a duplicate it created in a race, the
// allocation of a Service it stopped exporting).
type BrokerVIPStore struct {
	c         client.Client
	clusterID string
}

// NewBrokerVIPStore returns a store using c, a client of the broker with
// cluster clusterID's identity. Its reads may come from a cache; Claim
// and Release go to the API server.
func NewBrokerVIPStore(c client.Client, clusterID string) *BrokerVIPStore {
	return &BrokerVIPStore{c: c, clusterID: clusterID}
}

// AllocatedTo implements VIPStore.
func (s *BrokerVIPStore) AllocatedTo(ctx context.Context, svc types.NamespacedName) ([]VIPHold, error) {
	var list causewayv1alpha1.VIPAllocationList
	if err := s.c.List(ctx, &list, client.MatchingLabels{
		LabelVIPServiceNamespace: svc.Namespace,
		LabelVIPServiceName:      svc.Name,
	}); err != nil {
		return nil, fmt.Errorf("list VIP allocations: %w", err)
	}
	var out []VIPHold
	for i := range list.Items {
		a := &list.Items[i]
		if a.Spec.ServiceNamespace != svc.Namespace || a.Spec.ServiceName != svc.Name || a.DeletionTimestamp != nil {
			continue
		}
		if h, ok := HoldOf(a); ok {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(x, y VIPHold) int { return x.Addr.Compare(y.Addr) })
	return out, nil
}

// HoldOf is the allocation a VIPAllocation object makes; ok is false
// when its name is no address (VIPObjectName): such an object is not
// ours to interpret and holds nothing.
func HoldOf(a *causewayv1alpha1.VIPAllocation) (VIPHold, bool) {
	addr, err := ParseVIPObjectName(a.Name)
	if err != nil {
		return VIPHold{}, false
	}
	return VIPHold{Addr: addr, Service: types.NamespacedName{Namespace: a.Spec.ServiceNamespace, Name: a.Spec.ServiceName},
		Owner: a.Labels[causewayv1alpha1.LabelClusterID], Created: a.CreationTimestamp.Time}, true
}

// Holder implements VIPStore.
func (s *BrokerVIPStore) Holder(ctx context.Context, addr netip.Addr) (VIPHold, bool, error) {
	var a causewayv1alpha1.VIPAllocation
	err := s.c.Get(ctx, types.NamespacedName{Name: VIPObjectName(addr)}, &a)
	switch {
	case apierrors.IsNotFound(err):
		return VIPHold{}, false, nil
	case err != nil:
		return VIPHold{}, false, fmt.Errorf("get VIP allocation %s: %w", addr, err)
	}
	h, ok := HoldOf(&a)
	return h, ok, nil
}

// Claim implements VIPStore.
func (s *BrokerVIPStore) Claim(ctx context.Context, addr netip.Addr, svc types.NamespacedName) (VIPHold, error) {
	a := &causewayv1alpha1.VIPAllocation{
		ObjectMeta: metav1.ObjectMeta{
			Name: VIPObjectName(addr),
			Labels: map[string]string{
				LabelVIPServiceNamespace:        svc.Namespace,
				LabelVIPServiceName:             svc.Name,
				causewayv1alpha1.LabelClusterID: s.clusterID,
			},
		},
		Spec: causewayv1alpha1.VIPAllocationSpec{ServiceNamespace: svc.Namespace, ServiceName: svc.Name},
	}
	err := s.c.Create(ctx, a)
	if err == nil {
		h, _ := HoldOf(a)
		return h, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return VIPHold{}, fmt.Errorf("create VIP allocation %s: %w", addr, err)
	}
	holder, ok, herr := s.Holder(ctx, addr)
	if herr != nil {
		return VIPHold{}, herr
	}
	if !ok {
		return VIPHold{}, fmt.Errorf("claim %s: released meanwhile: %w", addr, ErrVIPTaken)
	}
	return holder, fmt.Errorf("claim %s: held by %s (cluster %q): %w", addr, holder.Service, holder.Owner, ErrVIPTaken)
}

// Release implements VIPStore. It deletes the object only if svc holds it
// and this cluster owns it (another's is its owner's to release), with a
// UID precondition so a re-allocation to another Service in between is
// never deleted.
func (s *BrokerVIPStore) Release(ctx context.Context, addr netip.Addr, svc types.NamespacedName) error {
	var a causewayv1alpha1.VIPAllocation
	err := s.c.Get(ctx, types.NamespacedName{Name: VIPObjectName(addr)}, &a)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get VIP allocation %s: %w", addr, err)
	}
	if a.Spec.ServiceNamespace != svc.Namespace || a.Spec.ServiceName != svc.Name || a.Labels[causewayv1alpha1.LabelClusterID] != s.clusterID {
		return nil
	}
	err = s.c.Delete(ctx, &a, client.Preconditions{UID: &a.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete VIP allocation %s: %w", addr, err)
	}
	return nil
}
