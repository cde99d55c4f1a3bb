package routeagent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync"
)

// Dataplane is the mechanism: it makes the node equal to a DesiredState.
type Dataplane interface {
	// Set diffs desired against what exists on the node (devices, FDB and
	// neighbour entries, owned routes, owned chains) and changes only what
	// differs; an equal state changes nothing.
	Set(ctx context.Context, desired DesiredState) (Report, error)
	// Cleanup removes everything the agent owns on the node.
	Cleanup(ctx context.Context) error
	// ForgetFlows deletes the node's conntrack entries of flows to or
	// from prefixes and returns how many it deleted.
	ForgetFlows(ctx context.Context, prefixes []netip.Prefix) (uint, error)
}

// Report says what a Set changed.
type Report struct {
	// Changes describes each change, e.g. "route 10.2.0.0/16 via 241.0.0.1 added".
	Changes []string
	// OutsideFlush: the canary chain was gone (something outside removed
	// our chains since the last Set); every owned object was rewritten.
	OutsideFlush bool
}

// FakeDataplane is an in-memory Dataplane for callers' unit tests.
type FakeDataplane struct {
	mu         sync.Mutex
	current    *DesiredState
	sets       int
	fail       error
	forgetFail error
	forgot     [][]netip.Prefix
}

var _ Dataplane = (*FakeDataplane)(nil)

// Set records desired (unless a failure is armed).
func (f *FakeDataplane) Set(_ context.Context, desired DesiredState) (Report, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sets++
	if f.fail != nil {
		return Report{}, f.fail
	}
	var rep Report
	if f.current == nil || !f.current.Equal(desired) {
		rep.Changes = []string{"state replaced"}
	}
	f.current = &desired
	return rep, nil
}

// Cleanup forgets the state.
func (f *FakeDataplane) Cleanup(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = nil
	return nil
}

// ForgetFlows records prefixes and returns the error FailForget set.
func (f *FakeDataplane) ForgetFlows(_ context.Context, prefixes []netip.Prefix) (uint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, slices.Clone(prefixes))
	return 0, f.forgetFail
}

// FailForget makes every later ForgetFlows fail with err (nil: succeed).
func (f *FakeDataplane) FailForget(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetFail = err
}

// Forgotten returns the prefixes of every ForgetFlows call, in order.
func (f *FakeDataplane) Forgotten() [][]netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.forgot)
}

// Current returns the last state Set, if any.
func (f *FakeDataplane) Current() (DesiredState, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current == nil {
		return DesiredState{}, false
	}
	return *f.current, true
}

// Sets counts Set calls.
func (f *FakeDataplane) Sets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets
}

// FailWith makes every later Set fail with err (nil: succeed again).
func (f *FakeDataplane) FailWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// ErrUnsupported is returned by the Dataplane on systems other than Linux.
var ErrUnsupported = errors.New("route agent dataplane: only Linux is supported")
