package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// takenByReference is the quota rule written plainly: sort every object
// by creation time and name, take them while they fit.
func takenByReference(objs map[string]quotaEntry, lim addrpolicy.Quotas) map[string]bool {
	all := make([]quotaEntry, 0, len(objs))
	for _, e := range objs {
		all = append(all, e)
	}
	slices.SortFunc(all, compareEntries)
	out := map[string]bool{}
	sum := 0
	for i, e := range all {
		if i+1 > lim.Records || sum+e.backends > lim.Backends {
			break
		}
		sum += e.backends
		out[e.name] = true
	}
	return out
}

// TestRecordQuotas: the objects a cluster's quota takes, step by step
// (3 records, 10 backends).
func TestRecordQuotas(t *testing.T) {
	lim := addrpolicy.Quotas{Records: 3, Backends: 10}
	at := func(s int) time.Time { return time.Unix(1_000_000+int64(s), 0) }
	type step struct {
		set      *quotaEntry // else remove
		remove   string
		taken    bool     // the set object is taken
		flipped  []string // others whose being taken changed
		takenNow []string // every taken object afterwards
	}
	e := func(s int, name string, backends int) *quotaEntry {
		return &quotaEntry{created: at(s), name: name, backends: backends}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{name: "newest beyond the count", steps: []step{
			{set: e(1, "a", 1), taken: true, takenNow: []string{"a"}},
			{set: e(2, "b", 1), taken: true, takenNow: []string{"a", "b"}},
			{set: e(3, "c", 1), taken: true, takenNow: []string{"a", "b", "c"}},
			{set: e(4, "d", 1), taken: false, takenNow: []string{"a", "b", "c"}},
			{set: e(5, "e", 1), taken: false, takenNow: []string{"a", "b", "c"}},
			{remove: "b", flipped: []string{"d"}, takenNow: []string{"a", "c", "d"}},
			{remove: "e", takenNow: []string{"a", "c", "d"}},
		}},
		{name: "same second, by name", steps: []step{
			{set: e(1, "b", 1), taken: true, takenNow: []string{"b"}},
			{set: e(1, "c", 1), taken: true, takenNow: []string{"b", "c"}},
			{set: e(1, "d", 1), taken: true, takenNow: []string{"b", "c", "d"}},
			{set: e(1, "a", 1), taken: true, flipped: []string{"d"}, takenNow: []string{"a", "b", "c"}},
		}},
		{name: "backends stop the prefix", steps: []step{
			{set: e(1, "a", 4), taken: true, takenNow: []string{"a"}},
			{set: e(2, "big", 7), taken: false, takenNow: []string{"a"}},
			{set: e(3, "small", 1), taken: false, takenNow: []string{"a"}},
			{set: e(2, "big", 6), taken: true, takenNow: []string{"a", "big"}},
			{set: e(1, "a", 5), taken: true, flipped: []string{"big"}, takenNow: []string{"a"}},
			{remove: "big", flipped: []string{"small"}, takenNow: []string{"a", "small"}},
		}},
		{name: "one object over the backends", steps: []step{
			{set: e(1, "huge", 11), taken: false, takenNow: nil},
			{set: e(2, "b", 1), taken: false, takenNow: nil},
			{remove: "huge", flipped: []string{"b"}, takenNow: []string{"b"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newRecordQuotas(lim)
			names := map[string]bool{}
			for i, s := range tc.steps {
				var flipped []string
				if s.set != nil {
					names[s.set.name] = true
					would := q.wouldTake("ns", s.set.name, s.set.created, s.set.backends)
					var taken bool
					taken, flipped = q.set("ns", s.set.name, s.set.created, s.set.backends)
					if taken != s.taken || would != s.taken {
						t.Errorf("step %d: set %s taken %v (would %v), want %v", i, s.set.name, taken, would, s.taken)
					}
				} else {
					flipped = q.remove("ns", s.remove)
					delete(names, s.remove)
				}
				if !slices.Equal(flipped, s.flipped) {
					t.Errorf("step %d: flipped %v, want %v", i, flipped, s.flipped)
				}
				var now []string
				for _, n := range slices.Sorted(func(yield func(string) bool) {
					for n := range names {
						if !yield(n) {
							return
						}
					}
				}) {
					if q.taken("ns", n) {
						now = append(now, n)
					}
				}
				if !slices.Equal(now, s.takenNow) {
					t.Errorf("step %d: taken %v, want %v", i, now, s.takenNow)
				}
			}
		})
	}
}

// TestRecordQuotasRandom: 20 seeds × 400 random sets, updates and removes
// of up to 40 objects of two clusters: after each, what is taken equals
// the plain rule, the reported flips are exactly the other objects whose
// being taken changed, and wouldTake foretold set's answer.
func TestRecordQuotasRandom(t *testing.T) {
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		lim := addrpolicy.Quotas{Records: 1 + rng.IntN(12), Backends: 1 + rng.IntN(60)}
		q := newRecordQuotas(lim)
		objs := map[string]map[string]quotaEntry{"n1": {}, "n2": {}}
		for step := range 400 {
			ns := []string{"n1", "n2"}[rng.IntN(2)]
			name := fmt.Sprintf("o%d", rng.IntN(40))
			before := takenByReference(objs[ns], lim)
			var flipped []string
			if rng.IntN(4) == 0 {
				flipped = q.remove(ns, name)
				delete(objs[ns], name)
			} else {
				e := quotaEntry{created: time.Unix(int64(rng.IntN(30)), 0), name: name, backends: rng.IntN(10)}
				if have, ok := objs[ns][name]; ok {
					e.created = have.created // an object's creation time never changes
				}
				would := q.wouldTake(ns, name, e.created, e.backends)
				var taken bool
				taken, flipped = q.set(ns, name, e.created, e.backends)
				objs[ns][name] = e
				if want := takenByReference(objs[ns], lim)[name]; taken != want || would != want {
					t.Fatalf("seed %d step %d: set %s taken %v (would %v), want %v", seed, step, name, taken, would, want)
				}
			}
			after := takenByReference(objs[ns], lim)
			var wantFlips []string
			for n := range objs[ns] {
				if n != name && before[n] != after[n] {
					wantFlips = append(wantFlips, n)
				}
			}
			slices.Sort(wantFlips)
			slices.Sort(flipped)
			if !slices.Equal(slices.Compact(flipped), wantFlips) {
				t.Fatalf("seed %d step %d (%s %s): flipped %v, want %v", seed, step, ns, name, flipped, wantFlips)
			}
			for _, n := range []string{"n1", "n2"} {
				want := takenByReference(objs[n], lim)
				for o := range objs[n] {
					if q.taken(n, o) != want[o] {
						t.Fatalf("seed %d step %d: %s/%s taken %v, want %v", seed, step, n, o, q.taken(n, o), want[o])
					}
				}
				if objects, taken := q.usage(n); objects != len(objs[n]) || taken != len(want) {
					t.Fatalf("seed %d step %d: usage of %s %d/%d, want %d/%d", seed, step, n, taken, objects, len(want), len(objs[n]))
				}
			}
		}
	}
}
