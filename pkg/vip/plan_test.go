package vip

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"
)

func svc(vip string, port uint16, p Proto) ServiceKey {
	return ServiceKey{VIP: netip.MustParseAddr(vip), Port: port, Proto: p}
}

func be(s string) Backend {
	ap := netip.MustParseAddrPort(s)
	return Backend{Addr: ap.Addr(), Port: ap.Port()}
}

// states are desired states replayed in every order by TestFakeConverges.
var states = map[string]map[ServiceKey][]Backend{
	"empty": {},
	"one": {
		svc("243.0.0.1", 80, TCP): {be("10.96.0.10:80")},
	},
	"two-clusters": {
		svc("243.0.0.1", 80, TCP): {be("10.96.0.10:80"), be("242.1.0.1:30001")},
		svc("243.0.0.1", 53, UDP): {be("10.96.0.11:53")},
	},
	"reordered-duplicates": {
		svc("243.0.0.1", 80, TCP): {be("242.1.0.1:30001"), be("10.96.0.10:80"), be("242.1.0.1:30001")},
		svc("243.0.0.1", 53, UDP): {be("10.96.0.11:53")},
	},
	"no-backends": {
		svc("243.0.0.1", 80, TCP): {},
		svc("243.0.0.2", 80, TCP): {be("10.96.0.12:8080"), be("10.96.0.13:8080"), be("10.96.0.14:8080")},
	},
	"many": func() map[ServiceKey][]Backend {
		m := map[ServiceKey][]Backend{}
		for i := range 50 {
			k := svc(fmt.Sprintf("243.0.1.%d", i), 443, TCP)
			for j := range i % 5 {
				m[k] = append(m[k], be(fmt.Sprintf("10.97.%d.%d:443", i, j)))
			}
		}
		return m
	}(),
}

// checkImplements asserts the fake's maps implement desired exactly: every
// service resolves, for every hash, to backend (hash % n) of its canonical
// list (EHOSTUNREACH when empty), other destinations pass through, and no
// entry is left that no service uses.
func checkImplements(t *testing.T, f *Fake, desired map[ServiceKey][]Backend) {
	t.Helper()
	for k, bes := range desired {
		want := canonical(bes)
		for h := range uint32(7) {
			got, ok, err := f.Lookup(k, h)
			if !ok {
				t.Fatalf("%s: not a service", k)
			}
			if len(want) == 0 {
				if !errors.Is(err, ErrNoBackends) {
					t.Fatalf("%s: lookup = %v, %v; want ErrNoBackends", k, got, err)
				}
				continue
			}
			if err != nil || got != want[h%uint32(len(want))] {
				t.Fatalf("%s hash %d: lookup = %v, %v; want %v", k, h, got, err, want[h%uint32(len(want))])
			}
		}
	}
	if _, ok, _ := f.Lookup(svc("243.15.255.254", 1, TCP), 0); ok {
		t.Fatal("a destination that is no service resolved")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.maps.services) != len(desired) {
		t.Fatalf("%d service entries, want %d", len(f.maps.services), len(desired))
	}
	n := 0
	for _, bes := range desired {
		n += len(canonical(bes))
	}
	if len(f.maps.backends) != n {
		t.Fatalf("%d backend entries, want %d (stale entries left)", len(f.maps.backends), n)
	}
}

