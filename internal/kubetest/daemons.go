package kubetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
)

// Daemons runs a test's in-process daemons (a controller's Run), each
// under a name until Stop or the end of the test. A daemon that returns
// an error other than its context's cancellation fails the test.
type Daemons struct {
	t       testing.TB
	mu      sync.Mutex
	running map[string]daemon
}

type daemon struct {
	cancel context.CancelFunc
	done   chan error
}

// NewDaemons returns an empty Daemons whose daemons stop when t ends.
func NewDaemons(t testing.TB) *Daemons {
	d := &Daemons{t: t, running: map[string]daemon{}}
	t.Cleanup(d.stopAll)
	return d
}

// Start runs run(ctx) in a goroutine under name; Stop(name) cancels ctx
// and waits for run to return.
func (d *Daemons) Start(name string, run func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	r := daemon{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx) }()
	d.mu.Lock()
	d.running[name] = r
	d.mu.Unlock()
}

// Stop stops the daemon name, if it runs, and waits until it returned.
func (d *Daemons) Stop(name string) {
	d.mu.Lock()
	r, ok := d.running[name]
	delete(d.running, name)
	d.mu.Unlock()
	if !ok {
		return
	}
	r.cancel()
	if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
		d.t.Errorf("%s: %v", name, err)
	}
}

func (d *Daemons) stopAll() {
	d.mu.Lock()
	names := slices.Collect(maps.Keys(d.running))
	d.mu.Unlock()
	for _, n := range names {
		d.Stop(n)
	}
}
