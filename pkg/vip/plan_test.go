package vip

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func svc(vip string, port uint16, p Proto) ServiceKey {
	return ServiceKey{VIP: netip.MustParseAddr(vip), Port: port, Proto: p}
}

// be parses "addr:port" or "addr:port*weight" (weight 1 when absent).
func be(s string) Backend {
	addr, weight, weighted := strings.Cut(s, "*")
	w := uint64(1)
	if weighted {
		var err error
		if w, err = strconv.ParseUint(weight, 10, 32); err != nil {
			panic(err)
		}
	}
	ap := netip.MustParseAddrPort(addr)
	return Backend{Addr: ap.Addr(), Port: ap.Port(), Weight: uint32(w)}
}

// on is the service with these backends.
func on(bes ...Backend) Service { return Service{Backends: bes} }

// states are desired states replayed in every order by TestFakeConverges.
var states = map[string]map[ServiceKey]Service{
	"empty": {},
	"one": {
		svc("243.0.0.1", 80, TCP): on(be("10.96.0.10:80")),
	},
	"two-clusters": {
		svc("243.0.0.1", 80, TCP): on(be("10.96.0.10:80"), be("242.1.0.1:30001")),
		svc("243.0.0.1", 53, UDP): on(be("10.96.0.11:53")),
	},
	"reordered-duplicates": {
		svc("243.0.0.1", 80, TCP): on(be("242.1.0.1:30001"), be("10.96.0.10:80"), be("242.1.0.1:30001")),
		svc("243.0.0.1", 53, UDP): on(be("10.96.0.11:53")),
	},
	"weighted": {
		svc("243.0.0.1", 80, TCP): on(be("10.96.0.10:80*1"), be("242.1.0.1:30001*3")),
		svc("243.0.0.2", 80, TCP): on(be("10.96.0.12:8080*5"), be("10.96.0.13:8080*1"), be("10.96.0.14:8080*100")),
	},
	"affinity": {
		svc("243.0.0.1", 80, TCP): {Backends: []Backend{be("10.96.0.10:80*1"), be("242.1.0.1:30001*3")}, AffinitySeconds: 10800},
		svc("243.0.0.1", 53, UDP): {Backends: []Backend{be("10.96.0.11:53")}, AffinitySeconds: 1},
	},
	"no-backends": {
		svc("243.0.0.1", 80, TCP): {},
		svc("243.0.0.2", 80, TCP): on(be("10.96.0.12:8080"), be("10.96.0.13:8080"), be("10.96.0.14:8080")),
	},
	"many": func() map[ServiceKey]Service {
		m := map[ServiceKey]Service{}
		for i := range 50 {
			k := svc(fmt.Sprintf("243.0.1.%d", i), 443, TCP)
			var s Service
			for j := range i % 5 {
				s.Backends = append(s.Backends, be(fmt.Sprintf("10.97.%d.%d:443*%d", i, j, 1+(i*j)%7)))
			}
			m[k] = s
		}
		return m
	}(),
}

// shares returns, for a service of m, each backend's exact probability of
// being picked: slot i with probability 1/count, then its backend with
// Threshold/coinScale and its alias with the rest.
func shares(t *testing.T, m mapState, k ServiceKey) map[netip.AddrPort]float64 {
	t.Helper()
	s, ok := m.services[k]
	if !ok {
		t.Fatalf("%s: not a service", k)
	}
	out := map[netip.AddrPort]float64{}
	for i := range s.Count {
		sl, ok := m.backends[backendKey{s.ID, i}]
		if !ok {
			t.Fatalf("%s: slot %d missing", k, i)
		}
		p := float64(sl.Threshold) / coinScale
		out[sl.Backend.AddrPort()] += p / float64(s.Count)
		out[sl.Alias.AddrPort()] += (1 - p) / float64(s.Count)
	}
	return out
}

