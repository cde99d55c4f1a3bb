package vip

import (
	"context"
	"errors"
	"sync"
)

// ErrNoBackends is what a lookup of a service without backends returns; the
// programs fail connect()/sendmsg() with EHOSTUNREACH for it.
var ErrNoBackends = errors.New("service has no backends")

// Fake is the in-memory model of the kernel's maps that this package's
// tests drive: it holds the same two maps, applies Set through the same
// validation, diff and order as Kernel.Set, and resolves destinations
// with the programs' lookup rules (Lookup).
type Fake struct {
	mu     sync.Mutex
	limits Limits
	maps   mapState
	last   OpCounts
}

// NewFake returns an empty Fake whose maps hold at most lim entries (zero:
// unlimited).
func NewFake(lim Limits) *Fake {
	return &Fake{limits: lim, maps: newMapState()}
}

// Set is Table.Set on the in-memory maps.
func (f *Fake) Set(ctx context.Context, desired map[ServiceKey]Service) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := Validate(desired, f.limits); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	o := plan(f.maps, desired)
	applyOps(f.maps, o)
	f.last = countOps(o)
	return nil
}

// Lookup resolves dst as the connect4/sendmsg4 programs do: ok false means
// dst is not a service (the call goes through unchanged), ErrNoBackends means
// the call fails with EHOSTUNREACH. rSlot selects the slot (rSlot % count),
// rCoin>>1 its backend or its alias; the backend comes without weight.
func (f *Fake) Lookup(dst ServiceKey, rSlot, rCoin uint32) (b Backend, ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maps.lookup(dst, rSlot, rCoin)
}

// Services returns what the maps implement, backends in slot order.
func (f *Fake) Services() map[ServiceKey]Service {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maps.desired()
}

// LastOps returns the map writes of the last successful Set.
func (f *Fake) LastOps() OpCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// lookup resolves dst as the programs do: ok is false when dst is no service
// (the socket call proceeds unchanged); err is ErrNoBackends when the service
// has none (the call fails with EHOSTUNREACH). rSlot picks the slot (rSlot %
// count), rCoin>>1 the slot's backend or its alias: random for connect(),
// derived from the socket cookie for sendmsg().
func (m mapState) lookup(dst ServiceKey, rSlot, rCoin uint32) (b Backend, ok bool, err error) {
	s, found := m.services[dst]
	if !found {
		return Backend{}, false, nil
	}
	if s.Count == 0 {
		return Backend{}, true, ErrNoBackends
	}
	sl, found := m.backends[backendKey{ID: s.ID, Slot: rSlot % s.Count}]
	if !found {
		return Backend{}, true, ErrNoBackends
	}
	if rCoin>>1 < sl.Threshold {
		return Backend{Addr: sl.Backend.Addr, Port: sl.Backend.Port}, true, nil
	}
	return sl.Alias, true, nil
}
