package routeagent

import (
	"context"
	"errors"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// runnerHarness drives a Runner on a fake clock. The sync function
// reports each call's "full" flag and returns the next queued error.
type runnerHarness struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	r     *Runner
	calls chan bool
	errs  chan error
}

func newRunnerHarness(t *testing.T) *runnerHarness {
	h := &runnerHarness{
		t:     t,
		clk:   clocktesting.NewFakeClock(time.Unix(1000, 0)),
		calls: make(chan bool, 16),
		errs:  make(chan error, 16),
	}
	h.r = NewRunner(RunnerConfig{MinInterval: 100 * time.Millisecond, FullInterval: 30 * time.Second,
		MaxBackoff: time.Second, Clock: h.clk}, func(_ context.Context, full bool) error {
		h.calls <- full
		select {
		case err := <-h.errs:
			return err
		default:
			return nil
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// next waits for the next sync call (a deadline only against hanging).
func (h *runnerHarness) next() bool {
	h.t.Helper()
	select {
	case full := <-h.calls:
		return full
	case <-time.After(10 * time.Second):
		h.t.Fatal("no sync")
		return false
	}
}

// settle waits until the loop sleeps on its timer with no kick pending.
func (h *runnerHarness) settle() {
	h.t.Helper()
	for i := 0; ; i++ {
		if len(h.r.kick) == 0 && h.clk.HasWaiters() {
			time.Sleep(time.Millisecond) // let a just-woken loop re-arm
			if len(h.r.kick) == 0 && h.clk.HasWaiters() {
				return
			}
		}
		if i > 10000 {
			h.t.Fatal("runner never went to sleep")
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *runnerHarness) noCall() {
	h.t.Helper()
	h.settle()
	select {
	case full := <-h.calls:
		h.t.Fatalf("unexpected sync (full=%v)", full)
	default:
	}
}

func TestRunnerCoalescesAndBounds(t *testing.T) {
	h := newRunnerHarness(t)
	if !h.next() {
		t.Fatal("first sync not full")
	}
	// Events within MinInterval of the last sync wait and coalesce.
	h.r.Kick()
	h.r.Kick()
	h.r.Kick()
	h.noCall()
	h.clk.Step(50 * time.Millisecond)
	h.noCall()
	h.clk.Step(50 * time.Millisecond)
	if h.next() {
		t.Fatal("event sync was full")
	}
	h.noCall()
	// An event long after the last sync runs at once.
	h.clk.Step(5 * time.Second)
	h.noCall()
	h.r.Kick()
	if h.next() {
		t.Fatal("event sync was full")
	}
	// Without events, a full sync every FullInterval.
	h.settle()
	h.clk.Step(30 * time.Second)
	if !h.next() {
		t.Fatal("periodic sync not full")
	}
}

func TestRunnerRetriesFullWithBackoff(t *testing.T) {
	h := newRunnerHarness(t)
	h.next()
	h.settle()
	h.errs <- errors.New("boom")
	h.errs <- errors.New("boom again")
	h.r.Kick()
	h.clk.Step(100 * time.Millisecond)
	if h.next() {
		t.Fatal("event sync was full")
	}
	// Retry after MinInterval, full.
	h.noCall()
	h.clk.Step(100 * time.Millisecond)
	if !h.next() {
		t.Fatal("retry not full")
	}
	// Second failure: backoff doubled to 200 ms.
	h.settle()
	h.clk.Step(100 * time.Millisecond)
	h.noCall()
	h.clk.Step(100 * time.Millisecond)
	if !h.next() {
		t.Fatal("second retry not full")
	}
	// Success: back to quiet.
	h.clk.Step(time.Second)
	h.noCall()
}
