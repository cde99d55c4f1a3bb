package routeagent

import (
	"context"
	"net/netip"
	"slices"
	"sync"

	"github.com/causeway-net/causeway/pkg/vip"
)

// fakeDataplane is an in-memory Dataplane for the agent's unit tests.
type fakeDataplane struct {
	mu         sync.Mutex
	current    *DesiredState
	sets       int
	fail       error
	forgetFail error
	forgot     [][]netip.Prefix
}

var _ Dataplane = (*fakeDataplane)(nil)

// Set records desired (unless a failure is armed).
func (f *fakeDataplane) Set(_ context.Context, desired DesiredState) (Report, error) {
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
func (f *fakeDataplane) Cleanup(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.current = nil
	return nil
}

// ForgetFlows records prefixes and returns the error FailForget set.
func (f *fakeDataplane) ForgetFlows(_ context.Context, prefixes []netip.Prefix) (uint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgot = append(f.forgot, slices.Clone(prefixes))
	return 0, f.forgetFail
}

// FailForget makes every later ForgetFlows fail with err (nil: succeed).
func (f *fakeDataplane) FailForget(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgetFail = err
}

// Forgotten returns the prefixes of every ForgetFlows call, in order.
func (f *fakeDataplane) Forgotten() [][]netip.Prefix {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.forgot)
}

// Current returns the last state Set, if any.
func (f *fakeDataplane) Current() (DesiredState, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current == nil {
		return DesiredState{}, false
	}
	return *f.current, true
}

// Sets counts Set calls.
func (f *fakeDataplane) Sets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets
}

// FailWith makes every later Set fail with err (nil: succeed again).
func (f *fakeDataplane) FailWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// fakeVIPTable is a vip.Table without limits for the agent's tests: Set
// refuses what every Table refuses (vip.Validate) and programs nothing.
type fakeVIPTable struct{}

var _ vip.Table = fakeVIPTable{}

func (fakeVIPTable) Set(_ context.Context, desired map[vip.ServiceKey]vip.Service) error {
	return vip.Validate(desired, vip.Limits{})
}

func (fakeVIPTable) Limits() vip.Limits { return vip.Limits{} }

func (fakeVIPTable) Usage() vip.Limits { return vip.Limits{} }

func (fakeVIPTable) Close() error { return nil }
