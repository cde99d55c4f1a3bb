package reach

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestBoardLongPoll(t *testing.T) {
	b := NewBoard()
	srv := httptest.NewServer(b)
	defer srv.Close()
	f := &Follower{Addr: func() string { return strings.TrimPrefix(srv.URL, "http://") }}

	v0, err := f.get(context.Background(), f.Addr(), 0)
	if err != nil || len(v0.Unreachable) != 0 || v0.Version == 0 {
		t.Fatalf("first get = %+v, %v; want an empty verdict at once", v0, err)
	}
	if b.Set([]string{"c2", "c1", "c2"}) != true || b.Set([]string{"c1", "c2"}) != false {
		t.Fatal("Set: want a change, then none")
	}
	v1, err := f.get(context.Background(), f.Addr(), v0.Version)
	if err != nil || v1.Version == v0.Version || strings.Join(v1.Unreachable, ",") != "c1,c2" {
		t.Fatalf("get after Set = %+v, %v", v1, err)
	}
	// A current version waits for the next change.
	go func() { time.Sleep(100 * time.Millisecond); b.Set([]string{"c1"}) }()
	v2, err := f.get(context.Background(), f.Addr(), v1.Version)
	if err != nil || strings.Join(v2.Unreachable, ",") != "c1" {
		t.Fatalf("long poll = %+v, %v", v2, err)
	}
	if resp, err := srv.Client().Get(srv.URL + Path + "?version=x"); err != nil || resp.StatusCode != 400 {
		t.Errorf("bad version: %v %v", resp, err)
	}
}

func TestFollower(t *testing.T) {
	b := NewBoard()
	srv := httptest.NewServer(b)
	defer srv.Close()
	var addr atomic.Value
	addr.Store(strings.TrimPrefix(srv.URL, "http://"))
	changes := make(chan struct{}, 10)
	f := &Follower{Addr: func() string { return addr.Load().(string) }, OnChange: func() { changes <- struct{}{} }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.Run(ctx)

	b.Set([]string{"c1"})
	select {
	case <-changes:
	case <-time.After(time.Second):
		t.Fatal("no change within 1 s of Set")
	}
	if u := f.Unreachable(); !u["c1"] || len(u) != 1 {
		t.Fatalf("Unreachable = %v, want c1", u)
	}
	// A verdict not heard for StaleAfter is forgotten.
	f.mu.Lock()
	stale := f.current(f.heard.Add(StaleAfter + time.Millisecond))
	f.mu.Unlock()
	if len(stale) != 0 {
		t.Errorf("stale verdict kept: %v", stale)
	}
	// No gateway known: nothing is unreachable.
	addr.Store("")
	select {
	case <-changes:
	case <-time.After(3 * MaxWait):
		t.Fatal("no change after the gateway went away")
	}
	if u := f.Unreachable(); len(u) != 0 {
		t.Errorf("Unreachable without a gateway = %v", u)
	}
}
