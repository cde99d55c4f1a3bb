package controller

import (
	"slices"
	"testing"
	"time"
)

func TestLiveness(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLiveness("c1", 3*time.Second, 10*time.Second, func() time.Time { return now })
	step := func(d time.Duration, renewOwn bool, others map[string]string) []string {
		now = now.Add(d)
		if renewOwn {
			l.renewed()
			l.observe("c1", now.String())
		}
		for c, v := range others {
			l.observe(c, v)
		}
		ch, _, _ := l.check()
		slices.Sort(ch)
		return ch
	}
	if ch := step(0, true, map[string]string{"c2": "1", "c3": "1"}); len(ch) != 0 {
		t.Fatalf("fresh clusters changed state: %v", ch)
	}
	// c3 keeps renewing, c2 stops.
	for i := range 12 {
		if ch := step(time.Second, true, map[string]string{"c3": string(rune('a' + i))}); len(ch) != 0 {
			t.Fatalf("second %d: %v changed state too early", i+1, ch)
		}
	}
	if ch := step(2*time.Second, true, map[string]string{"c3": "x"}); !slices.Equal(ch, []string{"c2"}) || l.alive("c2") || !l.alive("c3") {
		t.Fatalf("after 14s without renewal: changed %v, c2 alive %v, c3 alive %v", ch, l.alive("c2"), l.alive("c3"))
	}
	// c2 returns.
	if ch := step(time.Second, true, map[string]string{"c2": "2"}); !slices.Equal(ch, []string{"c2"}) || !l.alive("c2") {
		t.Fatalf("c2 renewed: changed %v, alive %v", ch, l.alive("c2"))
	}
	// The broker is unreachable: nobody's Lease changes, ours is not
	// renewed. Nobody is declared dead, however long it lasts.
	for range 60 {
		if ch := step(time.Second, false, nil); len(ch) != 0 {
			t.Fatalf("during a broker outage %v changed state", ch)
		}
	}
	if !l.alive("c2") || !l.alive("c3") || !l.alive("c1") {
		t.Fatal("a cluster was declared dead during a broker outage")
	}
	// Back: our own renewals come back first; c2's controller takes 8 s
	// longer to renew (its own retries), c3 never does. Nothing flaps;
	// c3 is declared dead once it has had the whole limit since then.
	for i := range 14 {
		others := map[string]string{}
		if i >= 8 {
			others["c2"] = string(rune('a' + i))
		}
		if ch := step(time.Second, true, others); len(ch) != 0 {
			t.Fatalf("second %d after the outage: %v changed state", i+1, ch)
		}
	}
	if ch := step(time.Second, true, map[string]string{"c2": "after"}); !slices.Equal(ch, []string{"c3"}) || !l.alive("c2") {
		t.Fatalf("15 s after the outage: changed %v (want c3), c2 alive %v", ch, l.alive("c2"))
	}
	if ch := step(time.Second, true, map[string]string{"c3": "y"}); !slices.Equal(ch, []string{"c3"}) || !l.alive("c3") {
		t.Fatalf("c3 renewed: changed %v, alive %v", ch, l.alive("c3"))
	}
	// A deleted Lease times out.
	l.forget("c3")
	l.observe("c3", "")
	for range 14 {
		step(time.Second, true, map[string]string{"c2": now.String()})
	}
	if l.alive("c3") || !l.alive("c2") {
		t.Fatalf("deleted lease: c3 alive %v, c2 alive %v", l.alive("c3"), l.alive("c2"))
	}
	if !l.alive("never-seen") {
		t.Error("a cluster never seen is dead")
	}
}
