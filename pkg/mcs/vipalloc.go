package mcs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// ErrVIPTaken is returned (wrapped) by VIPStore.Claim when another
// allocation already holds the address.
var ErrVIPTaken = errors.New("clusterset VIP already allocated")

// VIPStore is the mechanism behind VIPAllocator: the broker's
// VIPAllocation objects (one per address, named VIPObjectName(addr)).
// MemVIPStore is an in-memory implementation for tests.
type VIPStore interface {
	// AllocatedTo returns the addresses allocated to svc.
	AllocatedTo(ctx context.Context, svc types.NamespacedName) ([]netip.Addr, error)
	// Holder returns the Service holding addr; ok is false when addr is
	// free. It may answer from a cache: Claim is the authority.
	Holder(ctx context.Context, addr netip.Addr) (svc types.NamespacedName, ok bool, err error)
	// Claim atomically allocates addr to svc (a Create that fails when the
	// object exists). When addr is already allocated it returns the
	// current holder and an error wrapping ErrVIPTaken.
	Claim(ctx context.Context, addr netip.Addr, svc types.NamespacedName) (holder types.NamespacedName, err error)
	// Release frees addr if svc holds it; freeing a free address is not an
	// error.
	Release(ctx context.Context, addr netip.Addr, svc types.NamespacedName) error
}

// VIPAllocator gives each multi-cluster Service one clusterset VIP from a
// VIPRange, unique across the clusterset and stable across restarts. It
// sees only the Service's allocations of its range's IP family, so an
// IPv4 and an IPv6 allocator share one store (FamilyVIPAllocator). Any
// number of allocators (one per cluster) may run at once: uniqueness comes
// from VIPStore.Claim, and allocators of one Service converge because they
// probe the same candidate order and keep the earliest allocation in it.
type VIPAllocator struct {
	vips  VIPRange
	store VIPStore
}

// NewVIPAllocator returns an allocator of addresses of vips kept in store.
func NewVIPAllocator(vips VIPRange, store VIPStore) *VIPAllocator {
	return &VIPAllocator{vips: vips, store: store}
}

// Allocate returns svc's VIP, allocating one when it has none. When svc
// holds several addresses (two allocators raced, or the range changed) it
// keeps the first in its candidate order and releases the others. A range
// without a free address gives a *VIPExhaustedError.
func (a *VIPAllocator) Allocate(ctx context.Context, svc types.NamespacedName) (netip.Addr, error) {
	have, err := a.allocatedTo(ctx, svc)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("list VIPs of %s: %w", svc, err)
	}
	if keep, ok := a.best(svc, have); ok {
		for _, addr := range have {
			if addr != keep {
				if err := a.store.Release(ctx, addr, svc); err != nil {
					return netip.Addr{}, fmt.Errorf("release extra VIP %s of %s: %w", addr, svc, err)
				}
			}
		}
		return keep, nil
	}
	for c := range a.vips.Candidates(svc.Namespace, svc.Name) {
		if holder, ok, err := a.store.Holder(ctx, c); err != nil {
			return netip.Addr{}, fmt.Errorf("look up VIP %s: %w", c, err)
		} else if ok && holder != svc {
			continue
		}
		holder, err := a.store.Claim(ctx, c, svc)
		switch {
		case err == nil:
			return a.releaseOutOfRange(ctx, svc, have, c)
		case errors.Is(err, ErrVIPTaken):
			if holder == svc {
				return a.releaseOutOfRange(ctx, svc, have, c)
			}
		default:
			return netip.Addr{}, fmt.Errorf("claim VIP %s for %s: %w", c, svc, err)
		}
	}
	return netip.Addr{}, &VIPExhaustedError{Range: a.vips.Prefix(), Service: svc.String()}
}

