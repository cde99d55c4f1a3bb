package vip

import (
	"cmp"
	"maps"
	"math/bits"
	"net/netip"
	"slices"
)

// The Go model of the two maps the programs read. It mirrors the kernel
// layout one to one (bpf/vip.c): a service entry holds the number of slots
// and an ID; slot i of the service is stored under {ID, i}.

// service is a value of vip_services.
type service struct {
	ID       uint32
	Count    uint32
	Affinity uint32 // seconds, 0: none
}

// backendKey is a key of vip_backends.
type backendKey struct {
	ID   uint32
	Slot uint32
}

// slot is a value of vip_backends: one entry of a service's alias table.
// Slot i holds the service's i-th backend (canonical order, with its
// weight) and an alias (address and port only, and its own slot): a pick chooses a slot
// uniformly, then Backend when a uniform coin in [0, coinScale) is below
// Threshold, Alias otherwise.
type slot struct {
	Backend   Backend
	Alias     Backend
	Threshold uint32
	AliasSlot uint32 // the slot whose backend Alias is (session affinity remembers slots)
}

// coinScale is the range of the coin (31 random bits); a Threshold of
// coinScale always gives the slot's own backend.
const coinScale = 1 << 31

// mapState is the content of vip_services and vip_backends. It may hold what a
// killed daemon left half-written: slots of no service, a count larger than
// the slots present.
type mapState struct {
	services map[ServiceKey]service
	backends map[backendKey]slot
	// given is, for the services whose entries this process wrote (not
	// those read from the kernel), the Service they were written from:
	// plan compares a service given again with it instead of rebuilding
	// its slots.
	given map[ServiceKey]Service
}

func newMapState() mapState {
	return mapState{services: map[ServiceKey]service{}, backends: map[backendKey]slot{}, given: map[ServiceKey]Service{}}
}

// ops are the map writes that turn one mapState into another, in the order
// they must be applied: new slots before the counts that expose them,
// smaller counts and deleted services before the slots they stop exposing.
type ops struct {
	putBackends    map[backendKey]slot
	putServices    map[ServiceKey]service
	deleteServices []ServiceKey
	deleteBackends []backendKey
	// given are the Services the writes implement, for mapState.given
	// (a copy: the caller's slices may change after Set).
	given map[ServiceKey]Service
}

// empty reports whether the ops change nothing.
func (o ops) empty() bool {
	return len(o.putBackends) == 0 && len(o.putServices) == 0 &&
		len(o.deleteServices) == 0 && len(o.deleteBackends) == 0
}

// applyOps applies o to m in order.
func applyOps(m mapState, o ops) {
	maps.Copy(m.backends, o.putBackends)
	maps.Copy(m.services, o.putServices)
	maps.Copy(m.given, o.given)
	for _, k := range o.deleteServices {
		delete(m.services, k)
		delete(m.given, k)
	}
	for _, k := range o.deleteBackends {
		delete(m.backends, k)
	}
}

// OpCounts counts the map writes one Set made.
type OpCounts struct {
	PutServices, PutBackends, DeleteServices, DeleteBackends int
}

// Total is the number of map operations.
func (c OpCounts) Total() int {
	return c.PutServices + c.PutBackends + c.DeleteServices + c.DeleteBackends
}

func countOps(o ops) OpCounts {
	return OpCounts{
		PutServices:    len(o.putServices),
		PutBackends:    len(o.putBackends),
		DeleteServices: len(o.deleteServices),
		DeleteBackends: len(o.deleteBackends),
	}
}

func compareBackends(a, b Backend) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// canonical returns bes sorted by address and port, weight 0 counted as 1,
// and duplicates (same address and port) merged into one backend with the
// sum of their weights: the slot order, so that the same backends in
// another order change nothing.
func canonical(bes []Backend) []Backend {
	// Already strictly increasing with weights set (the common case): no copy.
	done := true
	for i, b := range bes {
		if b.Weight == 0 || i > 0 && compareBackends(bes[i-1], b) >= 0 {
			done = false
			break
		}
	}
	if done {
		return bes
	}
	out := slices.Clone(bes)
	slices.SortFunc(out, compareBackends)
	merged := out[:0]
	for _, b := range out {
		b.Weight = max(b.Weight, 1)
		if n := len(merged); n > 0 && compareBackends(merged[n-1], b) == 0 {
			merged[n-1].Weight += b.Weight
			continue
		}
		merged = append(merged, b)
	}
	return merged
}