// checkImplements asserts the fake's maps implement desired exactly: every
// service picks each of its (canonical) backends with probability weight /
// Σ weights, lookups return only its backends (EHOSTUNREACH when it has
// none), other destinations pass through, and no entry is left that no
// service uses.
func checkImplements(t *testing.T, f *Fake, desired map[ServiceKey]Service) {
	t.Helper()
	f.mu.Lock()
	for k, s := range desired {
		want := canonical(s.Backends)
		var total float64
		for _, b := range want {
			total += float64(b.Weight)
		}
		got := shares(t, f.maps, k)
		for _, b := range want {
			if d := math.Abs(got[b.AddrPort()] - float64(b.Weight)/total); d > float64(len(want))/coinScale {
				t.Fatalf("%s: %s picked with probability %v, want %v", k, b, got[b.AddrPort()], float64(b.Weight)/total)
			}
		}
		for ap, p := range got {
			if p > 0 && !contains(want, Backend{Addr: ap.Addr(), Port: ap.Port()}) {
				t.Fatalf("%s: %s is no backend but is picked with probability %v", k, ap, p)
			}
		}
	}
	f.mu.Unlock()
	for k, s := range desired {
		want := canonical(s.Backends)
		for h := range uint32(7) {
			got, ok, err := f.Lookup(k, h, h*0x9e3779b9)
			if !ok {
				t.Fatalf("%s: not a service", k)
			}
			if len(want) == 0 {
				if !errors.Is(err, ErrNoBackends) {
					t.Fatalf("%s: lookup = %v, %v; want ErrNoBackends", k, got, err)
				}
				continue
			}
			if err != nil || !contains(want, got) {
				t.Fatalf("%s: lookup = %v, %v; want one of %v", k, got, err, want)
			}
		}
	}
	if _, ok, _ := f.Lookup(svc("243.15.255.254", 1, TCP), 0, 0); ok {
		t.Fatal("a destination that is no service resolved")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.maps.services) != len(desired) {
		t.Fatalf("%d service entries, want %d", len(f.maps.services), len(desired))
	}
	n := 0
	for _, s := range desired {
		n += len(canonical(s.Backends))
	}
	if len(f.maps.backends) != n {
		t.Fatalf("%d slot entries, want %d (stale entries left)", len(f.maps.backends), n)
	}
}

// TestFakeConverges applies every ordered pair of states, in random walks,
// and checks the maps implement the last one, read back as its canonical
// form, and that re-applying it writes nothing.
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
			for k, s := range f.Services() {
				if want := canonical(states[name][k].Backends); !reflect.DeepEqual(s.Backends, want) && len(want)+len(s.Backends) > 0 {
					t.Fatalf("walk %d: %s reads back as %v, want %v", walk, k, s.Backends, want)
				}
				if s.AffinitySeconds != states[name][k].AffinitySeconds {
					t.Fatalf("walk %d: %s reads back with affinity %d s, want %d", walk, k, s.AffinitySeconds, states[name][k].AffinitySeconds)
				}
			}
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

// TestAliasTableIsProportional checks the pick probabilities of random
// weight sets, up to 1 000 backends with weights up to 2^20, against
// weight / Σ weights, and that every slot holds its own backend.
func TestAliasTableIsProportional(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 300 {
		n := 1 + rng.IntN(1000)
		if round < 50 {
			n = 1 + rng.IntN(5)
		}
		bes := make([]Backend, n)
		var total float64
		for i := range bes {
			bes[i] = Backend{Addr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), Port: 80, Weight: 1 + uint32(rng.IntN(1<<(1+rng.IntN(20))))}
			total += float64(bes[i].Weight)
		}
		slots := aliasTable(bes)
		got := map[netip.AddrPort]float64{}
		for i, sl := range slots {
			if sl.Backend != bes[i] || sl.Threshold > coinScale || slots[sl.AliasSlot].Backend.AddrPort() != sl.Alias.AddrPort() {
				t.Fatalf("round %d: slot %d = %+v, want backend %v, a threshold ≤ 2^31 and the alias's own slot", round, i, sl, bes[i])
			}
			p := float64(sl.Threshold) / coinScale
			got[sl.Backend.AddrPort()] += p / float64(n)
			got[sl.Alias.AddrPort()] += (1 - p) / float64(n)
		}
		for _, b := range bes {
			if d := math.Abs(got[b.AddrPort()] - float64(b.Weight)/total); d > 1e-9 {
				t.Fatalf("round %d (%d backends): %v picked with %v, want %v", round, n, b, got[b.AddrPort()], float64(b.Weight)/total)
			}
		}
	}
}

// TestLookupFollowsWeights draws 100 000 picks from a 1:3 service through
// the fake's Lookup with random numbers, as connect4 does.
func TestLookupFollowsWeights(t *testing.T) {
	f := NewFake(Limits{})
	k := svc("243.0.0.1", 80, TCP)
	one, three := be("242.0.0.2:1024*1"), be("242.0.1.2:1024*3")
	if err := f.Set(context.Background(), map[ServiceKey]Service{k: on(three, one)}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	n := map[netip.AddrPort]int{}
	const draws = 100000
	for range draws {
		b, _, err := f.Lookup(k, rng.Uint32(), rng.Uint32())
		if err != nil {
			t.Fatal(err)
		}
		n[b.AddrPort()]++
	}
	// 5 standard deviations of a binomial(100 000, 1/4): ±0.7 points.
	if share := float64(n[one.AddrPort()]) / draws; math.Abs(share-0.25) > 0.007 {
		t.Errorf("weight 1 of 4 got %.4f of the picks (%v), want 0.25", share, n)
	}
}

// TestPlanOrderNeverExposesMissingBackends applies each diff step by step
// and checks that, after every step, each service resolves every slot to
// backends of its old or its new list — what a concurrent connect() sees.
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
					for n := range s.Count {
						got, ok := cur.backends[backendKey{ID: s.ID, Slot: n}]
						if !ok {
							t.Fatalf("%s -> %s after step %d: %s slot %d missing", from, to, i, k, n)
						}
						for _, be := range []Backend{got.Backend, got.Alias} {
							if !contains(a[k].Backends, be) && !contains(b[k].Backends, be) {
								t.Fatalf("%s -> %s after step %d: %s slot %d gives %v, in neither list", from, to, i, k, n, be)
							}
						}
					}
				}
			}
		}
	}
}

