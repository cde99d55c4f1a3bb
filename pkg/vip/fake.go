package vip

import (
	"context"
	"errors"
	"maps"
	"sync"
)

// ErrNoBackends is what a lookup of a service without backends returns; the
// programs fail connect()/sendmsg() with EHOSTUNREACH for it.
var ErrNoBackends = errors.New("service has no backends")

// Fake is an in-memory Table for controller tests. It holds the same two maps
// as the kernel, applies Set through the same diff and order, and resolves
// destinations with the programs' lookup rules (Lookup).
type Fake struct {
	mu     sync.Mutex
	limits Limits
	maps   mapState
	last   OpCounts
	sets   int
	closed bool
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

// NewFake returns an empty Fake whose maps hold at most lim entries (zero:
// unlimited).
func NewFake(lim Limits) *Fake {
	return &Fake{limits: lim, maps: newMapState()}
}

var _ Table = (*Fake)(nil)

// Set implements Table.
func (f *Fake) Set(ctx context.Context, desired map[ServiceKey]Service) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validate(desired, f.limits); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("vip fake: closed")
	}
	o := plan(f.maps, desired)
	applyOps(f.maps, o)
	f.last = countOps(o)
	f.sets++
	return nil
}

// applyOps applies o to m in order.
func applyOps(m mapState, o ops) {
	maps.Copy(m.backends, o.putBackends)
	maps.Copy(m.services, o.putServices)
	for _, k := range o.deleteServices {
		delete(m.services, k)
	}
	for _, k := range o.deleteBackends {
		delete(m.backends, k)
	}
}

// Limits implements Table.
func (f *Fake) Limits() Limits { return f.limits }

// Usage implements Table.
func (f *Fake) Usage() Limits {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Limits{Services: uint32(len(f.maps.services)), Backends: uint32(len(f.maps.backends))}
}

// Close implements Table.
func (f *Fake) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
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

// Sets returns how many times Set succeeded.
func (f *Fake) Sets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets
}
