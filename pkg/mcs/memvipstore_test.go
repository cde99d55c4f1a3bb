package mcs

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// memVIPs is an in-memory broker of VIPAllocations shared by the stores
// of several clusters (memVIPs.store), with the semantics of the broker
// objects: a claim is an atomic create, owned by its cluster and stamped
// with the broker's (here logical, one second per claim) clock; a
// release deletes only the cluster's own allocation.
type memVIPs struct {
	mu     sync.Mutex
	holds  map[netip.Addr]VIPHold
	clock  time.Time
	claims int
}

func newMemVIPs() *memVIPs {
	return &memVIPs{holds: map[netip.Addr]VIPHold{}, clock: time.Unix(1_000_000, 0)}
}

// store is cluster's view of the broker.
func (m *memVIPs) store(cluster string) memVIPStore { return memVIPStore{m: m, cluster: cluster} }

// put creates an allocation as a member can by hand (its own name as the
// owner, any Service, any address) and returns it; it fails when the
// address is held.
func (m *memVIPs) put(addr netip.Addr, svc types.NamespacedName, owner string) (VIPHold, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.holds[addr]; ok {
		return h, fmt.Errorf("claim %s: held by %s: %w", addr, h.Service, ErrVIPTaken)
	}
	m.clock = m.clock.Add(time.Second)
	h := VIPHold{Addr: addr, Service: svc, Owner: owner, Created: m.clock}
	m.holds[addr] = h
	return h, nil
}

// remove deletes addr's allocation, whoever owns it.
func (m *memVIPs) remove(addr netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.holds, addr)
}

// Claims is the number of claims so far.
func (m *memVIPs) Claims() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims
}

// Len is the number of allocated addresses.
func (m *memVIPs) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.holds)
}

// memVIPStore is one cluster's VIPStore over memVIPs.
type memVIPStore struct {
	m       *memVIPs
	cluster string
}

func (s memVIPStore) AllocatedTo(_ context.Context, svc types.NamespacedName) ([]VIPHold, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	var out []VIPHold
	for _, h := range s.m.holds {
		if h.Service == svc {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(x, y VIPHold) int { return x.Addr.Compare(y.Addr) })
	return out, nil
}

func (s memVIPStore) Holder(_ context.Context, addr netip.Addr) (VIPHold, bool, error) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	h, ok := s.m.holds[addr]
	return h, ok, nil
}

func (s memVIPStore) Claim(_ context.Context, addr netip.Addr, svc types.NamespacedName) (VIPHold, error) {
	s.m.mu.Lock()
	s.m.claims++
	s.m.mu.Unlock()
	return s.m.put(addr, svc, s.cluster)
}

func (s memVIPStore) Release(_ context.Context, addr netip.Addr, svc types.NamespacedName) error {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if h, ok := s.m.holds[addr]; ok && h.Service == svc && h.Owner == s.cluster {
		delete(s.m.holds, addr)
	}
	return nil
}

// exporting is the VIPExporters of clusters that all exported the Service
// at the start of time (their records never postdate an allocation).
func exporting(clusters ...string) VIPExporters {
	return func(c string) (time.Time, bool) { return time.Time{}, slices.Contains(clusters, c) }
}

// exportingSince is the VIPExporters of clusters whose records the broker
// created at the given times.
func exportingSince(since map[string]time.Time) VIPExporters {
	return func(c string) (time.Time, bool) {
		t, ok := since[c]
		return t, ok
	}
}
