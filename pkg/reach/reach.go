// Package reach carries the active gateway's verdict on which remote
// clusters are unreachable — every health check through the tunnel to
// them silent — to the route agents of its cluster, over the node
// network and without any API server, so that every node stops choosing
// those clusters' VIP backends within a second of the tunnel going
// silent.
//
// The gateway holds a Board and serves it on its health listener
// (Path); every route agent runs a Follower against the active gateway
// node. The request is a long poll: it returns at once when the board
// changed since the version the follower names, else after MaxWait with
// the same verdict (a heartbeat). A follower that has heard nothing for
// StaleAfter forgets the verdict: an old "unreachable" never outlives
// the gateway that said it.
package reach

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// DefaultGatewayPort is the gateway's default health port (its
// --health-addr), where it serves the board.
const DefaultGatewayPort = 9541

// Path is where the gateway serves its board.
const Path = "/reach/v1/unreachable"

// MaxWait is how long the gateway holds a request whose version is
// current before answering it unchanged.
const MaxWait = 2 * time.Second

// StaleAfter is how long a follower keeps a verdict without hearing from
// the gateway.
const StaleAfter = 5 * time.Second

// Verdict is what the board says.
type Verdict struct {
	// Version changes with every change of Unreachable. It starts at the
	// board's creation time (Unix ns), so versions of two gateway
	// processes do not collide.
	Version uint64 `json:"version"`
	// Unreachable are the IDs of the remote clusters every tunnel to
	// which failed its health checks, sorted.
	Unreachable []string `json:"unreachable"`
}

// Board is the gateway's side: the current verdict and its waiters.
type Board struct {
	mu      sync.Mutex
	v       Verdict
	changed chan struct{} // closed and replaced on every change
}

// NewBoard returns a board saying every remote is reachable.
func NewBoard() *Board {
	return &Board{v: Verdict{Version: uint64(time.Now().UnixNano()), Unreachable: []string{}}, changed: make(chan struct{})}
}

// Set replaces the unreachable clusters; it reports whether they changed.
func (b *Board) Set(unreachable []string) bool {
	u := slices.Sorted(slices.Values(unreachable))
	u = slices.Compact(u)
	if u == nil {
		u = []string{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if slices.Equal(u, b.v.Unreachable) {
		return false
	}
	b.v = Verdict{Version: b.v.Version + 1, Unreachable: u}
	close(b.changed)
	b.changed = make(chan struct{})
	return true
}

// Get returns the current verdict.
func (b *Board) Get() Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.v
}

// ServeHTTP answers GET Path?version=N: at once when the verdict's
// version is not N, else when it changes or after MaxWait.
func (b *Board) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	var seen uint64
	if s := r.URL.Query().Get("version"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			http.Error(w, "version: not a number", http.StatusBadRequest)
			return
		}
		seen = n
	}
	b.mu.Lock()
	v, changed := b.v, b.changed
	b.mu.Unlock()
	if v.Version == seen {
		t := time.NewTimer(MaxWait)
		defer t.Stop()
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		v = b.Get()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Follower is the route agent's side: it follows the board of the active
// gateway and calls its onChange after every change of Unreachable.
type Follower struct {
	// Addr returns the active gateway's host:port ("" while none is
	// known).
	Addr     func() string
	OnChange func()
	Log      *slog.Logger
	// Client defaults to one whose timeout is MaxWait plus a margin.
	Client *http.Client

	mu     sync.Mutex
	from   string // the address the verdict came from
	v      Verdict
	heard  time.Time // last answer from `from`
	failed bool      // the last request failed (logged once)
}

// Unreachable returns the clusters the active gateway calls unreachable:
// none while no gateway is known, or when the gateway has not answered
// for StaleAfter.
func (f *Follower) Unreachable() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current(time.Now())
}

func (f *Follower) current(now time.Time) map[string]bool {
	if f.from == "" || now.Sub(f.heard) > StaleAfter {
		return nil
	}
	out := make(map[string]bool, len(f.v.Unreachable))
	for _, id := range f.v.Unreachable {
		out[id] = true
	}
	return out
}

// retryDelay is the pause after a failed request.
const retryDelay = 200 * time.Millisecond

// Run follows the board until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	if f.Log == nil {
		f.Log = slog.New(slog.DiscardHandler)
	}
	for ctx.Err() == nil {
		addr := f.Addr()
		f.mu.Lock()
		version := f.v.Version
		if addr != f.from {
			version = 0
		}
		f.mu.Unlock()
		if addr == "" {
			f.update(ctx, "", Verdict{}, nil)
			sleep(ctx, retryDelay)
			continue
		}
		v, err := f.get(ctx, addr, version)
		f.update(ctx, addr, v, err)
		if err != nil {
			sleep(ctx, retryDelay)
		}
	}
}

// update records the outcome of one request and calls OnChange when the
// verdict Unreachable returns changed.
func (f *Follower) update(ctx context.Context, addr string, v Verdict, err error) {
	now := time.Now()
	f.mu.Lock()
	before := f.current(now)
	switch {
	case err != nil && ctx.Err() == nil:
		if !f.failed {
			f.Log.Warn("gateway reachability verdict unavailable", "gateway", addr, "err", err)
		}
		f.failed = true
		if addr != f.from {
			f.from, f.v = "", Verdict{}
		}
	case err == nil:
		if f.failed && addr != "" {
			f.Log.Info("gateway reachability verdict available again", "gateway", addr)
		}
		f.from, f.v, f.heard, f.failed = addr, v, now, false
	}
	after := f.current(now)
	f.mu.Unlock()
	if !sameSet(before, after) {
		f.Log.Info("remote clusters unreachable per the active gateway", "gateway", addr, "unreachable", slices.Sorted(maps.Keys(after)))
		if f.OnChange != nil {
			f.OnChange()
		}
	}
}

func (f *Follower) get(ctx context.Context, addr string, version uint64) (Verdict, error) {
	url := fmt.Sprintf("http://%s%s?version=%d", addr, Path, version)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Verdict{}, err
	}
	c := f.Client
	if c == nil {
		c = &http.Client{Timeout: MaxWait + 2*time.Second}
	}
	resp, err := c.Do(req)
	if err != nil {
		return Verdict{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Verdict{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var v Verdict
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&v); err != nil {
		return Verdict{}, fmt.Errorf("GET %s: %w", url, err)
	}
	return v, nil
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
