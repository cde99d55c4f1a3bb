package mcs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// ErrVIPTaken is returned (wrapped) by VIPStore.Claim when another
// allocation already holds the address.
var ErrVIPTaken = errors.New("clusterset VIP already allocated")

// ErrVIPPending is returned (wrapped) by VIPAllocator.Allocate when no
// exporting cluster has allocated the Service's VIP yet and this cluster,
// which does not export it, may not: the VIPAllocation's watch event
// brings the Service back once an exporter has.
var ErrVIPPending = errors.New("no exporting cluster has allocated the clusterset VIP yet")

// VIPHold is one address's allocation (a VIPAllocation in the broker).
type VIPHold struct {
	Addr    netip.Addr
	Service types.NamespacedName
	// Owner is the cluster that created the allocation (its label
	// causeway.dev/cluster-id, which the broker's admission sets to the
	// creator); "" for one without the label, which only the broker
	// administrator can create.
	Owner string
	// Created is when the broker created the allocation.
	Created time.Time
}

// VIPExporters says whether a cluster exports the Service being allocated
// — has a record of it in the broker, accepted by this importer or not —
// and since when: the broker's creation time of that record. Only the
// allocations of these clusters count for the Service, and a cluster
// claims an address for it only while it is one of them.
type VIPExporters func(cluster string) (since time.Time, ok bool)

// VIPStore is the mechanism behind VIPAllocator: the broker's
// VIPAllocation objects (one per address, named VIPObjectName(addr)),
// seen by one cluster.
type VIPStore interface {
	// AllocatedTo returns the allocations of svc.
	AllocatedTo(ctx context.Context, svc types.NamespacedName) ([]VIPHold, error)
	// Holder returns addr's allocation; ok is false when addr is free. It
	// may answer from a cache: Claim is the authority.
	Holder(ctx context.Context, addr netip.Addr) (h VIPHold, ok bool, err error)
	// Claim atomically allocates addr to svc in this cluster's name (a
	// Create that fails when the object exists) and returns the new
	// allocation. When addr is already allocated it returns the current
	// allocation and an error wrapping ErrVIPTaken.
	Claim(ctx context.Context, addr netip.Addr, svc types.NamespacedName) (VIPHold, error)
	// Release frees addr if svc holds it and this cluster owns the
	// allocation; freeing a free address is not an error.
	Release(ctx context.Context, addr netip.Addr, svc types.NamespacedName) error
}

// VIPAllocator gives each multi-cluster Service one clusterset VIP from a
// VIPRange, unique across the clusterset and stable across restarts. It
// sees only the Service's allocations of its range's IP family, so an
// IPv4 and an IPv6 allocator share one store (FamilyVIPAllocator). Any
// number of allocators (one per cluster) may run at once: uniqueness comes
// from VIPStore.Claim, and allocators of one Service converge because they
// probe the same candidate order and keep the same allocation of those
// that count (Allocate).
type VIPAllocator struct {
	vips      VIPRange
	store     VIPStore
	clusterID string
}

// NewVIPAllocator returns the allocator of cluster clusterID of addresses
// of vips kept in store.
func NewVIPAllocator(vips VIPRange, store VIPStore, clusterID string) *VIPAllocator {
	return &VIPAllocator{vips: vips, store: store, clusterID: clusterID}
}

