package nat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeNft models what the kernel does with the scripts Table writes:
// transactions are all or nothing; deleting a missing table, chain or
// element fails; adding an element whose key exists with another value
// fails; tables, chains and elements persist between calls. It also
// answers `-j list table`.
type fakeNft struct {
	tables map[string]*fakeTable // "ip name"
	calls  int
	failAt map[int]bool // call numbers that fail (as a full kernel would)
}

type fakeTable struct {
	chains map[string]bool
	elems  map[string]map[string]string
}

func newFakeNft() *fakeNft { return &fakeNft{tables: map[string]*fakeTable{}, failAt: map[int]bool{}} }

func (f *fakeNft) clone() map[string]*fakeTable {
	out := map[string]*fakeTable{}
	for n, t := range f.tables {
		c := &fakeTable{chains: maps.Clone(t.chains), elems: map[string]map[string]string{}}
		for s, e := range t.elems {
			c.elems[s] = maps.Clone(e)
		}
		out[n] = c
	}
	return out
}

func (f *fakeNft) Nft(_ context.Context, stdin string, args ...string) ([]byte, error) {
	f.calls++
	if f.failAt[f.calls] {
		return nil, errors.New("injected failure")
	}
	switch a := strings.Join(args, " "); {
	case a == "-f -":
		next := f.clone()
		if err := applyScript(next, stdin); err != nil {
			return nil, err
		}
		f.tables = next
		return nil, nil
	case a == "-j list table ip "+TableName:
		t, ok := f.tables["ip "+TableName]
		if !ok {
			return nil, errors.New("No such file or directory")
		}
		var out []map[string]any
		for name, els := range t.elems {
			elem := make([]string, 0, len(els))
			for k := range els {
				elem = append(elem, k)
			}
			out = append(out, map[string]any{"map": map[string]any{"name": name, "elem": elem}})
		}
		return json.Marshal(map[string]any{"nftables": out})
	}
	return nil, fmt.Errorf("fake nft: unexpected %q", args)
}

func applyScript(ts map[string]*fakeTable, script string) error {
	var cur *fakeTable
	var curSet string
	for line := range strings.Lines(script) {
		line = strings.TrimSpace(line)
		f := strings.Fields(line)
		switch {
		case line == "":
		case cur != nil && line == "}":
			if curSet != "" {
				curSet = ""
			} else {
				cur = nil
			}
		case cur != nil && (strings.HasPrefix(line, "set ") || strings.HasPrefix(line, "map ")):
			curSet = f[1]
			cur.elems[curSet] = map[string]string{}
		case cur != nil && strings.HasPrefix(line, "chain "):
			cur.chains[f[1]] = true
			if !strings.HasSuffix(line, "}") {
				curSet = "chain:" + f[1]
			}
		case cur != nil && strings.HasPrefix(line, "elements = { "):
			if err := addElements(cur.elems[curSet], strings.TrimSuffix(strings.TrimPrefix(line, "elements = { "), " }")); err != nil {
				return err
			}
		case cur != nil:
			// types and rules
		case strings.HasPrefix(line, "table "): // table ip T {
			t, ok := ts[f[1]+" "+f[2]]
			if !ok {
				t = &fakeTable{chains: map[string]bool{}, elems: map[string]map[string]string{}}
				ts[f[1]+" "+f[2]] = t
			}
			cur = t
		case strings.HasPrefix(line, "add table "):
			if _, ok := ts[f[2]+" "+f[3]]; !ok {
				ts[f[2]+" "+f[3]] = &fakeTable{chains: map[string]bool{}, elems: map[string]map[string]string{}}
			}
		case strings.HasPrefix(line, "delete table "):
			if _, ok := ts[f[2]+" "+f[3]]; !ok {
				return errors.New("delete table: No such file or directory")
			}
			delete(ts, f[2]+" "+f[3])
		case strings.HasPrefix(line, "flush chain "):
			if t, ok := ts[f[2]+" "+f[3]]; !ok || !t.chains[f[4]] {
				return errors.New("flush chain: No such file or directory")
			}
		case strings.HasPrefix(line, "add chain ") || strings.HasPrefix(line, "delete chain "):
			t, ok := ts[f[2]+" "+f[3]]
			if !ok {
				return errors.New(f[0] + " chain: No such file or directory")
			}
			if f[0] == "delete" {
				if !t.chains[f[4]] {
					return errors.New("delete chain: No such file or directory")
				}
				delete(t.chains, f[4])
			} else {
				t.chains[f[4]] = true
			}
		case strings.HasPrefix(line, "add element ") || strings.HasPrefix(line, "delete element "):
			t, ok := ts[f[2]+" "+f[3]]
			if !ok || t.elems[f[4]] == nil {
				return errors.New(f[0] + " element: No such file or directory")
			}
			_, body, _ := strings.Cut(line, "{ ")
			body = strings.TrimSuffix(body, " }")
			if f[0] == "add" {
				if err := addElements(t.elems[f[4]], body); err != nil {
					return err
				}
				continue
			}
			for _, k := range strings.Split(body, ", ") {
				if _, ok := t.elems[f[4]][k]; !ok {
					return fmt.Errorf("delete element %s %s: No such file or directory", f[4], k)
				}
				delete(t.elems[f[4]], k)
			}
		default:
			return fmt.Errorf("fake nft: cannot parse %q", line)
		}
	}
	return nil
}

func addElements(m map[string]string, body string) error {
	for _, e := range strings.Split(body, ", ") {
		k, v, _ := strings.Cut(e, " : ")
		if old, ok := m[k]; ok && old != v {
			return fmt.Errorf("add element %s: File exists", k)
		}
		m[k] = v
	}
	return nil
}

// kernelElems is what the fake holds for our table, in desired's shape.
func (f *fakeNft) kernelElems() map[string]map[string]string {
	t, ok := f.tables["ip "+TableName]
	if !ok {
		return nil
	}
	return t.elems
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
				fake.tables = map[string]*fakeTable{} // nft flush ruleset
			case 1:
				// Someone deletes an element: the canary cannot see that;
				// the caller's periodic full sync repairs it.
				if tt, ok := fake.tables["ip "+TableName]; ok {
					for k := range tt.elems["tcp-in-addr"] {
						delete(tt.elems["tcp-in-addr"], k)
						break
					}
				}
				tab.RequestFull()
			case 2:
				fake.failAt[fake.calls+1+rng.IntN(2)] = true
			case 3:
				tab.RequestFull()
			case 4:
				if tt, ok := fake.tables["ip "+TableName]; ok { // someone deletes the canary
					delete(tt.chains, ChainCanary)
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
			if got := fake.kernelElems(); !sameElems(got, want.strings()) {
				t.Fatalf("seed %d step %d: kernel %v\nwant %v", seed, step, got, want.strings())
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
	delete(fake.tables["ip "+TableName].elems["pod-in"], "242.0.1.252")
	tab.RequestFull()
	res, err := tab.Sync(ctx, cfg)
	if err != nil || !res.Full || res.CanaryMissing {
		t.Fatalf("requested full sync: %+v, %v", res, err)
	}
	if len(fake.tables["ip "+TableName].elems["pod-in"]) != 1 {
		t.Error("drift not repaired")
	}
	if err := tab.Cleanup(ctx); err != nil || len(fake.tables) != 0 {
		t.Errorf("cleanup: %v, %v", err, fake.tables)
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
