package controller

import (
	"context"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// runVerify re-checks every Service this cluster exports or imports once
// per ResyncPeriod, spread evenly over the period (one pass: the keys
// known at its start, the next one due period/len(keys) after the last).
// The caches report changes only, never every object again on a timer:
// a full resync queued each Service once per cache that names it — once
// per exporting cluster for the records — all at the same moment, and
// each sync merges every cluster's record, so its cost grew with the
// square of the ClusterSet's size. This pass costs one sync per Service
// and period at a steady rate, and catches what an event missed. It runs
// on the leader only.
func (c *Controller) runVerify(ctx context.Context) error {
	period := c.cfg.ResyncPeriod
	for {
		start := time.Now()
		keys := c.verifyKeys()
		if !spread(ctx, keys, start, period, c.requeue.add) {
			return nil
		}
		c.log.Debug("queued every Service for a re-check", "services", len(keys), "took", time.Since(start).Round(time.Millisecond))
		if !sleepUntil(ctx, start.Add(period)) {
			return nil
		}
	}
}

// spread hands keys to add in order, key i at start + i×period/len(keys);
// false when ctx ended first.
func spread(ctx context.Context, keys []types.NamespacedName, start time.Time, period time.Duration, add func(types.NamespacedName)) bool {
	for i, key := range keys {
		if !sleepUntil(ctx, start.Add(period*time.Duration(i)/time.Duration(len(keys)))) {
			return false
		}
		add(key)
	}
	return true
}

// verifyKeys returns the Services exported or imported here, or that the
// controller remembers (VIPs held), each once.
func (c *Controller) verifyKeys() []types.NamespacedName {
	keys := map[types.NamespacedName]bool{}
	for _, k := range c.stores.exports.Keys() {
		keys[k] = true
	}
	for _, k := range c.stores.imports.Keys() {
		keys[k] = true
	}
	c.mu.Lock()
	for k := range c.services {
		keys[k] = true
	}
	c.mu.Unlock()
	return slices.Collect(maps.Keys(keys))
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
