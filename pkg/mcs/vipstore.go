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
// allocation of a Service nobody exports any more).
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
func (s *BrokerVIPStore) AllocatedTo(ctx context.Context, svc types.NamespacedName) ([]netip.Addr, error) {
	var list causewayv1alpha1.VIPAllocationList
	if err := s.c.List(ctx, &list, client.MatchingLabels{
		LabelVIPServiceNamespace: svc.Namespace,
		LabelVIPServiceName:      svc.Name,
	}); err != nil {
		return nil, fmt.Errorf("list VIP allocations: %w", err)
	}
	var out []netip.Addr
	for _, a := range list.Items {
		if a.Spec.ServiceNamespace != svc.Namespace || a.Spec.ServiceName != svc.Name || a.DeletionTimestamp != nil {
			continue
		}
		addr, err := ParseVIPObjectName(a.Name)
		if err != nil {
			continue // not ours to interpret; never handed out
		}
		out = append(out, addr)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// Holder implements VIPStore.
func (s *BrokerVIPStore) Holder(ctx context.Context, addr netip.Addr) (types.NamespacedName, bool, error) {
	var a causewayv1alpha1.VIPAllocation
	err := s.c.Get(ctx, types.NamespacedName{Name: VIPObjectName(addr)}, &a)
	switch {
	case apierrors.IsNotFound(err):
		return types.NamespacedName{}, false, nil
	case err != nil:
		return types.NamespacedName{}, false, fmt.Errorf("get VIP allocation %s: %w", addr, err)
	}
	return types.NamespacedName{Namespace: a.Spec.ServiceNamespace, Name: a.Spec.ServiceName}, true, nil
}

// Claim implements VIPStore.
func (s *BrokerVIPStore) Claim(ctx context.Context, addr netip.Addr, svc types.NamespacedName) (types.NamespacedName, error) {
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
		return svc, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return types.NamespacedName{}, fmt.Errorf("create VIP allocation %s: %w", addr, err)
	}
	holder, ok, herr := s.Holder(ctx, addr)
	if herr != nil {
		return types.NamespacedName{}, herr
	}
	if !ok {
		return types.NamespacedName{}, fmt.Errorf("claim %s: released meanwhile: %w", addr, ErrVIPTaken)
	}
	return holder, fmt.Errorf("claim %s: held by %s: %w", addr, holder, ErrVIPTaken)
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