// Allocate returns svc's VIP. Of the Service's allocations, only those
// that count are used: inside the range, and owned by a cluster that
// exports the Service (exporters) or by the broker administrator. Any
// other is taken by someone else — in particular an allocation a member
// created for a Service it does not export (squatting its first
// candidate, to own or later churn its VIP) is never adopted. Of several
// that count (allocators raced, or a member exporting the Service created
// a second one), every cluster keeps the oldest — its age is the later of
// the allocation's and its owner's record's creation in the broker, so a
// member cannot make an allocation older by exporting after creating it;
// of the same age (the broker counts seconds), one created before its
// owner's record comes last — ties broken by the candidate order, and
// releases its own others.
//
// With none, an exporting cluster walks the candidates, skips taken
// addresses and claims the first free one (adopting it if another
// exporter's claim won for the same Service). A cluster that does not
// export svc never claims: it keeps last (the VIP it imported the Service
// with, invalid for none) while nothing else holds it, and otherwise
// returns an error wrapping ErrVIPPending. It releases its own allocations
// that do not count (those of a Service it stopped exporting, or outside
// the range). A range without a free address gives a *VIPExhaustedError.
func (a *VIPAllocator) Allocate(ctx context.Context, svc types.NamespacedName, exporters VIPExporters, last netip.Addr) (netip.Addr, error) {
	have, err := a.allocatedTo(ctx, svc)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("list VIPs of %s: %w", svc, err)
	}
	if keep, ok := a.best(svc, have, exporters); ok {
		return keep, a.releaseOwn(ctx, svc, have, keep)
	}
	if _, ok := exporters(a.clusterID); !ok {
		if err := a.releaseOwn(ctx, svc, have, netip.Addr{}); err != nil {
			return netip.Addr{}, err
		}
		if a.vips.Contains(last) {
			h, held, err := a.store.Holder(ctx, last)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("look up VIP %s: %w", last, err)
			}
			if !held || h.Service == svc {
				return last, nil
			}
		}
		return netip.Addr{}, fmt.Errorf("allocate clusterset VIP for %s: %w", svc, ErrVIPPending)
	}
	for c := range a.vips.Candidates(svc.Namespace, svc.Name) {
		h, held, err := a.store.Holder(ctx, c)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("look up VIP %s: %w", c, err)
		}
		if !held {
			h, err = a.store.Claim(ctx, c, svc)
			switch {
			case err == nil:
				return c, a.releaseOwn(ctx, svc, have, c)
			case !errors.Is(err, ErrVIPTaken):
				return netip.Addr{}, fmt.Errorf("claim VIP %s for %s: %w", c, svc, err)
			}
		}
		// Taken: another exporter's allocation of svc (it won a race, or
		// the cache had not seen it) is adopted; anything else is skipped.
		if _, ok := a.counts(svc, h, exporters); ok {
			return c, a.releaseOwn(ctx, svc, have, c)
		}
	}
	return netip.Addr{}, &VIPExhaustedError{Range: a.vips.Prefix(), Service: svc.String()}
}

// allocatedTo is the store's AllocatedTo narrowed to the range's family.
func (a *VIPAllocator) allocatedTo(ctx context.Context, svc types.NamespacedName) ([]VIPHold, error) {
	have, err := a.store.AllocatedTo(ctx, svc)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(have, func(h VIPHold) bool { return h.Addr.Is6() != a.vips.IsIPv6() }), nil
}

// vipAge orders the allocations of a Service that count: older first;
// of the same age, one created after its owner's record (as an exporter
// does) before one created earlier (a member allocating before it
// exported); then earlier in the Service's candidate order.
type vipAge struct {
	since    time.Time
	predates bool
	rank     uint64
}

func (x vipAge) before(y vipAge) bool {
	switch {
	case !x.since.Equal(y.since):
		return x.since.Before(y.since)
	case x.predates != y.predates:
		return !x.predates
	}
	return x.rank < y.rank
}

// counts tells whether h counts as an allocation of svc (see Allocate) and
// its age.
func (a *VIPAllocator) counts(svc types.NamespacedName, h VIPHold, exporters VIPExporters) (vipAge, bool) {
	if h.Service != svc {
		return vipAge{}, false
	}
	rank, ok := a.vips.rank(svc.Namespace, svc.Name, h.Addr)
	if !ok {
		return vipAge{}, false
	}
	age := vipAge{since: h.Created, rank: rank}
	if h.Owner != "" {
		since, ok := exporters(h.Owner)
		if !ok {
			return vipAge{}, false
		}
		if since.After(age.since) {
			age.since, age.predates = since, true
		}
	}
	return age, true
}

// best is the allocation of have that svc keeps: the oldest of those that
// count.
func (a *VIPAllocator) best(svc types.NamespacedName, have []VIPHold, exporters VIPExporters) (netip.Addr, bool) {
	var keep netip.Addr
	var keepAge vipAge
	found := false
	for _, h := range have {
		if age, ok := a.counts(svc, h, exporters); ok && (!found || age.before(keepAge)) {
			keep, keepAge, found = h.Addr, age, true
		}
	}
	return keep, found
}

// releaseOwn frees this cluster's allocations of have but keep (invalid
// for none).
func (a *VIPAllocator) releaseOwn(ctx context.Context, svc types.NamespacedName, have []VIPHold, keep netip.Addr) error {
	for _, h := range have {
		if h.Addr != keep && h.Owner == a.clusterID {
			if err := a.store.Release(ctx, h.Addr, svc); err != nil {
				return fmt.Errorf("release extra VIP %s of %s: %w", h.Addr, svc, err)
			}
		}
	}
	return nil
}

// Release frees this cluster's allocations of svc of the range's family.
func (a *VIPAllocator) Release(ctx context.Context, svc types.NamespacedName) error {
	have, err := a.allocatedTo(ctx, svc)
	if err != nil {
		return fmt.Errorf("list VIPs of %s: %w", svc, err)
	}
	return a.releaseOwn(ctx, svc, have, netip.Addr{})
}