// contains reports whether a backend at b's address and port is in bes.
func contains(bes []Backend, b Backend) bool {
	for _, x := range bes {
		if x.AddrPort() == b.AddrPort() {
			return true
		}
	}
	return false
}

// TestIncrementalIsOChanged checks that one change among 10 000 services
// writes only that service's entries, also when the caller changed a
// backend in the slice it gave the last Set (plan remembers a copy).
func TestIncrementalIsOChanged(t *testing.T) {
	desired := map[ServiceKey]Service{}
	for i := range 10000 {
		k := svc(fmt.Sprintf("243.0.%d.%d", i/250, i%250), 80, TCP)
		desired[k] = on(be(fmt.Sprintf("10.96.%d.%d:80", i/250, i%250)), be(fmt.Sprintf("242.1.%d.%d:%d", i/250, i%250, 30000+i%1000)))
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
		{"remove a backend", func() { desired[k] = on(desired[k].Backends[0]) }, OpCounts{PutServices: 1, DeleteBackends: 1}},
		{"add it back", func() { desired[k] = on(desired[k].Backends[0], be("242.1.7.7:31757")) }, OpCounts{PutServices: 1, PutBackends: 1}},
		{"replace a backend", func() { desired[k] = on(be("10.96.7.7:80"), be("242.2.0.1:30000")) }, OpCounts{PutBackends: 1}},
		{"change a backend in place", func() { desired[k].Backends[1] = be("242.2.0.2:30000") }, OpCounts{PutBackends: 1}},
		{"change a weight", func() { desired[k] = on(be("10.96.7.7:80"), be("242.2.0.1:30000*3")) }, OpCounts{PutBackends: 2}},
		{"affinity on", func() { desired[k] = Service{Backends: desired[k].Backends, AffinitySeconds: 10800} }, OpCounts{PutServices: 1}},
		{"affinity timeout", func() { desired[k] = Service{Backends: desired[k].Backends, AffinitySeconds: 60} }, OpCounts{PutServices: 1}},
		{"no backends", func() { desired[k] = Service{} }, OpCounts{PutServices: 1, DeleteBackends: 2}},
		{"delete the service", func() { delete(desired, k) }, OpCounts{DeleteServices: 1}},
		{"add a service", func() { desired[svc("243.1.0.1", 8080, UDP)] = on(be("10.96.200.1:53")) }, OpCounts{PutServices: 1, PutBackends: 1}},
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
// middle of a sync may leave (orphan slots, a count larger than the slots
// present) and checks one Set repairs it without reusing an orphan's ID.
func TestSetRecoversFromHalfWrittenMaps(t *testing.T) {
	f := NewFake(Limits{})
	kept := svc("243.0.0.1", 80, TCP)
	full := func(b Backend) slot {
		return slot{Backend: b, Alias: Backend{Addr: b.Addr, Port: b.Port}, Threshold: coinScale}
	}
	f.maps.services[kept] = service{ID: 1, Count: 3}
	f.maps.backends[backendKey{1, 0}] = full(be("10.0.0.1:80"))
	f.maps.backends[backendKey{2, 0}] = full(be("10.0.0.9:80")) // orphan of a service never published
	desired := map[ServiceKey]Service{
		kept:                      on(be("10.0.0.1:80"), be("10.0.0.2:80")),
		svc("243.0.0.2", 80, TCP): on(be("10.0.0.3:80")),
	}
	if err := f.Set(context.Background(), desired); err != nil {
		t.Fatal(err)
	}
	checkImplements(t, f, desired)
	if id := f.maps.services[svc("243.0.0.2", 80, TCP)].ID; id != 3 {
		t.Errorf("new service got ID %d, want 3 (1 is in use, 2 has an orphan slot)", id)
	}
}

func TestSetRejectsInvalid(t *testing.T) {
	good := map[ServiceKey]Service{
		svc("243.0.0.1", 80, TCP): on(be("10.0.0.1:80")),
		svc("fd00::1", 80, TCP):   on(be("[fd00:96::1]:80")),
	}
	bad := map[string]map[ServiceKey]Service{
		"IPv6 VIP, IPv4 backend": {svc("fd00::1", 80, TCP): on(be("10.0.0.1:80"))},
		"IPv4 VIP, IPv6 backend": {svc("243.0.0.1", 80, TCP): on(be("[fd00::1]:80"))},
		"IPv4-mapped VIP":        {svc("::ffff:243.0.0.1", 80, TCP): on(be("10.0.0.1:80"))},
		"IPv4-mapped backend":    {svc("fd00::1", 80, TCP): on(be("[::ffff:10.0.0.1]:80"))},
		"zoned VIP":              {svc("fe80::1%lo", 80, TCP): on(be("[fe80::2]:80"))},
		"invalid VIP":            {{Port: 80, Proto: TCP}: on(be("10.0.0.1:80"))},
		"port 0":                 {svc("243.0.0.1", 0, TCP): on(be("10.0.0.1:80"))},
		"backend port":           {svc("243.0.0.1", 80, TCP): on(be("10.0.0.1:0"))},
		"SCTP":                   {svc("243.0.0.1", 80, Proto(132)): on(be("10.0.0.1:80"))},
		"too many services": {
			svc("243.0.0.1", 80, TCP): {}, svc("243.0.0.2", 80, TCP): {}, svc("243.0.0.3", 80, TCP): {}, svc("243.0.0.4", 80, TCP): {},
		},
		"too many backends": {svc("243.0.0.1", 80, TCP): on(be("10.0.0.1:1"), be("10.0.0.1:2"), be("10.0.0.1:3"), be("10.0.0.1:4"), be("10.0.0.1:5"), be("10.0.0.1:6"))},
		"weights overflow":  {svc("243.0.0.1", 80, TCP): on(be("10.0.0.1:1*4294967295"), be("10.0.0.1:2*1"))},
	}
	for name, desired := range bad {
		f := NewFake(Limits{Services: 3, Backends: 5})
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

// TestGoneUDP: the (VIP, backend) pairs whose connected UDP sockets a Set
// must terminate are exactly the backends UDP services lose — removed,
// replaced, or with their service — and never a backend that stays (also
// when its slot or weight changes), nor a TCP service's.
func TestGoneUDP(t *testing.T) {
	dns, tcp := svc("243.0.0.1", 53, UDP), svc("243.0.0.1", 53, TCP)
	a, b, c := be("10.96.0.11:53"), be("242.1.0.1:30053"), be("10.96.0.12:53")
	pair := func(k ServiceKey, bes ...Backend) []udpPeer {
		var out []udpPeer
		for _, x := range bes {
			out = append(out, udpPeer{VIP: netip.AddrPortFrom(k.VIP, k.Port), Backend: netip.AddrPortFrom(x.Addr, x.Port)})
		}
		return out
	}
	weighted := func(x Backend, w uint32) Backend { x.Weight = w; return x }
	start := map[ServiceKey]Service{dns: on(a, b), tcp: on(a, b)}
	for _, tc := range []struct {
		name string
		to   map[ServiceKey]Service
		want []udpPeer
	}{
		{"unchanged", start, nil},
		{"last slot removed", map[ServiceKey]Service{dns: on(a), tcp: on(a, b)}, pair(dns, b)},
		{"replaced", map[ServiceKey]Service{dns: on(b, c), tcp: on(a, b)}, pair(dns, a)},
		{"one added", map[ServiceKey]Service{dns: on(a, b, c), tcp: on(a, b)}, nil},
		{"weights changed", map[ServiceKey]Service{dns: on(weighted(a, 3), b), tcp: on(a, b)}, nil},
		{"first removed, b moves to slot 0", map[ServiceKey]Service{dns: on(b), tcp: on(a, b)}, pair(dns, a)},
		{"no backends", map[ServiceKey]Service{dns: {}, tcp: on(a, b)}, pair(dns, a, b)},
		{"service deleted", map[ServiceKey]Service{tcp: on(a, b)}, pair(dns, a, b)},
		{"TCP only", map[ServiceKey]Service{dns: on(a, b), tcp: on(a)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFake(Limits{})
			if err := f.Set(context.Background(), start); err != nil {
				t.Fatal(err)
			}
			got := goneUDP(f.maps, plan(f.maps, tc.to))
			slices.SortFunc(got, func(x, y udpPeer) int { return x.Backend.Compare(y.Backend) })
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("gone %v, want %v", got, tc.want)
			}
		})
	}
}
