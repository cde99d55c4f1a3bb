package mcs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

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
	store := NewMemVIPStore()
	a := NewVIPAllocator(r, store)

	vip, err := a.Allocate(ctx, nn("web"))
	if err != nil {
		t.Fatal(err)
	}
	if vip != firstCandidate(r, nn("web")) {
		t.Errorf("vip = %s, want the first candidate %s", vip, firstCandidate(r, nn("web")))
	}
	if again, err := a.Allocate(ctx, nn("web")); err != nil || again != vip {
		t.Errorf("second Allocate = %s, %v; want %s", again, err, vip)
	}
	// A restarted allocator (new instance, same broker) finds it.
	if again, err := NewVIPAllocator(r, store).Allocate(ctx, nn("web")); err != nil || again != vip {
		t.Errorf("after restart = %s, %v; want %s", again, err, vip)
	}
	if store.Len() != 1 {
		t.Errorf("%d allocations, want 1", store.Len())
	}

	// A Service whose first candidate is taken gets the next free one.
	squatter := nn("squatter")
	if _, err := store.Claim(ctx, firstCandidate(r, nn("api")), squatter); err != nil {
		t.Fatal(err)
	}
	api, err := a.Allocate(ctx, nn("api"))
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
	if h, ok, _ := store.Holder(ctx, vip); ok {
		t.Errorf("%s still held by %s after release", vip, h)
	}
}

func TestVIPAllocatorKeepsOneOfDuplicates(t *testing.T) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/24")
	store := NewMemVIPStore()
	svc := nn("web")
	cands := slices.Collect(r.Candidates(svc.Namespace, svc.Name))
	// Two allocators raced and both won, at candidates #3 and #7.
	for _, c := range []netip.Addr{cands[7], cands[3]} {
		if _, err := store.Claim(ctx, c, svc); err != nil {
			t.Fatal(err)
		}
	}
	got, err := NewVIPAllocator(r, store).Allocate(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	if got != cands[3] {
		t.Errorf("kept %s, want the earlier candidate %s", got, cands[3])
	}
	if have, _ := store.AllocatedTo(ctx, svc); !slices.Equal(have, []netip.Addr{cands[3]}) {
		t.Errorf("allocations left: %v", have)
	}
}

func TestVIPAllocatorRangeChange(t *testing.T) {
	ctx := context.Background()
	store := NewMemVIPStore()
	svc := nn("web")
	old, err := NewVIPAllocator(MustParseVIPRange("243.1.0.0/24"), store).Allocate(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	r := MustParseVIPRange("243.0.0.0/24")
	got, err := NewVIPAllocator(r, store).Allocate(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Contains(got) {
		t.Errorf("got %s outside the new range", got)
	}
	if h, ok, _ := store.Holder(ctx, old); ok {
		t.Errorf("old VIP %s still held by %s", old, h)
	}
}

func TestVIPAllocatorExhausted(t *testing.T) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/30") // two usable addresses
	store := NewMemVIPStore()
	a := NewVIPAllocator(r, store)
	x, err1 := a.Allocate(ctx, nn("a"))
	y, err2 := a.Allocate(ctx, nn("b"))
	if err1 != nil || err2 != nil || x == y {
		t.Fatalf("allocations: %s %v, %s %v", x, err1, y, err2)
	}
	_, err := a.Allocate(ctx, nn("c"))
	if !errors.Is(err, ErrVIPRangeExhausted) {
		t.Fatalf("err = %v, want ErrVIPRangeExhausted", err)
	}
	var ex *VIPExhaustedError
	if !errors.As(err, &ex) || ex.Range != r.Prefix() || ex.Service != "ns/c" {
		t.Errorf("err = %#v", err)
	}
	if store.Len() != 2 {
		t.Errorf("%d allocations after the failure, want 2 (nothing half-allocated)", store.Len())
	}
	// Freeing one makes room again.
	if err := a.Release(ctx, nn("a")); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Allocate(ctx, nn("c")); err != nil || got != x {
		t.Errorf("after release: %s, %v; want %s", got, err, x)
	}
}

// TestVIPAllocatorConcurrent runs one allocator per "cluster" at once
// against one store: every Service ends up with exactly one address, the
// same one seen by every allocator, and no address is shared.
func TestVIPAllocatorConcurrent(t *testing.T) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/23")
	store := NewMemVIPStore()
	const services = 80
	allocateConcurrently(t, 6, services, func() (func(s int) ([]netip.Addr, error), error) {
		a := NewVIPAllocator(r, store)
		return func(s int) ([]netip.Addr, error) {
			vip, err := a.Allocate(ctx, nn(fmt.Sprintf("svc-%d", s)))
			return []netip.Addr{vip}, err
		}, nil
	})
	if store.Len() != services {
		t.Errorf("%d allocations, want %d", store.Len(), services)
	}
}

// allocateConcurrently runs clusters allocators at once (newAllocator
// gives each its own), each allocating for services Services in its own
// order, and checks that all agree on every Service's addresses and that
// no address is given to two Services.
func allocateConcurrently(t *testing.T, clusters, services int, newAllocator func() (func(svc int) ([]netip.Addr, error), error)) {
	t.Helper()
	got := make([][][]netip.Addr, clusters)
	var wg sync.WaitGroup
	errs := make(chan error, clusters)
	for c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allocate, err := newAllocator()
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

type failingStore struct{ *MemVIPStore }

var errBroker = errors.New("broker unreachable")

func (failingStore) Claim(context.Context, netip.Addr, types.NamespacedName) (types.NamespacedName, error) {
	return types.NamespacedName{}, errBroker
}

func TestVIPAllocatorStoreError(t *testing.T) {
	a := NewVIPAllocator(MustParseVIPRange("243.0.0.0/24"), failingStore{NewMemVIPStore()})
	if _, err := a.Allocate(context.Background(), nn("web")); !errors.Is(err, errBroker) {
		t.Errorf("err = %v, want the store's error wrapped", err)
	}
}
