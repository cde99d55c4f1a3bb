package nat

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/knftables"
)

// fakeNft is a Runner on knftables.Fake, which models what the kernel
// does with our transactions: all or nothing; deleting a missing table or
// element and flushing a missing chain fail; tables, chains and elements
// persist between calls. It counts transactions and fails chosen ones.
type fakeNft struct {
	*knftables.Fake
	calls  int
	failAt map[int]bool // transaction numbers that fail (as a full kernel would)
}

func newFakeNft() *fakeNft {
	return &fakeNft{Fake: knftables.NewFake(knftables.IPv4Family, TableName), failAt: map[int]bool{}}
}

func (f *fakeNft) Run(ctx context.Context, fill func(tx *knftables.Transaction)) error {
	f.calls++
	if f.failAt[f.calls] {
		return errors.New("injected failure")
	}
	tx := f.NewTransaction()
	fill(tx)
	return f.Fake.Run(ctx, tx)
}

// flushRuleset is `nft flush ruleset`.
func (f *fakeNft) flushRuleset() { f.Tables, f.Table = nil, nil }

// fakeElems is what fake holds for our table: set or map name → key →
// value, as nft writes them; nil without the table.
func fakeElems(fake *knftables.Fake) map[string]map[string]string {
	if fake.Table == nil {
		return nil
	}
	out := map[string]map[string]string{}
	add := func(name string, els []*knftables.Element) {
		out[name] = map[string]string{}
		for _, e := range els {
			out[name][strings.Join(e.Key, " . ")] = strings.Join(e.Value, " . ")
		}
	}
	for name, s := range fake.Table.Sets {
		add(name, s.Elements)
	}
	for name, m := range fake.Table.Maps {
		add(name, m.Elements)
	}
	return out
}

// desiredElems is d in fakeElems' shape.
func desiredElems(d *desired) map[string]map[string]string {
	kinds := elemKinds()
	out := map[string]map[string]string{}
	for name, els := range d.elems {
		out[name] = map[string]string{}
		for _, e := range els {
			out[name][strings.Join(keyFields(kinds[name], e.k), " . ")] = strings.Join(valueFields(kinds[name], e.v), " . ")
		}
	}
	return out
}

func randomConfig(rng *rand.Rand) Config {
	c := Config{
		LocalGlobal: []netip.Prefix{netip.MustParsePrefix("242.0.1.0/24")},
		Egress:      []netip.Addr{ip("242.0.1.253"), ip("242.0.1.254")},
	}
	if rng.IntN(4) == 0 {
		c.Egress = c.Egress[:1]
	}
	for i := range 3 {
		if rng.IntN(2) == 0 {
			c.Remote = append(c.Remote, netip.PrefixFrom(netip.AddrFrom4([4]byte{242, 0, byte(2 + i), 0}), 24))
		}
	}
	// Services 0..7, each (if present) on global IP .2+s with ports
	// 1024+p, pointing at ClusterIP 10.96.0.s with a random port set.
	for s := range 8 {
		if rng.IntN(2) == 0 {
			continue
		}
		proto := Protocols[rng.IntN(len(Protocols))]
		for p := range 1 + rng.IntN(3) {
			c.Ingress = append(c.Ingress, Ingress{Protocol: proto,
				Global: netip.AddrPortFrom(netip.AddrFrom4([4]byte{242, 0, 1, byte(2 + s)}), uint16(1024+p)),
				Target: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 96, 0, byte(s + 1)}), uint16(80+p+rng.IntN(2)*100))})
		}
	}
	for p := range 4 {
		if rng.IntN(2) == 0 {
			c.Pods = append(c.Pods, PodIngress{Global: netip.AddrFrom4([4]byte{242, 0, 1, byte(250 - p)}), Pod: netip.AddrFrom4([4]byte{10, 244, 0, byte(10 + p + rng.IntN(2)*100)})})
		}
	}
	return c
}

