package mcs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestDefaultVIPRange(t *testing.T) {
	r, err := ParseVIPRange(DefaultVIPRange)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 1<<20-2 {
		t.Errorf("size = %d, want 2^20-2", r.Size())
	}
	for _, p := range []string{"242.0.0.0/8", "198.18.0.0/15", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"} {
		if r.Overlaps(netip.MustParsePrefix(p)) {
			t.Errorf("default range overlaps %s", p)
		}
	}
	for addr, want := range map[string]bool{
		"243.0.0.0":        false, // first address of the block
		"243.0.0.1":        true,
		"243.15.255.254":   true,
		"243.15.255.255":   false, // last address of the block
		"243.16.0.1":       false,
		"10.0.0.1":         false,
		"::ffff:243.0.0.1": false,
	} {
		if got := r.Contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestParseVIPRangeRejects(t *testing.T) {
	for _, s := range []string{
		"nonsense",
		"243.0.0.1/12",   // host bits
		"127.0.0.0/16",   // loopback
		"224.0.0.0/24",   // multicast
		"169.254.0.0/24", // link-local
		"0.0.0.0/0",      // everything
		"243.0.0.0/31",   // no usable address
		"243.0.0.0/32",
		"ff02::/64",
	} {
		if _, err := ParseVIPRange(s); err == nil {
			t.Errorf("ParseVIPRange(%q) accepted", s)
		}
	}
	if r, err := ParseVIPRange("243.0.0.0/30"); err != nil || r.Size() != 2 {
		t.Errorf("/30: %v, size %d, want 2", err, r.Size())
	}
}

func TestCandidates(t *testing.T) {
	for _, cidr := range []string{"243.0.0.0/29", "fd00:cafe::/124", "fd00:cafe::/64"} {
		t.Run(cidr, func(t *testing.T) {
			r := MustParseVIPRange(cidr)
			var got []netip.Addr
			for a := range r.Candidates("ns", "svc") {
				if !r.Contains(a) {
					t.Fatalf("candidate %s outside %s", a, cidr)
				}
				got = append(got, a)
				if len(got) == 20 { // enough for the huge range
					break
				}
			}
			want := min(r.Size(), 20)
			if uint64(len(got)) != want {
				t.Fatalf("%d candidates, want %d", len(got), want)
			}
			sorted := slices.Clone(got)
			slices.SortFunc(sorted, netip.Addr.Compare)
			if len(slices.Compact(sorted)) != len(got) {
				t.Errorf("duplicate candidates: %v", got)
			}
			var again []netip.Addr
			for a := range r.Candidates("ns", "svc") {
				if again = append(again, a); len(again) == 2 {
					break
				}
			}
			if again[0] != got[0] || again[1] != got[1] {
				t.Errorf("candidate order not deterministic: %v then %v", got[:2], again[:2])
			}
			if rk, ok := r.rank("ns", "svc", got[0]); !ok || rk != 0 {
				t.Errorf("rank of first candidate = %d, %v", rk, ok)
			}
			if rk, _ := r.rank("ns", "svc", got[1]); rk != 1 {
				t.Errorf("rank of second candidate = %d", rk)
			}
		})
	}
}

// TestCandidatesSpread checks that different Services usually start at
// different addresses, so concurrent allocators rarely collide.
func TestCandidatesSpread(t *testing.T) {
	r := MustParseVIPRange(DefaultVIPRange)
	first := map[netip.Addr]bool{}
	const n = 2000
	for i := range n {
		for a := range r.Candidates("ns", fmt.Sprintf("svc-%d", i)) {
			first[a] = true
			break
		}
	}
	// 2000 services over 2^20 addresses: about 2 birthday collisions.
	if len(first) < n-10 {
		t.Errorf("only %d distinct first candidates for %d services", len(first), n)
	}
}

func TestVIPObjectName(t *testing.T) {
	for addr, name := range map[string]string{
		"243.0.1.2":    "243.0.1.2",
		"fd00:cafe::1": "v6-fd00-cafe-0000-0000-0000-0000-0000-0001",
	} {
		a := netip.MustParseAddr(addr)
		if got := VIPObjectName(a); got != name {
			t.Errorf("VIPObjectName(%s) = %q, want %q", addr, got, name)
		}
		if back, err := ParseVIPObjectName(name); err != nil || back != a {
			t.Errorf("ParseVIPObjectName(%q) = %s, %v", name, back, err)
		}
	}
	for _, bad := range []string{"243.000.1.2", "v6-fd00--1", "v6-zz", "svc", "::1"} {
		if _, err := ParseVIPObjectName(bad); err == nil {
			t.Errorf("ParseVIPObjectName(%q) accepted", bad)
		}
	}
}

func nn(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

func firstCandidate(r VIPRange, svc types.NamespacedName) netip.Addr {
	for a := range r.Candidates(svc.Namespace, svc.Name) {
		return a
	}
	return netip.Addr{}
}

func TestVIPAllocator(t *testing.T) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/24")
	m := newMemVIPs()
	a := NewVIPAllocator(r, m.store("c1"), "c1")
	exp := exporting("c1")

	vip, err := a.Allocate(ctx, nn("web"), exp, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if vip != firstCandidate(r, nn("web")) {
		t.Errorf("vip = %s, want the first candidate %s", vip, firstCandidate(r, nn("web")))
	}
	if again, err := a.Allocate(ctx, nn("web"), exp, netip.Addr{}); err != nil || again != vip {
		t.Errorf("second Allocate = %s, %v; want %s", again, err, vip)
	}
	// A restarted allocator (new instance, same broker) finds it.
	if again, err := NewVIPAllocator(r, m.store("c1"), "c1").Allocate(ctx, nn("web"), exp, netip.Addr{}); err != nil || again != vip {
		t.Errorf("after restart = %s, %v; want %s", again, err, vip)
	}
	if m.Len() != 1 {
		t.Errorf("%d allocations, want 1", m.Len())
	}

	// A Service whose first candidate is taken gets the next free one.
	if _, err := m.put(firstCandidate(r, nn("api")), nn("other"), "c1"); err != nil {
		t.Fatal(err)
	}
	api, err := a.Allocate(ctx, nn("api"), exp, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if api == firstCandidate(r, nn("api")) || api == vip {
		t.Errorf("api got %s, which is taken", api)
	}
	if rk, _ := r.rank("ns", "api", api); rk != 1 && api != vip {
		// the second candidate, unless that one is web's
		t.Errorf("api got candidate #%d, want #1", rk)
	}

	if err := a.Release(ctx, nn("web")); err != nil {
		t.Fatal(err)
	}
	if h, ok, _ := m.store("c1").Holder(ctx, vip); ok {
		t.Errorf("%s still held by %s after release", vip, h.Service)
	}
}

// TestVIPAllocatorOwnership: what counts as a Service's allocation, step
// by step against one broker. Each step lets one cluster allocate (or a
// member write by hand) and says what every cluster then holds as the
// Service's VIP, by candidate number (-1: none, ErrVIPPending).
func TestVIPAllocatorOwnership(t *testing.T) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/24")
	web := nn("web")
	cand := slices.Collect(r.Candidates(web.Namespace, web.Name))
	epoch := time.Unix(1_000_000, 0)
	at := func(sec int) time.Time { return epoch.Add(time.Duration(sec) * time.Second) }
	type step struct {
		what string
		// First a member's deletions by hand (remove, by candidate) and a
		// hand-written allocation (put), then the clusters that allocate,
		// each with its last VIP (by candidate, -1 none).
		remove    []int
		put       *VIPHold
		allocate  map[string]int
		exporters map[string]time.Time
		want      map[string]int // cluster -> candidate of its VIP, -1: pending
		holds     []int          // candidates held for web afterwards, any owner
	}
	hold := func(c int, svc types.NamespacedName, owner string) *VIPHold {
		return &VIPHold{Addr: cand[c], Service: svc, Owner: owner}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "squat by a member that does not export", steps: []step{
			{what: "c9 squats web's first candidate", put: hold(0, web, "c9"), holds: []int{0}},
			{what: "c1 exports: skips the squat", allocate: map[string]int{"c1": -1, "c3": -1}, exporters: map[string]time.Time{"c1": at(10)},
				want: map[string]int{"c1": 1, "c3": 1}, holds: []int{0, 1}},
			{what: "c9 deletes its squat: nothing moves", remove: []int{0}, allocate: map[string]int{"c1": 1, "c3": 1},
				exporters: map[string]time.Time{"c1": at(10)}, want: map[string]int{"c1": 1, "c3": 1}, holds: []int{1}},
			{what: "c9 squats again, then exports web: its allocation counts from its record, after c1's", put: hold(0, web, "c9"),
				allocate: map[string]int{"c1": 1, "c3": 1}, exporters: map[string]time.Time{"c1": at(10), "c9": at(100)},
				want: map[string]int{"c1": 1, "c3": 1}, holds: []int{0, 1}},
		}},
		{name: "a squat whose owner exports in the same second as the first claim", steps: []step{
			{what: "c9 squats web's first candidate", put: hold(0, web, "c9"), holds: []int{0}},
			{what: "c1 exports and claims the second", allocate: map[string]int{"c1": -1}, exporters: map[string]time.Time{"c1": at(0)},
				want: map[string]int{"c1": 1}, holds: []int{0, 1}},
			{what: "c9's record of the same second as c1's claim: the squat predates it and loses the tie",
				allocate: map[string]int{"c1": 1, "c3": -1}, exporters: map[string]time.Time{"c1": at(0), "c9": at(2)},
				want: map[string]int{"c1": 1, "c3": 1}, holds: []int{0, 1}},
		}},
		{name: "an exporter cannot move the VIP to an earlier candidate", steps: []step{
			{what: "c9 holds web's first candidate for another Service", put: hold(0, nn("api"), "c9")},
			{what: "c1 allocates the second", allocate: map[string]int{"c1": -1, "c3": -1}, exporters: map[string]time.Time{"c1": at(0), "c9": at(0)},
				want: map[string]int{"c1": 1, "c3": 1}, holds: []int{1}},
			{what: "c9 frees the first and takes it for web: younger, ignored", remove: []int{0}, put: hold(0, web, "c9"),
				allocate: map[string]int{"c1": 1, "c3": 1}, exporters: map[string]time.Time{"c1": at(0), "c9": at(0)},
				want: map[string]int{"c1": 1, "c3": 1}, holds: []int{0, 1}},
			{what: "and back: nothing moves", remove: []int{0}, put: hold(0, nn("api"), "c9"),
				allocate: map[string]int{"c1": 1, "c3": 1}, exporters: map[string]time.Time{"c1": at(0), "c9": at(0)},
				want: map[string]int{"c1": 1, "c3": 1}, holds: []int{1}},
		}},
		{name: "the older allocation wins over the earlier candidate", steps: []step{
			{what: "c2 (exporting) holds candidate 3", put: hold(3, web, "c2"), holds: []int{3}},
			{what: "c1 (exporting) writes candidate 0 later", put: hold(0, web, "c1"), holds: []int{0, 3}},
			{what: "all keep c2's, c1 releases its own", allocate: map[string]int{"c1": -1, "c2": -1, "c3": -1},
				exporters: map[string]time.Time{"c1": at(0), "c2": at(0)}, want: map[string]int{"c1": 3, "c2": 3, "c3": 3}, holds: []int{3}},
		}},
		{name: "raced allocations of the same age: the earlier candidate", steps: []step{
			{what: "c2 and c1 both claimed", put: hold(7, web, "c2"), holds: []int{7}},
			{what: "", put: hold(3, web, "c1"), holds: []int{3, 7}},
			{what: "all keep candidate 3, c2 releases 7", allocate: map[string]int{"c1": -1, "c2": -1, "c3": -1},
				exporters: map[string]time.Time{"c1": at(100), "c2": at(100)}, want: map[string]int{"c1": 3, "c2": 3, "c3": 3}, holds: []int{3}},
		}},
		{name: "importers that do not export never claim", steps: []step{
			{what: "no exporter has allocated", allocate: map[string]int{"c3": -1}, exporters: map[string]time.Time{"c1": at(0)},
				want: map[string]int{"c3": -1}, holds: nil},
			{what: "its last VIP is kept while free", allocate: map[string]int{"c3": 5}, exporters: map[string]time.Time{"c1": at(0)},
				want: map[string]int{"c3": 5}, holds: nil},
			{what: "but not once another Service holds it", put: hold(5, nn("api"), "c1"), allocate: map[string]int{"c3": 5},
				exporters: map[string]time.Time{"c1": at(0)}, want: map[string]int{"c3": -1}, holds: nil},
		}},
		{name: "hand-off when the owner stops exporting", steps: []step{
			{what: "c1 and c2 export, c1 allocated", allocate: map[string]int{"c1": -1, "c2": -1},
				exporters: map[string]time.Time{"c1": at(0), "c2": at(0)}, want: map[string]int{"c1": 0, "c2": 0}, holds: []int{0}},
			{what: "c1 stops exporting: it releases its allocation, keeps its last VIP meanwhile", allocate: map[string]int{"c1": 0},
				exporters: map[string]time.Time{"c2": at(0)}, want: map[string]int{"c1": 0}, holds: nil},
			{what: "c2 claims the same address", allocate: map[string]int{"c2": 0, "c1": 0, "c3": 0},
				exporters: map[string]time.Time{"c2": at(0)}, want: map[string]int{"c2": 0, "c1": 0, "c3": 0}, holds: []int{0}},
		}},
		{name: "the broker administrator's allocation counts", steps: []step{
			{what: "admin allocates candidate 2", put: hold(2, web, ""), holds: []int{2}},
			{what: "everyone adopts it", allocate: map[string]int{"c1": -1, "c3": -1}, exporters: map[string]time.Time{"c1": at(0)},
				want: map[string]int{"c1": 2, "c3": 2}, holds: []int{2}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemVIPs()
			m.clock = epoch
			for i, s := range tc.steps {
				for _, c := range s.remove {
					m.remove(cand[c])
				}
				if s.put != nil {
					if _, err := m.put(s.put.Addr, s.put.Service, s.put.Owner); err != nil {
						t.Fatalf("step %d (%s): %v", i, s.what, err)
					}
				}
				for _, c := range slices.Sorted(maps.Keys(s.allocate)) {
					var last netip.Addr
					if l := s.allocate[c]; l >= 0 {
						last = cand[l]
					}
					got, err := NewVIPAllocator(r, m.store(c), c).Allocate(ctx, web, exportingSince(s.exporters), last)
					want := s.want[c]
					switch {
					case want < 0 && !errors.Is(err, ErrVIPPending):
						t.Errorf("step %d (%s): %s got %s, %v; want ErrVIPPending", i, s.what, c, got, err)
					case want >= 0 && (err != nil || got != cand[want]):
						t.Errorf("step %d (%s): %s got %s, %v; want candidate %d (%s)", i, s.what, c, got, err, want, cand[want])
					}
				}
				held, _ := m.store("any").AllocatedTo(ctx, web)
				var gotHolds []int
				for _, h := range held {
					gotHolds = append(gotHolds, slices.Index(cand, h.Addr))
				}
				slices.Sort(gotHolds)
				if !slices.Equal(gotHolds, s.holds) {
					t.Errorf("step %d (%s): web's allocations at candidates %v, want %v", i, s.what, gotHolds, s.holds)
				}
			}
		})
	}
}

func TestVIPAllocatorRangeChange(t *testing.T) {
	ctx := context.Background()
	m := newMemVIPs()
	svc := nn("web")
	old, err := NewVIPAllocator(MustParseVIPRange("243.1.0.0/24"), m.store("c1"), "c1").Allocate(ctx, svc, exporting("c1"), netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	r := MustParseVIPRange("243.0.0.0/24")
	got, err := NewVIPAllocator(r, m.store("c1"), "c1").Allocate(ctx, svc, exporting("c1"), old)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Contains(got) {
		t.Errorf("got %s outside the new range", got)
	}
	if h, ok, _ := m.store("c1").Holder(ctx, old); ok {
		t.Errorf("old VIP %s still held by %s", old, h.Service)
	}
}

func TestVIPAllocatorExhausted(t *testing.T) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/30") // two usable addresses
	m := newMemVIPs()
	a := NewVIPAllocator(r, m.store("c1"), "c1")
	exp := exporting("c1")
	x, err1 := a.Allocate(ctx, nn("a"), exp, netip.Addr{})
	y, err2 := a.Allocate(ctx, nn("b"), exp, netip.Addr{})
	if err1 != nil || err2 != nil || x == y {
		t.Fatalf("allocations: %s %v, %s %v", x, err1, y, err2)
	}
	_, err := a.Allocate(ctx, nn("c"), exp, netip.Addr{})
	if !errors.Is(err, ErrVIPRangeExhausted) {
		t.Fatalf("err = %v, want ErrVIPRangeExhausted", err)
	}
	var ex *VIPExhaustedError
	if !errors.As(err, &ex) || ex.Range != r.Prefix() || ex.Service != "ns/c" {
		t.Errorf("err = %#v", err)
	}
	if m.Len() != 2 {
		t.Errorf("%d allocations after the failure, want 2 (nothing half-allocated)", m.Len())
	}
	// Freeing one makes room again.
	if err := a.Release(ctx, nn("a")); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Allocate(ctx, nn("c"), exp, netip.Addr{}); err != nil || got != x {
		t.Errorf("after release: %s, %v; want %s", got, err, x)
	}
}

// TestVIPAllocatorConcurrent runs one allocator per cluster, every cluster
// exporting every Service, at once against one broker: every Service ends
// up with exactly one address, the same one seen by every allocator, and
// no address is shared.
func TestVIPAllocatorConcurrent(t *testing.T) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/23")
	m := newMemVIPs()
	const services = 80
	allocateConcurrently(t, 6, services, func(id string, all VIPExporters) (func(s int) ([]netip.Addr, error), error) {
		a := NewVIPAllocator(r, m.store(id), id)
		return func(s int) ([]netip.Addr, error) {
			vip, err := a.Allocate(ctx, nn(fmt.Sprintf("svc-%d", s)), all, netip.Addr{})
			return []netip.Addr{vip}, err
		}, nil
	})
	if m.Len() != services {
		t.Errorf("%d allocations, want %d", m.Len(), services)
	}
}

// allocateConcurrently runs the allocators of clusters clusters (c0, c1,
// …; newAllocator gives each its own, all exporting every Service) at
// once, each allocating for services Services in its own order, and
// checks that all agree on every Service's addresses and that no address
// is given to two Services.
func allocateConcurrently(t *testing.T, clusters, services int, newAllocator func(id string, all VIPExporters) (func(svc int) ([]netip.Addr, error), error)) {
	t.Helper()
	var ids []string
	for c := range clusters {
		ids = append(ids, fmt.Sprintf("c%d", c))
	}
	got := make([][][]netip.Addr, clusters)
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	for c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allocate, err := newAllocator(ids[c], exporting(ids...))
			if err != nil {
				errs <- err
				return
			}
			got[c] = make([][]netip.Addr, services)
			for i := range services {
				// Clusters walk the Services in different orders.
				s := (i + c*13) % services
				if c%2 == 1 {
					s = services - 1 - s
				}
				vips, err := allocate(s)
				if err != nil {
					errs <- err
					return
				}
				got[c][s] = vips
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[netip.Addr]int{}
	for s := range services {
		for c := 1; c < clusters; c++ {
			if !slices.Equal(got[c][s], got[0][s]) {
				t.Errorf("svc-%d: cluster %d got %v, cluster 0 got %v", s, c, got[c][s], got[0][s])
			}
		}
		for _, v := range got[0][s] {
			if prev, dup := seen[v]; dup {
				t.Errorf("%s given to svc-%d and svc-%d", v, prev, s)
			}
			seen[v] = s
		}
	}
}

type failingStore struct{ memVIPStore }

var errBroker = errors.New("broker unreachable")

func (failingStore) Claim(context.Context, netip.Addr, types.NamespacedName) (VIPHold, error) {
	return VIPHold{}, errBroker
}

func TestVIPAllocatorStoreError(t *testing.T) {
	a := NewVIPAllocator(MustParseVIPRange("243.0.0.0/24"), failingStore{newMemVIPs().store("c1")}, "c1")
	if _, err := a.Allocate(context.Background(), nn("web"), exporting("c1"), netip.Addr{}); !errors.Is(err, errBroker) {
		t.Errorf("err = %v, want the store's error wrapped", err)
	}
}
