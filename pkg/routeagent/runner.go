package routeagent

import (
	"context"
	"time"

	"k8s.io/utils/clock"
)

// RunnerConfig bounds how often a Runner syncs.
type RunnerConfig struct {
	// MinInterval is the least time between two syncs: events arriving
	// meanwhile are coalesced into the next one.
	MinInterval time.Duration
	// FullInterval is how often a full sync runs without any event.
	FullInterval time.Duration
	// MaxBackoff caps the retry delay after failed syncs (which doubles
	// from MinInterval).
	MaxBackoff time.Duration
	// Clock defaults to the real clock.
	Clock clock.Clock
}

// Runner is the bounded-frequency sync loop: events only mark the state
// dirty (Kick), one goroutine (Run) calls sync at most once per
// MinInterval, runs a full sync every FullInterval, and after a failure
// retries with a full sync and exponential backoff.
type Runner struct {
	cfg  RunnerConfig
	sync func(ctx context.Context, full bool) error
	kick chan struct{}
}

// NewRunner returns a Runner calling sync.
func NewRunner(cfg RunnerConfig, sync func(ctx context.Context, full bool) error) *Runner {
	if cfg.MinInterval <= 0 {
		cfg.MinInterval = 100 * time.Millisecond
	}
	if cfg.FullInterval <= 0 {
		cfg.FullInterval = 30 * time.Second
	}
	if cfg.MaxBackoff < cfg.MinInterval {
		cfg.MaxBackoff = max(5*time.Second, cfg.MinInterval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Runner{cfg: cfg, sync: sync, kick: make(chan struct{}, 1)}
}

// Kick marks the state dirty; it never blocks.
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run syncs until ctx ends. The first sync is full and immediate.
func (r *Runner) Run(ctx context.Context) {
	c := r.cfg.Clock
	var (
		dirty, full = true, true
		lastRun     time.Time // zero: never ran
		retryAt     time.Time // zero: no retry pending
		backoff     = r.cfg.MinInterval
		nextFull    = c.Now().Add(r.cfg.FullInterval)
	)
	for {
		now := c.Now()
		if !now.Before(nextFull) {
			dirty, full = true, true
		}
		due := nextFull
		if dirty {
			at := now
			if !lastRun.IsZero() {
				at = later(at, lastRun.Add(r.cfg.MinInterval))
			}
			if !retryAt.IsZero() {
				at = later(at, retryAt)
			}
			due = earlier(due, at)
		}
		if dirty && !due.After(now) {
			lastRun = now
			err := r.sync(ctx, full)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				dirty, full = true, true
				retryAt = now.Add(backoff)
				backoff = min(2*backoff, r.cfg.MaxBackoff)
			} else {
				dirty, full = false, false
				retryAt = time.Time{}
				backoff = r.cfg.MinInterval
				nextFull = now.Add(r.cfg.FullInterval)
			}
			continue
		}
		t := c.NewTimer(due.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.kick:
			dirty = true
		case <-t.C():
		}
		t.Stop()
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
