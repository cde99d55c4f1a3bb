package nat

import (
	"context"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/knftables"
)

// Runner is Table's access to nftables, bound to family ip and the table
// TableName: the only I/O of Table. NewNftRunner is the real one; tests
// run Table on knftables.Fake.
type Runner interface {
	// Run queues operations on a new knftables transaction with fill
	// (called once, before Run returns) and applies it as one `nft -f`:
	// all of it or, on error, nothing.
	Run(ctx context.Context, fill func(tx *knftables.Transaction)) error
	// ListElements returns the elements of the set or map name
	// (objectType "set" or "map"), as knftables.Interface.ListElements.
	ListElements(ctx context.Context, objectType, name string) ([]*knftables.Element, error)
}

// Table applies Configs to the table TableName through a Runner, one nft
// transaction per Sync. Safe for concurrent use (Syncs are serialised).
type Table struct {
	run     Runner
	metrics *Metrics

	mu         sync.Mutex
	applied    *desired // last successfully applied; nil = unknown
	appliedCfg Config   // the Config applied was compiled from (a copy)
	needFull   bool
}

// NewTable returns a Table applying through run and recording into m
// (NewMetrics(nil) if nil). Its first Sync is a full one.
func NewTable(run Runner, m *Metrics) *Table {
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Table{run: run, metrics: m}
}

// RequestFull makes the next Sync a full one (the caller's periodic
// resync, repairing element-level drift the canary cannot see).
func (t *Table) RequestFull() {
	t.mu.Lock()
	t.needFull = true
	t.mu.Unlock()
}

// Sync makes the table translate exactly cfg. An invalid cfg changes
// nothing. Otherwise Sync writes only the elements that differ from the
// last applied Config, in one transaction that also proves the table
// still exists (the canary probe); an equal Config costs the probe alone,
// which leaves the table as it was. When
// the incremental transaction fails or the table is gone, the same call
// replaces the whole table atomically. After a failed full sync the next
// Sync is full again.
func (t *Table) Sync(ctx context.Context, cfg Config) (SyncResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := time.Now()
	var res SyncResult
	incremental := t.applied != nil && !t.needFull
	d := t.applied
	if !incremental || !cfg.equal(t.appliedCfg) { // an equal input needs no compile or diff
		var err error
		if d, err = cfg.compile(); err != nil {
			t.metrics.SyncFailures.Inc()
			return SyncResult{}, err
		}
	}
	if incremental && d.snat == t.applied.snat && d.device == t.applied.device {
		added, removed := 0, 0
		err := t.run.Run(ctx, func(tx *knftables.Transaction) {
			probeCanary(tx)
			if d != t.applied {
				added, removed = addDiff(tx, t.applied, d)
			}
		})
		if err == nil {
			if d != t.applied {
				t.applied, t.appliedCfg = d, cfg.clone()
			}
			res.Added, res.Removed, res.Elements = added, removed, d.elementCount()
			t.observe("partial", start, res)
			return res, nil
		}
		// The table is gone, or our elements drifted so that the diff
		// does not apply: replace the whole table below.
		if err := t.run.Run(ctx, probeCanary); err != nil {
			res.CanaryMissing = true
			t.metrics.OutsideFlushes.Inc()
		}
	}
	res.Full = true
	if err := t.run.Run(ctx, func(tx *knftables.Transaction) { addFull(tx, d) }); err != nil {
		t.applied, t.needFull = nil, true
		t.metrics.SyncFailures.Inc()
		return res, fmt.Errorf("replace nftables table %s: %w", TableName, err)
	}
	t.applied, t.appliedCfg, t.needFull = d, cfg.clone(), false
	res.Added, res.Elements = d.elementCount(), d.elementCount()
	t.observe("full", start, res)
	return res, nil
}

func (t *Table) observe(mode string, start time.Time, res SyncResult) {
	t.metrics.SyncDuration.WithLabelValues(mode).Observe(time.Since(start).Seconds())
	t.metrics.Elements.Set(float64(res.Elements))
	t.metrics.LastSuccess.SetToCurrentTime()
}

// Cleanup deletes the table (absent is fine); the next Sync is full.
func (t *Table) Cleanup(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.applied, t.needFull = nil, true
	if err := t.run.Run(ctx, addCleanup); err != nil {
		return fmt.Errorf("delete nftables table %s: %w", TableName, err)
	}
	t.metrics.Elements.Set(0)
	return nil
}

// Present reports whether the table is in the kernel, with one nft call
// (the elements of its set SetRemote) where Counts makes one per set.
func (t *Table) Present(ctx context.Context) bool {
	_, err := t.run.ListElements(ctx, "set", SetRemote)
	return err == nil
}

// Counts reads the table from the kernel and returns the number of
// elements of each of its sets and maps (by name); an error if the table
// or one of them is missing.
func (t *Table) Counts(ctx context.Context) (map[string]int, error) {
	kinds := elemKinds()
	counts := map[string]int{}
	for _, name := range setNames() {
		objectType := "map"
		if kinds[name] == kindPrefix {
			objectType = "set"
		}
		els, err := t.run.ListElements(ctx, objectType, name)
		if err != nil {
			return nil, fmt.Errorf("list %s %s of nftables table %s: %w", objectType, name, TableName, err)
		}
		counts[name] = len(els)
	}
	return counts, nil
}
