package controller

import (
	"context"
	"errors"
	"testing"
)

// gatedStore is a store whose initial list arrives when synced is closed.
type gatedStore struct{ synced chan struct{} }

func (gatedStore) Run(ctx context.Context) { <-ctx.Done() }

// WaitForSync returns nil once synced is closed, even when ctx has ended
// too, so that the test below is deterministic.
func (s gatedStore) WaitForSync(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	default:
	}
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestStoreRunnerWaitsForEveryStore: waitForSync does not succeed while
// one store has not synced (it returns the context's error), and does
// once every store has.
func TestStoreRunnerWaitsForEveryStore(t *testing.T) {
	a, b := gatedStore{make(chan struct{})}, gatedStore{make(chan struct{})}
	r := storeRunner{a, b}
	close(a.synced)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.waitForSync(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitForSync with one store of two synced, context cancelled: %v, want context.Canceled", err)
	}
	close(b.synced)
	if err := r.waitForSync(ctx); err != nil {
		t.Fatalf("waitForSync with every store synced: %v", err)
	}
}
