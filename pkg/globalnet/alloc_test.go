package globalnet

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// smallAllocator: 4 ingress IPs 242.0.1.2-.5, ports 1000-1009.
func smallAllocator(t testing.TB) *Allocator {
	t.Helper()
	a, err := NewAllocator(AddrRange{First: ip("242.0.1.2"), Last: ip("242.0.1.5")}, PortRange{First: 1000, Last: 1009})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustAllocate(t testing.TB, a *Allocator, owner string, n int) (netip.Addr, []uint16) {
	t.Helper()
	got, ports, err := a.Allocate(owner, n)
	if err != nil {
		t.Fatalf("Allocate(%q, %d): %v", owner, n, err)
	}
	return got, ports
}

func TestAllocateFillsLowestIPLowestPorts(t *testing.T) {
	a := smallAllocator(t)
	for _, tc := range []struct {
		owner string
		n     int
		want  string
	}{
		{"ns/a", 3, "242.0.1.2 [1000 1001 1002]"},
		{"ns/b", 6, "242.0.1.2 [1003 1004 1005 1006 1007 1008]"},
		{"ns/c", 2, "242.0.1.3 [1000 1001]"}, // .2 has one port left
		{"ns/d", 1, "242.0.1.2 [1009]"},      // which still takes a single port
		{"ns/a", 3, "242.0.1.2 [1000 1001 1002]"},
		{"ns/c", 4, "242.0.1.3 [1000 1001 1002 1003]"}, // grows on its IP
	} {
		got, ports := mustAllocate(t, a, tc.owner, tc.n)
		if s := fmt.Sprint(got, " ", ports); s != tc.want {
			t.Errorf("Allocate(%s, %d) = %s, want %s", tc.owner, tc.n, s, tc.want)
		}
	}
	if a.IPsInUse() != 2 || a.Owners() != 4 {
		t.Errorf("in use %d owners %d", a.IPsInUse(), a.Owners())
	}
	if _, _, err := a.Allocate("ns/c", 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("shrink by Allocate: %v", err)
	}
	a.ReleasePort("ns/c", 1001)
	if al, _ := a.Get("ns/c"); fmt.Sprint(al.Ports) != "[1000 1002 1003]" {
		t.Errorf("after ReleasePort: %v", al.Ports)
	}
	a.Release("ns/b")
	if got, ports := mustAllocate(t, a, "ns/e", 6); fmt.Sprint(got, " ", ports) != "242.0.1.2 [1003 1004 1005 1006 1007 1008]" {
		t.Errorf("freed ports not reused lowest first: %s %v", got, ports)
	}
}

func TestAllocateExhaustion(t *testing.T) {
	a := smallAllocator(t)
	for i := range 4 {
		mustAllocate(t, a, fmt.Sprintf("ns/s%d", i), 8)
	}
	// Every IP has 2 free ports: 3 do not fit anywhere, 2 do.
	if _, _, err := a.Allocate("ns/big", 3); !errors.Is(err, ErrExhausted) {
		t.Fatalf("want ErrExhausted, got %v", err)
	}
	if _, ok := a.Get("ns/big"); ok {
		t.Error("failed allocation left an owner behind")
	}
	mustAllocate(t, a, "ns/two", 2)
	if _, _, err := a.Allocate("ns/s0", 10); !errors.Is(err, ErrExhausted) {
		t.Errorf("growing past the IP: %v", err)
	}
	if _, _, err := a.Allocate("ns/x", 11); !errors.Is(err, ErrInvalid) {
		t.Errorf("more than the range: %v", err)
	}
	if _, err := a.AllocateIP("ns/pod/10.0.0.1"); !errors.Is(err, ErrExhausted) {
		t.Errorf("AllocateIP with every IP carrying ports: %v", err)
	}
}

func TestWholeIPsAndPortsExclude(t *testing.T) {
	a := smallAllocator(t)
	p1, err := a.AllocateIP("ns/h/10.244.0.6")
	if err != nil || p1 != ip("242.0.1.5") {
		t.Fatalf("AllocateIP = %s, %v; want the highest, 242.0.1.5", p1, err)
	}
	if again, _ := a.AllocateIP("ns/h/10.244.0.6"); again != p1 {
		t.Errorf("AllocateIP not idempotent: %s", again)
	}
	got, _ := mustAllocate(t, a, "ns/a", 10) // fills .2
	if got != ip("242.0.1.2") {
		t.Fatalf("ports on %s", got)
	}
	mustAllocate(t, a, "ns/b", 10) // .3
	mustAllocate(t, a, "ns/c", 1)  // .4, never .5
	if _, _, err := a.Allocate("ns/d", 10); !errors.Is(err, ErrExhausted) {
		t.Errorf("ports must not land on the whole IP: %v", err)
	}
	if _, err := a.AllocateIP("ns/h/10.244.0.7"); !errors.Is(err, ErrExhausted) {
		t.Errorf("whole IP on an IP with ports: %v", err)
	}
	var ce *ConflictError
	if err := a.Reserve("ns/z", p1, []uint16{1000}); !errors.As(err, &ce) || ce.Holder != "ns/h/10.244.0.6" || !errors.Is(err, ErrConflict) {
		t.Errorf("Reserve a port on a whole IP: %v", err)
	}
	if err := a.ReserveIP("ns/h2/x", ip("242.0.1.4")); !errors.As(err, &ce) || ce.Holder != "ns/c" {
		t.Errorf("ReserveIP on an IP with ports: %v", err)
	}
	if _, err := a.AllocateIP("ns/a"); !errors.Is(err, ErrConflict) {
		t.Errorf("port owner asking for a whole IP: %v", err)
	}
	a.Release("ns/c")
	if got, err := a.AllocateIP("ns/h/10.244.0.7"); err != nil || got != ip("242.0.1.4") {
		t.Errorf("after release: %s, %v", got, err)
	}
	a.Release("ns/h/10.244.0.6")
	if got, _ := mustAllocate(t, a, "ns/e", 3); got != ip("242.0.1.5") {
		t.Errorf("released whole IP not reused for ports: %s", got)
	}
}

func TestReserveConflicts(t *testing.T) {
	a := smallAllocator(t)
	if err := a.Reserve("ns/a", ip("242.0.1.3"), []uint16{1005, 1001}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		owner  string
		ip     string
		ports  []uint16
		target error
	}{
		{"taken port", "ns/b", "242.0.1.3", []uint16{1002, 1005}, ErrConflict},
		{"owner on another IP", "ns/a", "242.0.1.2", []uint16{1002}, ErrConflict},
		{"outside ingress", "ns/b", "242.0.1.9", []uint16{1002}, ErrInvalid},
		{"outside ports", "ns/b", "242.0.1.2", []uint16{999}, ErrInvalid},
		{"duplicate port", "ns/b", "242.0.1.2", []uint16{1002, 1002}, ErrInvalid},
		{"no ports", "ns/b", "242.0.1.2", nil, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(a)
			err := a.Reserve(tc.owner, ip(tc.ip), tc.ports)
			if !errors.Is(err, tc.target) {
				t.Fatalf("err = %v, want %v", err, tc.target)
			}
			if after := snapshot(a); !maps.EqualFunc(before, after, slices.Equal) {
				t.Errorf("refused Reserve changed state: %v → %v", before, after)
			}
		})
	}
	// Re-reserving what is held, and adding a port on the same IP, is fine.
	if err := a.Reserve("ns/a", ip("242.0.1.3"), []uint16{1001, 1007}); err != nil {
		t.Fatal(err)
	}
	if al, _ := a.Get("ns/a"); fmt.Sprint(al.Ports) != "[1005 1001 1007]" {
		t.Errorf("ports %v", al.Ports)
	}
	// The lowest IP is still empty: a new owner starts there.
	if got, ports := mustAllocate(t, a, "ns/b", 2); fmt.Sprint(got, " ", ports) != "242.0.1.2 [1000 1001]" {
		t.Errorf("after reserve: %s %v", got, ports)
	}
}