// TestFakeConverges applies every ordered pair of states, in random walks,
// and checks the maps implement the last one and that re-applying it writes
// nothing.
func TestFakeConverges(t *testing.T) {
	names := make([]string, 0, len(states))
	for n := range states {
		names = append(names, n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for walk := range 20 {
		f := NewFake(Limits{})
		prev := "empty"
		for range 15 {
			name := names[rng.IntN(len(names))]
			if err := f.Set(context.Background(), states[name]); err != nil {
				t.Fatalf("walk %d: %s -> %s: %v", walk, prev, name, err)
			}
			checkImplements(t, f, states[name])
			if err := f.Set(context.Background(), states[name]); err != nil {
				t.Fatal(err)
			}
			if ops := f.LastOps(); ops.Total() != 0 {
				t.Fatalf("walk %d: re-applying %s wrote %+v", walk, name, ops)
			}
			prev = name
		}
	}
}

// TestPlanOrderNeverExposesMissingBackends applies each diff step by step
// and checks that, after every step, each service resolves every slot to a
// backend of its old or its new list — what a concurrent connect() sees.
func TestPlanOrderNeverExposesMissingBackends(t *testing.T) {
	for from, a := range states {
		for to, b := range states {
			cur := newMapState()
			applyOps(cur, plan(cur, a))
			o := plan(cur, b)
			steps := []ops{
				{putBackends: o.putBackends},
				{putServices: o.putServices},
				{deleteServices: o.deleteServices},
				{deleteBackends: o.deleteBackends},
			}
			for i, step := range steps {
				applyOps(cur, step)
				for k, s := range cur.services {
					for slot := range s.Count {
						got, ok := cur.backends[backendKey{ID: s.ID, Slot: slot}]
						if !ok {
							t.Fatalf("%s -> %s after step %d: %s slot %d missing", from, to, i, k, slot)
						}
						if !contains(a[k], got) && !contains(b[k], got) {
							t.Fatalf("%s -> %s after step %d: %s slot %d is %v, in neither list", from, to, i, k, slot, got)
						}
					}
				}
			}
		}
	}
}

func contains(bes []Backend, b Backend) bool {
	for _, x := range bes {
		if x == b {
			return true
		}
	}
	return false
}

// TestIncrementalIsOChanged checks that one change among 10 000 services
// writes only that service's entries.
func TestIncrementalIsOChanged(t *testing.T) {
	desired := map[ServiceKey][]Backend{}
	for i := range 10000 {
		k := svc(fmt.Sprintf("243.0.%d.%d", i/250, i%250), 80, TCP)
		desired[k] = []Backend{be(fmt.Sprintf("10.96.%d.%d:80", i/250, i%250)), be(fmt.Sprintf("242.1.%d.%d:%d", i/250, i%250, 30000+i%1000))}
	}
	f := NewFake(Limits{})
	ctx := context.Background()
	if err := f.Set(ctx, desired); err != nil {
		t.Fatal(err)
	}
	if got, want := f.LastOps(), (OpCounts{PutServices: 10000, PutBackends: 20000}); got != want {
		t.Fatalf("from empty: %+v, want %+v", got, want)
	}
	k := svc("243.0.7.7", 80, TCP)
	cases := []struct {
		name   string
		change func()
		want   OpCounts
	}{
		{"remove a backend", func() { desired[k] = desired[k][:1] }, OpCounts{PutServices: 1, DeleteBackends: 1}},
		{"add it back", func() { desired[k] = append(desired[k], be("242.1.7.7:31757")) }, OpCounts{PutServices: 1, PutBackends: 1}},
		{"replace a backend", func() { desired[k] = []Backend{be("10.96.7.7:80"), be("242.2.0.1:30000")} }, OpCounts{PutBackends: 1}},
		{"no backends", func() { desired[k] = nil }, OpCounts{PutServices: 1, DeleteBackends: 2}},
		{"delete the service", func() { delete(desired, k) }, OpCounts{DeleteServices: 1}},
		{"add a service", func() { desired[svc("243.1.0.1", 8080, UDP)] = []Backend{be("10.96.200.1:53")} }, OpCounts{PutServices: 1, PutBackends: 1}},
		{"nothing", func() {}, OpCounts{}},
	}
	for _, c := range cases {
		c.change()
		if err := f.Set(ctx, desired); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := f.LastOps(); got != c.want {
			t.Errorf("%s: wrote %+v, want %+v", c.name, got, c.want)
		}
	}
	checkImplements(t, f, desired)
}

// TestSetRecoversFromHalfWrittenMaps starts from what a daemon killed in the
// middle of a sync may leave (orphan backends, a count larger than the slots
// present) and checks one Set repairs it without reusing an orphan's ID.
func TestSetRecoversFromHalfWrittenMaps(t *testing.T) {
	f := NewFake(Limits{})
	kept := svc("243.0.0.1", 80, TCP)
	f.maps.services[kept] = service{ID: 1, Count: 3}
	f.maps.backends[backendKey{1, 0}] = be("10.0.0.1:80")
	f.maps.backends[backendKey{2, 0}] = be("10.0.0.9:80") // orphan of a service never published
	desired := map[ServiceKey][]Backend{
		kept:                      {be("10.0.0.1:80"), be("10.0.0.2:80")},
		svc("243.0.0.2", 80, TCP): {be("10.0.0.3:80")},
	}
	if err := f.Set(context.Background(), desired); err != nil {
		t.Fatal(err)
	}
	checkImplements(t, f, desired)
	if id := f.maps.services[svc("243.0.0.2", 80, TCP)].ID; id != 3 {
		t.Errorf("new service got ID %d, want 3 (1 is in use, 2 has an orphan backend)", id)
	}
}

func TestSetRejectsInvalid(t *testing.T) {
	good := map[ServiceKey][]Backend{svc("243.0.0.1", 80, TCP): {be("10.0.0.1:80")}}
	bad := map[string]map[ServiceKey][]Backend{
		"IPv6 VIP":     {svc("fd00::1", 80, TCP): {be("10.0.0.1:80")}},
		"IPv6 backend": {svc("243.0.0.1", 80, TCP): {be("[fd00::1]:80")}},
		"port 0":       {svc("243.0.0.1", 0, TCP): {be("10.0.0.1:80")}},
		"backend port": {svc("243.0.0.1", 80, TCP): {be("10.0.0.1:0")}},
		"SCTP":         {svc("243.0.0.1", 80, Proto(132)): {be("10.0.0.1:80")}},
		"too many services": {
			svc("243.0.0.1", 80, TCP): nil, svc("243.0.0.2", 80, TCP): nil, svc("243.0.0.3", 80, TCP): nil,
		},
		"too many backends": {svc("243.0.0.1", 80, TCP): {be("10.0.0.1:1"), be("10.0.0.1:2"), be("10.0.0.1:3"), be("10.0.0.1:4"), be("10.0.0.1:5")}},
	}
	for name, desired := range bad {
		f := NewFake(Limits{Services: 2, Backends: 4})
		if err := f.Set(context.Background(), good); err != nil {
			t.Fatal(err)
		}
		err := f.Set(context.Background(), desired)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
		if got := f.Services(); !reflect.DeepEqual(got, good) {
			t.Errorf("%s: a refused Set changed the maps to %v", name, got)
		}
	}
}