// Canonical returns bes as Set stores them and the maps read back: sorted
// by address and port, weight 0 counted as 1, duplicates merged with their
// weights summed. Two backend lists with the same Canonical form are the
// same service.
func Canonical(bes []Backend) []Backend { return slices.Clone(canonical(bes)) }

// aliasTable returns the slots of a service with the canonical backends bes:
// backend i is chosen with probability weight_i / Σ weights (up to the
// coin's resolution, 2^-31 per slot). Vose's construction, deterministic in
// the order of bes.
func aliasTable(bes []Backend) []slot {
	slots := make([]slot, len(bes))
	uniform := true
	for i, b := range bes {
		slots[i] = slot{Backend: b, Alias: Backend{Addr: b.Addr, Port: b.Port}, Threshold: coinScale, AliasSlot: uint32(i)}
		uniform = uniform && b.Weight == bes[0].Weight
	}
	if uniform {
		return slots
	}
	// In units where a slot holds total: slot i must give backend i
	// q[i] = weight_i × n of them in all.
	n := uint64(len(bes))
	var total uint64
	q := make([]uint64, len(bes))
	for i, b := range bes {
		total += uint64(b.Weight)
		q[i] = uint64(b.Weight) * n
	}
	var small, large []int
	for i := range q {
		if q[i] < total {
			small = append(small, i)
		} else {
			large = append(large, i)
		}
	}
	for len(small) > 0 && len(large) > 0 {
		s, l := small[len(small)-1], large[len(large)-1]
		small, large = small[:len(small)-1], large[:len(large)-1]
		// Slot s: backend s for q[s]/total of it, the rest goes to l.
		hi, lo := bits.Mul64(q[s], coinScale)
		thr, _ := bits.Div64(hi, lo, total) // hi < total because q[s] < total
		slots[s].Threshold = uint32(thr)
		slots[s].Alias, slots[s].AliasSlot = Backend{Addr: bes[l].Addr, Port: bes[l].Port}, uint32(l)
		q[l] -= total - q[s]
		if q[l] < total {
			small = append(small, l)
		} else {
			large = append(large, l)
		}
	}
	// What is left fills its own slot (exactly, or up to rounding).
	return slots
}