// snapshot is every owner's allocation as comparable strings.
func snapshot(a *Allocator) map[string][]string {
	out := map[string][]string{}
	for o, al := range a.owners {
		ports := slices.Clone(al.Ports)
		slices.Sort(ports)
		out[o] = []string{al.IP.String(), fmt.Sprint(ports, al.Whole)}
	}
	return out
}

// TestReplayInAnyOrderConverges: allocations made in one process, then
// released and reallocated at random, replayed in random order into fresh
// allocators (a restarted or failed-over gateway) give the same state, and
// the same answers to what is allocated next.
func TestReplayInAnyOrderConverges(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 42))
		orig := smallAllocator(t)
		var live []string
		for i := range 60 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				j := rng.IntN(len(live))
				orig.Release(live[j])
				live = slices.Delete(live, j, j+1)
				continue
			}
			owner := fmt.Sprintf("ns/o%d", i)
			var err error
			if rng.IntN(5) == 0 {
				_, err = orig.AllocateIP(owner)
			} else {
				_, _, err = orig.Allocate(owner, 1+rng.IntN(4))
			}
			if errors.Is(err, ErrExhausted) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			live = append(live, owner)
		}
		checkInvariants(t, orig)
		want := snapshot(orig)
		next := func(a *Allocator) string {
			ipA, pA, errA := a.Allocate("ns/next", 2)
			ipB, errB := a.AllocateIP("ns/next-pod")
			return fmt.Sprint(ipA, pA, errA, ipB, errB)
		}
		var wantNext string
		for r := range 10 {

			replica := smallAllocator(t)
			order := slices.Clone(live)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, o := range order {
				al, _ := orig.Get(o)
				var err error
				if al.Whole {
					err = replica.ReserveIP(o, al.IP)
				} else {
					// Persisted per port: replay them one by one, shuffled.
					ports := slices.Clone(al.Ports)
					rng.Shuffle(len(ports), func(i, j int) { ports[i], ports[j] = ports[j], ports[i] })
					for _, p := range ports {
						if err = replica.Reserve(o, al.IP, []uint16{p}); err != nil {
							break
						}
					}
				}
				if err != nil {
					t.Fatalf("seed %d replay %s: %v", seed, o, err)
				}
			}
			got := snapshot(replica)
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Fatalf("seed %d replay %d: state %v, want %v", seed, r, got, want)
			}
			checkInvariants(t, replica)
			n := next(replica)
			if r == 0 {
				wantNext = next(orig) // the original, with its release history, answers the same
			}
			if n != wantNext {
				t.Fatalf("seed %d: next allocation %s after one replay, %s after another", seed, wantNext, n)
			}
		}
	}
}

