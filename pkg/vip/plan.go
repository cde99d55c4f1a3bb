package vip

import (
	"cmp"
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
	less := func(a, b Backend) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	}
	// Already strictly increasing (the common case): no copy.
	if slices.IsSortedFunc(bes, func(a, b Backend) int {
		if c := less(a, b); c != 0 {
			return c
		}
		return -1 // equal neighbours are duplicates: not canonical
	}) {
		return bes
	}
	out := slices.Clone(bes)
	slices.SortFunc(out, less)
	return slices.Compact(out)
}

// plan returns the writes that make cur implement desired. Services already
// in cur keep their ID; a new service gets the lowest ID (from 1) that no
// entry of cur uses, not even a stale backend, so it never exposes slots
// written for another service. Only changed entries are written; the Go-side
// work is one pass over desired and cur.services, plus one pass over
// cur.backends when cur is inconsistent (left half-written by a killed
// daemon).
func plan(cur mapState, desired map[ServiceKey][]Backend) ops {
	o := ops{putBackends: map[backendKey]Backend{}, putServices: map[ServiceKey]service{}}
	inconsistent := false
	var added []ServiceKey
	for k, bes := range desired {
		s, ok := cur.services[k]
		if !ok {
			added = append(added, k)
			continue
		}
		bes = canonical(bes)
		for i, b := range bes {
			bk := backendKey{ID: s.ID, Slot: uint32(i)}
			if old, ok := cur.backends[bk]; !ok || old != b {
				o.putBackends[bk] = b
				if !ok && uint32(i) < s.Count {
					inconsistent = true
				}
			}
		}
		if s.Count != uint32(len(bes)) {
			o.putServices[k] = service{ID: s.ID, Count: uint32(len(bes))}
			for slot := uint32(len(bes)); slot < s.Count; slot++ {
				bk := backendKey{ID: s.ID, Slot: slot}
				if _, ok := cur.backends[bk]; ok {
					o.deleteBackends = append(o.deleteBackends, bk)
				}
			}
		}
	}
	total := 0
	for k, s := range cur.services {
		total += int(s.Count)
		if _, ok := desired[k]; ok {
			continue
		}
		o.deleteServices = append(o.deleteServices, k)
		for slot := range s.Count {
			bk := backendKey{ID: s.ID, Slot: slot}
			if _, ok := cur.backends[bk]; ok {
				o.deleteBackends = append(o.deleteBackends, bk)
			}
		}
	}
	// A consistent state has exactly the slots 0..count-1 of every service.
	if len(cur.backends) != total {
		inconsistent = true
	}
	if inconsistent {
		// Delete every backend no service (as it will be) exposes.
		newCount := map[uint32]uint32{} // by ID, for services that stay
		for k, s := range cur.services {
			if bes, ok := desired[k]; ok {
				newCount[s.ID] = uint32(len(canonical(bes)))
			}
		}
		exposed := func(bk backendKey) bool {
			n, ok := newCount[bk.ID]
			return ok && bk.Slot < n
		}
		planned := map[backendKey]bool{}
		for _, bk := range o.deleteBackends {
			planned[bk] = true
		}
		for bk := range cur.backends {
			if !planned[bk] && !exposed(bk) {
				o.deleteBackends = append(o.deleteBackends, bk)
			}
		}
	}
	if len(added) == 0 {
		return o
	}
	// IDs in use, stale backends' included.
	used := make(map[uint32]bool, len(cur.services))
	for _, s := range cur.services {
		used[s.ID] = true
	}
	if inconsistent {
		for bk := range cur.backends {
			used[bk.ID] = true
		}
	}
	slices.SortFunc(added, compareKeys) // deterministic IDs
	nextID := uint32(1)
	for _, k := range added {
		for used[nextID] {
			nextID++
		}
		used[nextID] = true
		bes := canonical(desired[k])
		o.putServices[k] = service{ID: nextID, Count: uint32(len(bes))}
		for i, b := range bes {
			o.putBackends[backendKey{ID: nextID, Slot: uint32(i)}] = b
		}
	}
	return o
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
