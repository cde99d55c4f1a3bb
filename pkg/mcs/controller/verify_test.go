package controller

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestSpread: a pass hands every key over once, in order, key i not
// before start + i×period/n; a cancelled context ends it early.
func TestSpread(t *testing.T) {
	var keys []types.NamespacedName
	for i := range 5 {
		keys = append(keys, types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)})
	}
	const period = 250 * time.Millisecond
	start := time.Now()
	var got []types.NamespacedName
	var at []time.Duration
	if !spread(context.Background(), keys, start, period, func(k types.NamespacedName) {
		got = append(got, k)
		at = append(at, time.Since(start))
	}) {
		t.Fatal("spread ended early without a cancelled context")
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("handed over %v, want %v", got, keys)
	}
	for i, d := range at {
		if due := period * time.Duration(i) / time.Duration(len(keys)); d < due {
			t.Errorf("key %d handed over after %s, before its time %s", i, d, due)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	if spread(ctx, keys, time.Now(), time.Hour, func(types.NamespacedName) { n++; cancel() }) {
		t.Error("spread went on after its context was cancelled")
	}
	if n != 1 {
		t.Errorf("%d keys handed over, want 1 (the first is due at once, the second an hour later)", n)
	}
}
