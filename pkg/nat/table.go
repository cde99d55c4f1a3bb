package nat

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Runner runs the nft binary: the only I/O of Table.
type Runner interface {
	// Nft runs nft with args, stdin as its standard input (none if
	// empty), and returns its standard output. The error carries nft's
	// standard error.
	Nft(ctx context.Context, stdin string, args ...string) ([]byte, error)
}

// SyncResult says what one Sync did.
type SyncResult struct {
	// Full: the table was replaced as a whole (first sync, after a
	// failure, after RequestFull, when the canary was gone, when the
	// egress range changed, or when an incremental transaction failed).
	Full bool
	// CanaryMissing: the table was found gone (an outside flush) at a
	// sync after the first.
	CanaryMissing bool
	// Added and Removed count map and set elements written; for a full
	// sync Added is every element.
	Added, Removed int
	// Elements is the number of elements the table holds afterwards.
	Elements int
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
		script, added, removed := canaryProbe, 0, 0
		if d != t.applied {
			script, added, removed = renderDiff(t.applied, d)
		}
		if _, err := t.run.Nft(ctx, script, "-f", "-"); err == nil {
			if d != t.applied {
				t.applied, t.appliedCfg = d, cfg.clone()
			}
			res.Added, res.Removed, res.Elements = added, removed, d.elementCount()
			t.observe("partial", start, res)
			return res, nil
		}
		// The table is gone, or our elements drifted so that the diff
		// does not apply: replace the whole table below.
		if _, err := t.run.Nft(ctx, canaryProbe, "-f", "-"); err != nil {
			res.CanaryMissing = true
			t.metrics.OutsideFlushes.Inc()
		}
	}
	res.Full = true
	if _, err := t.run.Nft(ctx, renderFull(d), "-f", "-"); err != nil {
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
	if _, err := t.run.Nft(ctx, renderCleanup(), "-f", "-"); err != nil {
		return fmt.Errorf("delete nftables table %s: %w", TableName, err)
	}
	t.metrics.Elements.Set(0)
	return nil
}

// Counts reads the table from the kernel and returns the number of
// elements of each of its sets and maps (by name).
func (t *Table) Counts(ctx context.Context) (map[string]int, error) {
	out, err := t.run.Nft(ctx, "", "-j", "list", "table", "ip", TableName)
	if err != nil {
		return nil, fmt.Errorf("list nftables table %s: %w", TableName, err)
	}
	return parseCounts(out)
}

// parseCounts reads `nft -j list table` output.
func parseCounts(out []byte) (map[string]int, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("parse nft json: %w", err)
	}
	counts := map[string]int{}
	for _, obj := range doc.Nftables {
		for _, kind := range []string{"set", "map"} {
			raw, ok := obj[kind]
			if !ok {
				continue
			}
			var s struct {
				Name string            `json:"name"`
				Elem []json.RawMessage `json:"elem"`
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("parse nft json %s: %w", kind, err)
			}
			counts[s.Name] = len(s.Elem)
		}
	}
	return counts, nil
}