// TestTableConvergesFromAnyState: random desired configs applied in random
// order, with outside flushes, stray edits and injected nft failures in
// between; after every successful Sync the kernel holds exactly the
// desired elements, and an immediate second Sync writes nothing.
// Element-level drift is repaired by RequestFull (the periodic full sync).
func TestTableConvergesFromAnyState(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		fake := newFakeNft()
		reg := prometheus.NewRegistry()
		m := NewMetrics(reg)
		tab := NewTable(fake, m)
		ctx := context.Background()
		fulls := 0
		for step := range 40 {
			switch rng.IntN(8) {
			case 0:
				fake.flushRuleset()
			case 1:
				// Someone deletes an element: the canary cannot see that;
				// the caller's periodic full sync repairs it.
				if fake.Table != nil {
					if m := fake.Table.Maps["tcp-in-addr"]; len(m.Elements) > 0 {
						m.Elements = m.Elements[1:]
					}
				}
				tab.RequestFull()
			case 2:
				fake.failAt[fake.calls+1+rng.IntN(2)] = true
			case 3:
				tab.RequestFull()
			case 4:
				if fake.Table != nil { // someone deletes the canary
					delete(fake.Table.Chains, ChainCanary)
				}
			}
			cfg := randomConfig(rng)
			want, err := cfg.compile()
			if err != nil {
				t.Fatalf("seed %d step %d: random config invalid: %v", seed, step, err)
			}
			res, err := tab.Sync(ctx, cfg)
			if err != nil {
				// Only injected failures; the next Sync must repair.
				if res, err = tab.Sync(ctx, cfg); err != nil {
					t.Fatalf("seed %d step %d: sync after a failure: %v", seed, step, err)
				}
				if !res.Full {
					t.Fatalf("seed %d step %d: sync after a failure not full: %+v", seed, step, res)
				}
			}
			if res.Full {
				fulls++
			}
			if got := fakeElems(fake.Fake); !sameElems(got, desiredElems(want)) {
				t.Fatalf("seed %d step %d: kernel %v\nwant %v", seed, step, got, desiredElems(want))
			}
			clear(fake.failAt) // a pending injected failure would fail the probe below
			again, err := tab.Sync(ctx, cfg)
			if err != nil || again.Full || again.Added+again.Removed != 0 {
				t.Fatalf("seed %d step %d: second sync %+v, %v", seed, step, again, err)
			}
			counts, err := tab.Counts(ctx)
			if err != nil || counts["pod-in"] != len(want.elems[MapPodIn]) {
				t.Fatalf("seed %d step %d: counts %v, %v", seed, step, counts, err)
			}
		}
		if fulls == 40 || fulls == 0 {
			t.Errorf("seed %d: %d of 40 syncs full; the mix should have both", seed, fulls)
		}
		if testutil.ToFloat64(m.LastSuccess) == 0 || testutil.CollectAndCount(reg, "causeway_globalnet_sync_duration_seconds") != 2 {
			t.Errorf("seed %d: metrics not recorded", seed)
		}
	}
}

// An element deleted from outside is not seen by the canary: the periodic
// RequestFull repairs it.
func TestRequestFullRepairsElementDrift(t *testing.T) {
	fake := newFakeNft()
	tab := NewTable(fake, nil)
	ctx := context.Background()
	cfg := smallConfig()
	if _, err := tab.Sync(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	fake.Table.Maps[MapPodIn].Elements = nil // was 242.0.1.252 : 10.244.0.6
	tab.RequestFull()
	res, err := tab.Sync(ctx, cfg)
	if err != nil || !res.Full || res.CanaryMissing {
		t.Fatalf("requested full sync: %+v, %v", res, err)
	}
	if len(fake.Table.Maps[MapPodIn].Elements) != 1 {
		t.Error("drift not repaired")
	}
	if err := tab.Cleanup(ctx); err != nil || fake.Table != nil {
		t.Errorf("cleanup: %v, %v", err, fake.Dump())
	}
	if err := tab.Cleanup(ctx); err != nil {
		t.Errorf("second cleanup: %v", err)
	}
}

func TestSyncRefusesInvalidConfigWithoutTouchingTheKernel(t *testing.T) {
	fake := newFakeNft()
	m := NewMetrics(nil)
	tab := NewTable(fake, m)
	bad := smallConfig()
	bad.Ingress[0].Protocol = "icmp"
	if _, err := tab.Sync(context.Background(), bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("err %v", err)
	}
	if fake.calls != 0 || testutil.ToFloat64(m.SyncFailures) != 1 {
		t.Errorf("calls %d failures %v", fake.calls, testutil.ToFloat64(m.SyncFailures))
	}
}

func sameElems(a, b map[string]map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !maps.Equal(v, b[k]) {
			return false
		}
	}
	return true
}
