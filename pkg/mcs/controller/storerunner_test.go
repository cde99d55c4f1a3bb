package controller

import (
	"context"
	"errors"
	"testing"
	"time"
)

// gatedStore is a store whose initial list arrives when synced is closed.
type gatedStore struct{ synced chan struct{} }

func (gatedStore) Run(ctx context.Context) { <-ctx.Done() }

func (s gatedStore) WaitForSync(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestStoreRunnerWaitsForEveryStore: waitForSync returns only once every
// store has synced, and with an error when the context ends first.
func TestStoreRunnerWaitsForEveryStore(t *testing.T) {
	a, b := gatedStore{make(chan struct{})}, gatedStore{make(chan struct{})}
	r := storeRunner{a, b}
	done := make(chan error, 1)
	go func() { done <- r.waitForSync(context.Background()) }()
	close(a.synced)
	select {
	case err := <-done:
		t.Fatalf("waitForSync returned (%v) with one store of two synced", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(b.synced)
	if err := <-done; err != nil {
		t.Fatalf("waitForSync with every store synced: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (storeRunner{gatedStore{make(chan struct{})}}).waitForSync(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitForSync of a store that never syncs, context cancelled: %v, want context.Canceled", err)
	}
}