// checkInvariants: one IP per owner, distinct ports per IP, whole IPs
// carry no ports, and the allocator's counters agree.
func checkInvariants(t *testing.T, a *Allocator) {
	t.Helper()
	held := map[netip.AddrPort]string{}
	whole := map[netip.Addr]string{}
	withPorts := map[netip.Addr]bool{}
	for o, al := range a.owners {
		if al.Whole {
			if prev, ok := whole[al.IP]; ok {
				t.Fatalf("%s whole for %s and %s", al.IP, prev, o)
			}
			whole[al.IP] = o
			continue
		}
		withPorts[al.IP] = true
		for _, p := range al.Ports {
			k := netip.AddrPortFrom(al.IP, p)
			if prev, ok := held[k]; ok {
				t.Fatalf("%s held by %s and %s", k, prev, o)
			}
			held[k] = o
		}
	}
	for a := range whole {
		if withPorts[a] {
			t.Fatalf("%s is whole and carries ports", a)
		}
	}
	if a.IPsInUse() != len(whole)+len(withPorts) {
		t.Fatalf("IPsInUse %d, counted %d", a.IPsInUse(), len(whole)+len(withPorts))
	}
	want := Usage{IPs: a.ips.Len(), PairIPs: len(withPorts), WholeIPs: len(whole), Pairs: a.ips.Len() * a.ports.Len(), PairsInUse: len(held)}
	if u := a.Usage(); u != want {
		t.Fatalf("Usage %+v, counted %+v", u, want)
	}
}

// BenchmarkAllocate100k: 50 000 Services of two ports (100 000 pairs) in
// a /16, then all released; per op = one Allocate (+ its Release).
func BenchmarkAllocate100k(b *testing.B) {
	l, err := NewLayout(netip.MustParsePrefix("242.0.0.0/16"), DefaultEgressIPs)
	if err != nil {
		b.Fatal(err)
	}
	owners := make([]string, 50_000)
	for i := range owners {
		owners[i] = fmt.Sprintf("ns/svc-%d", i)
	}
	var ips int
	for b.Loop() {
		a, err := NewAllocator(l.Ingress, DefaultPortRange)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range owners {
			if _, _, err := a.Allocate(o, 2); err != nil {
				b.Fatal(err)
			}
		}
		ips = a.IPsInUse()
		for _, o := range owners {
			a.Release(o)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(owners)), "ns/service")
	b.ReportMetric(float64(ips), "global-IPs/100k-pairs")
}