// allocatedTo is the store's AllocatedTo narrowed to the range's family.
func (a *VIPAllocator) allocatedTo(ctx context.Context, svc types.NamespacedName) ([]netip.Addr, error) {
	have, err := a.store.AllocatedTo(ctx, svc)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(have, func(addr netip.Addr) bool { return addr.Is6() != a.vips.IsIPv6() }), nil
}

// best is the address of have that comes first in svc's candidate order.
func (a *VIPAllocator) best(svc types.NamespacedName, have []netip.Addr) (netip.Addr, bool) {
	var keep netip.Addr
	var keepRank uint64
	found := false
	for _, addr := range have {
		r, ok := a.vips.rank(svc.Namespace, svc.Name, addr)
		if ok && (!found || r < keepRank) {
			keep, keepRank, found = addr, r, true
		}
	}
	return keep, found
}

// releaseOutOfRange frees the addresses svc held outside the range once it
// has the new one, got.
func (a *VIPAllocator) releaseOutOfRange(ctx context.Context, svc types.NamespacedName, have []netip.Addr, got netip.Addr) (netip.Addr, error) {
	for _, addr := range have {
		if addr != got {
			if err := a.store.Release(ctx, addr, svc); err != nil {
				return netip.Addr{}, fmt.Errorf("release out-of-range VIP %s of %s: %w", addr, svc, err)
			}
		}
	}
	return got, nil
}

// Release frees every address of the range's family allocated to svc.
func (a *VIPAllocator) Release(ctx context.Context, svc types.NamespacedName) error {
	have, err := a.allocatedTo(ctx, svc)
	if err != nil {
		return fmt.Errorf("list VIPs of %s: %w", svc, err)
	}
	for _, addr := range have {
		if err := a.store.Release(ctx, addr, svc); err != nil {
			return fmt.Errorf("release VIP %s of %s: %w", addr, svc, err)
		}
	}
	return nil
}

// MemVIPStore is an in-memory VIPStore, safe for concurrent use, with the
// semantics of the broker objects: Claim is an atomic create.
type MemVIPStore struct {
	mu     sync.Mutex
	holder map[netip.Addr]types.NamespacedName
	bySvc  map[types.NamespacedName]map[netip.Addr]bool
	claims int
}

// NewMemVIPStore returns an empty store.
func NewMemVIPStore() *MemVIPStore {
	return &MemVIPStore{
		holder: map[netip.Addr]types.NamespacedName{},
		bySvc:  map[types.NamespacedName]map[netip.Addr]bool{},
	}
}

// AllocatedTo implements VIPStore.
func (s *MemVIPStore) AllocatedTo(_ context.Context, svc types.NamespacedName) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Keys(s.bySvc[svc]))
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

// Holder implements VIPStore.
func (s *MemVIPStore) Holder(_ context.Context, addr netip.Addr) (types.NamespacedName, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.holder[addr]
	return h, ok, nil
}

// Claim implements VIPStore.
func (s *MemVIPStore) Claim(_ context.Context, addr netip.Addr, svc types.NamespacedName) (types.NamespacedName, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	if h, ok := s.holder[addr]; ok {
		return h, fmt.Errorf("claim %s: held by %s: %w", addr, h, ErrVIPTaken)
	}
	s.holder[addr] = svc
	if s.bySvc[svc] == nil {
		s.bySvc[svc] = map[netip.Addr]bool{}
	}
	s.bySvc[svc][addr] = true
	return svc, nil
}

// Release implements VIPStore.
func (s *MemVIPStore) Release(_ context.Context, addr netip.Addr, svc types.NamespacedName) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.holder[addr]; ok && h == svc {
		delete(s.holder, addr)
		delete(s.bySvc[svc], addr)
		if len(s.bySvc[svc]) == 0 {
			delete(s.bySvc, svc)
		}
	}
	return nil
}

// Claims is the number of Claim calls so far.
func (s *MemVIPStore) Claims() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims
}

// Len is the number of allocated addresses.
func (s *MemVIPStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.holder)
}
