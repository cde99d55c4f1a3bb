package vip

import (
	"cmp"
	"maps"
	"slices"
)

// The Go model of the two maps the programs read. It mirrors the kernel
// layout one to one (bpf/vip.c): a service entry holds the number of backends
// and an ID; backend i of the service is stored under {ID, i}.

// service is a value of vip_services.
type service struct {
	ID    uint32
	Count uint32
}

// backendKey is a key of vip_backends.
type backendKey struct {
	ID   uint32
	Slot uint32
}

// mapState is the content of vip_services and vip_backends. It may hold what a
// killed daemon left half-written: backends of no service, a count larger than
// the slots present.
type mapState struct {
	services map[ServiceKey]service
	backends map[backendKey]Backend
}

func newMapState() mapState {
	return mapState{services: map[ServiceKey]service{}, backends: map[backendKey]Backend{}}
}

// ops are the map writes that turn one mapState into another, in the order
// they must be applied: new backend slots before the counts that expose them,
// smaller counts and deleted services before the slots they stop exposing.
type ops struct {
	putBackends    map[backendKey]Backend
	putServices    map[ServiceKey]service
	deleteServices []ServiceKey
	deleteBackends []backendKey
}

// empty reports whether the ops change nothing.
func (o ops) empty() bool {
	return len(o.putBackends) == 0 && len(o.putServices) == 0 &&
		len(o.deleteServices) == 0 && len(o.deleteBackends) == 0
}

// canonical returns bes sorted and without duplicates: the slot order, so that
// the same set of backends in another order changes nothing.
func canonical(bes []Backend) []Backend {
	out := slices.Clone(bes)
	slices.SortFunc(out, func(a, b Backend) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
	return slices.Compact(out)
}

// target returns the map content that implements desired, keeping the ID of
// every service already in cur. New services get the lowest IDs (from 1) that
// no entry of cur uses, not even a stale backend, so a new service never
// exposes slots written for another one.
func target(cur mapState, desired map[ServiceKey][]Backend) mapState {
	next := newMapState()
	used := map[uint32]bool{}
	for _, s := range cur.services {
		used[s.ID] = true
	}
	for k := range cur.backends {
		used[k.ID] = true
	}
	keys := slices.SortedFunc(maps.Keys(desired), compareKeys)
	nextID := uint32(1)
	for _, k := range keys {
		s, ok := cur.services[k]
		if !ok {
			for used[nextID] {
				nextID++
			}
			s.ID = nextID
			used[nextID] = true
		}
		bes := canonical(desired[k])
		s.Count = uint32(len(bes))
		next.services[k] = s
		for i, b := range bes {
			next.backends[backendKey{ID: s.ID, Slot: uint32(i)}] = b
		}
	}
	return next
}

func compareKeys(a, b ServiceKey) int {
	if c := a.VIP.Compare(b.VIP); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Port, b.Port); c != 0 {
		return c
	}
	return cmp.Compare(a.Proto, b.Proto)
}

// diff returns the writes that turn cur into next.
func diff(cur, next mapState) ops {
	o := ops{putBackends: map[backendKey]Backend{}, putServices: map[ServiceKey]service{}}
	for k, b := range next.backends {
		if old, ok := cur.backends[k]; !ok || old != b {
			o.putBackends[k] = b
		}
	}
	for k, s := range next.services {
		if old, ok := cur.services[k]; !ok || old != s {
			o.putServices[k] = s
		}
	}
	for k := range cur.services {
		if _, ok := next.services[k]; !ok {
			o.deleteServices = append(o.deleteServices, k)
		}
	}
	for k := range cur.backends {
		if _, ok := next.backends[k]; !ok {
			o.deleteBackends = append(o.deleteBackends, k)
		}
	}
	slices.SortFunc(o.deleteServices, compareKeys)
	slices.SortFunc(o.deleteBackends, func(a, b backendKey) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Slot, b.Slot))
	})
	return o
}

// lookup resolves dst as the programs do: ok is false when dst is no service
// (the socket call proceeds unchanged); err is ErrNoBackends when the service
// has none (the call fails with EHOSTUNREACH). hash picks the slot (hash %
// count): random for connect(), derived from the socket cookie for sendmsg().
func (m mapState) lookup(dst ServiceKey, hash uint32) (b Backend, ok bool, err error) {
	s, found := m.services[dst]
	if !found {
		return Backend{}, false, nil
	}
	if s.Count == 0 {
		return Backend{}, true, ErrNoBackends
	}
	b, found = m.backends[backendKey{ID: s.ID, Slot: hash % s.Count}]
	if !found {
		return Backend{}, true, ErrNoBackends
	}
	return b, true, nil
}

// desired returns the services m implements: what Set was last given when m
// is consistent.
func (m mapState) desired() map[ServiceKey][]Backend {
	out := make(map[ServiceKey][]Backend, len(m.services))
	for k, s := range m.services {
		bes := make([]Backend, 0, s.Count)
		for i := range s.Count {
			if b, ok := m.backends[backendKey{ID: s.ID, Slot: i}]; ok {
				bes = append(bes, b)
			}
		}
		out[k] = bes
	}
	return out
}