// plan returns the writes that make cur implement desired. Services already
// in cur keep their ID; a new service gets the lowest ID (from 1) that no
// entry of cur uses, not even a stale slot, so it never exposes slots
// written for another service. Only changed entries are written; the Go-side
// work is one pass over desired and cur.services, plus one pass over
// cur.backends when cur is inconsistent (left half-written by a killed
// daemon). A service given as it was last written (cur.given) costs a
// comparison of its backends; only the others' slots are rebuilt.
func plan(cur mapState, desired map[ServiceKey]Service) ops {
	o := ops{putBackends: map[backendKey]slot{}, putServices: map[ServiceKey]service{}, given: map[ServiceKey]Service{}}
	inconsistent := false
	var added []ServiceKey
	for k, svc := range desired {
		s, ok := cur.services[k]
		if !ok {
			added = append(added, k)
			continue
		}
		if g, ok := cur.given[k]; ok && g.AffinitySeconds == svc.AffinitySeconds && slices.Equal(g.Backends, svc.Backends) {
			continue // written from the same Service: its slots are right
		}
		o.given[k] = Service{Backends: slices.Clone(svc.Backends), AffinitySeconds: svc.AffinitySeconds}
		slots := aliasTable(canonical(svc.Backends))
		for i, sl := range slots {
			bk := backendKey{ID: s.ID, Slot: uint32(i)}
			if old, ok := cur.backends[bk]; !ok || old != sl {
				o.putBackends[bk] = sl
				if !ok && uint32(i) < s.Count {
					inconsistent = true
				}
			}
		}
		if s.Count != uint32(len(slots)) || s.Affinity != svc.AffinitySeconds {
			o.putServices[k] = service{ID: s.ID, Count: uint32(len(slots)), Affinity: svc.AffinitySeconds}
			for i := uint32(len(slots)); i < s.Count; i++ {
				bk := backendKey{ID: s.ID, Slot: i}
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
		for i := range s.Count {
			bk := backendKey{ID: s.ID, Slot: i}
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
		// Delete every slot no service (as it will be) exposes.
		newCount := map[uint32]uint32{} // by ID, for services that stay
		for k, s := range cur.services {
			if svc, ok := desired[k]; ok {
				newCount[s.ID] = uint32(len(canonical(svc.Backends)))
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
	// IDs in use, stale slots' included.
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
		o.given[k] = Service{Backends: slices.Clone(desired[k].Backends), AffinitySeconds: desired[k].AffinitySeconds}
		slots := aliasTable(canonical(desired[k].Backends))
		o.putServices[k] = service{ID: nextID, Count: uint32(len(slots)), Affinity: desired[k].AffinitySeconds}
		for i, sl := range slots {
			o.putBackends[backendKey{ID: nextID, Slot: uint32(i)}] = sl
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

// desired returns the services m implements: what Set was last given, in
// canonical form, when m is consistent.
func (m mapState) desired() map[ServiceKey]Service {
	out := make(map[ServiceKey]Service, len(m.services))
	for k, s := range m.services {
		var bes []Backend
		for i := range s.Count {
			if sl, ok := m.backends[backendKey{ID: s.ID, Slot: i}]; ok {
				bes = append(bes, sl.Backend)
			}
		}
		out[k] = Service{Backends: bes, AffinitySeconds: s.Affinity}
	}
	return out
}

// udpPeer is what a UDP socket connected through a VIP remembers (its
// vip_peers entry): the VIP:port it asked for and the backend it was given.
type udpPeer struct {
	VIP, Backend netip.AddrPort
}

// goneUDP returns the (VIP, backend) pairs of the UDP services o changes
// whose backend o removes from the service (or whose service it deletes):
// the sockets connected through them must be terminated once o is applied.
// It is one pass over cur.services plus the slots of the changed services.
func goneUDP(cur mapState, o ops) []udpPeer {
	touched := map[uint32]bool{}
	for bk := range o.putBackends {
		touched[bk.ID] = true
	}
	for _, bk := range o.deleteBackends {
		touched[bk.ID] = true
	}
	for _, s := range o.putServices {
		touched[s.ID] = true
	}
	deleted := make(map[ServiceKey]bool, len(o.deleteServices))
	for _, k := range o.deleteServices {
		deleted[k] = true
	}
	var out []udpPeer
	for k, s := range cur.services {
		if k.Proto != UDP || !touched[s.ID] {
			continue
		}
		count := s.Count
		if ns, ok := o.putServices[k]; ok {
			count = ns.Count
		}
		if deleted[k] {
			count = 0
		}
		kept := map[netip.AddrPort]bool{}
		for i := range count {
			bk := backendKey{ID: s.ID, Slot: i}
			sl, ok := o.putBackends[bk]
			if !ok {
				sl, ok = cur.backends[bk]
			}
			if ok {
				kept[netip.AddrPortFrom(sl.Backend.Addr, sl.Backend.Port)] = true
			}
		}
		for i := range s.Count {
			sl, ok := cur.backends[backendKey{ID: s.ID, Slot: i}]
			if be := netip.AddrPortFrom(sl.Backend.Addr, sl.Backend.Port); ok && !kept[be] {
				out = append(out, udpPeer{VIP: netip.AddrPortFrom(k.VIP, k.Port), Backend: be})
			}
		}
	}
	return out
}
