package gateway

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/reach"
)

func TestProbeLog(t *testing.T) {
	var l probeLog
	now := t0
	for i := range 12 { // more than the window: the oldest two drop out
		rtt := time.Duration(i+1) * time.Millisecond
		if i%4 == 3 {
			rtt = -1
		}
		l.add(rtt, now)
	}
	s := l.stats()
	// Window holds outcomes 3..12: lost at i=3,7,11 -> 3 of 10.
	if s.Sent != 10 || s.Lost != 3 || s.LossPercent() != 30 || s.LostInARow != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if s.Min != 3*time.Millisecond || s.Max != 11*time.Millisecond || s.Last != 0 {
		t.Fatalf("min/max/last = %v/%v/%v", s.Min, s.Max, s.Last)
	}
	// avg of 3,5,6,7,9,10,11 ms
	if s.Avg != 51*time.Millisecond/7 {
		t.Fatalf("avg = %v", s.Avg)
	}
}

// TestProbeLogSetup: the echoes lost before a remote first answers (a new
// tunnel's handshake) count while it has never answered, and no longer
// count as loss from its first answer, late or on time; they stay in the
// run of losses in a row until then, and losses after it count.
func TestProbeLogSetup(t *testing.T) {
	for _, late := range []bool{false, true} {
		var l probeLog
		l.add(-1, t0)
		l.add(-1, t0)
		if s := l.stats(); s.LossPercent() != 100 || s.LostInARow != 2 {
			t.Fatalf("never answered: %+v, want 100%% loss, 2 in a row", s)
		}
		if late {
			l.late(t0) // the answer to the second echo, after its deadline
			if s := l.stats(); s.Sent != 0 || s.LossPercent() != 0 || s.LostInARow != 2 {
				t.Fatalf("late first answer: %+v, want no loss counted, still 2 in a row", s)
			}
		}
		l.add(time.Millisecond, t0)
		l.add(-1, t0)
		if s := l.stats(); s.Sent != 2 || s.Lost != 1 || s.LossPercent() != 50 || s.LostInARow != 1 || s.LastReply != t0 {
			t.Fatalf("late %v: %+v, want the two echoes since the first answer, one lost", late, s)
		}
		for range probeWindow {
			l.add(time.Millisecond, t0)
		}
		if s := l.stats(); s.Sent != probeWindow || s.Lost != 0 {
			t.Fatalf("late %v: a full window later %+v, want %d sent, none lost", late, s, probeWindow)
		}
	}
}

func TestProbeTableKeepsHistoryPerAddress(t *testing.T) {
	var tb probeTable
	a := netip.MustParseAddr("10.245.0.1")
	tb.SetTargets(map[string]netip.Addr{"c3": a})
	tb.logs["c3"].add(time.Millisecond, t0)
	tb.SetTargets(map[string]netip.Addr{"c3": a})
	if tb.Stats()["c3"].Sent != 1 {
		t.Fatal("same target lost its history")
	}
	tb.SetTargets(map[string]netip.Addr{"c3": netip.MustParseAddr("10.245.0.9")})
	if tb.Stats()["c3"].Sent != 0 {
		t.Fatal("new address kept the old history")
	}
	tb.SetTargets(nil)
	if _, ok := tb.Stats()["c3"]; ok {
		t.Fatal("removed target still reported")
	}
}

func TestConnStatus(t *testing.T) {
	now := t0.Add(time.Minute)
	iv := time.Second
	for name, tc := range map[string]struct {
		drv       cable.Status
		hasTarget bool
		ps        probeStats
		want      v1alpha1.ConnectionStatus
	}{
		"no target, handshake":    {cable.Status{Connected: true}, false, probeStats{}, v1alpha1.Connected},
		"no target, no handshake": {cable.Status{}, false, probeStats{}, v1alpha1.Connecting},
		"waiting first answer":    {cable.Status{}, true, probeStats{Sent: 2, Lost: 2}, v1alpha1.Connecting},
		"never answered":          {cable.Status{}, true, probeStats{Sent: 5, Lost: 5}, v1alpha1.ConnError},
		"answering":               {cable.Status{}, true, probeStats{Sent: 5, LastReply: now.Add(-time.Second)}, v1alpha1.Connected},
		"answers stopped":         {cable.Status{Connected: true}, true, probeStats{Sent: 10, Lost: 4, LastReply: now.Add(-4 * time.Second)}, v1alpha1.ConnError},
	} {
		if got, msg := connStatus(tc.drv, tc.hasTarget, tc.ps, now, iv, 3*iv); got != tc.want || msg == "" {
			t.Errorf("%s: %s (%q), want %s", name, got, msg, tc.want)
		}
	}
}

func TestRoundRTT(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1387679 * time.Nanosecond: "1.39ms", 310 * time.Microsecond: "310µs", 12345678: "12.3ms",
		999: "999ns", 2*time.Second + 345*time.Millisecond: "2.35s", 0: "0s",
	} {
		if got := roundRTT(d).String(); got != want {
			t.Errorf("roundRTT(%v) = %s, want %s", d, got, want)
		}
	}
}

func TestUnreachable(t *testing.T) {
	for name, tc := range map[string]struct {
		was    bool
		status v1alpha1.ConnectionStatus
		ps     probeStats
		want   bool
	}{
		"connected stays":           {false, v1alpha1.Connected, probeStats{AnsweredInARow: 10}, false},
		"connecting is not dead":    {false, v1alpha1.Connecting, probeStats{Lost: 2}, false},
		"error: unreachable":        {false, v1alpha1.ConnError, probeStats{LostInARow: 5}, true},
		"one answer: still":         {true, v1alpha1.Connected, probeStats{AnsweredInARow: 1}, true},
		"three answers: back":       {true, v1alpha1.Connected, probeStats{AnsweredInARow: reachableAgainAfter}, false},
		"still silent: still":       {true, v1alpha1.ConnError, probeStats{LostInARow: 10}, true},
		"answers with a loss: stay": {true, v1alpha1.Connected, probeStats{AnsweredInARow: 2, LostInARow: 0}, true},
	} {
		if got := unreachable(tc.was, tc.status, tc.ps); got != tc.want {
			t.Errorf("%s: unreachable = %v, want %v", name, got, tc.want)
		}
	}
}

func TestProbeLogAnsweredInARow(t *testing.T) {
	var l probeLog
	for _, rtt := range []time.Duration{time.Millisecond, -1, time.Millisecond, time.Millisecond} {
		l.add(rtt, t0)
	}
	if s := l.stats(); s.AnsweredInARow != 2 || s.LostInARow != 0 {
		t.Fatalf("stats = %+v, want 2 answered in a row", s)
	}
	l.add(-1, t0)
	if s := l.stats(); s.AnsweredInARow != 0 || s.LostInARow != 1 {
		t.Fatalf("stats = %+v, want 1 lost in a row", s)
	}
}

// resettingDriver is a cable.Driver that counts the sessions reset per
// remote; nothing else is called by judgeReach.
type resettingDriver struct {
	cable.Driver
	resets map[string]int
}

func (d *resettingDriver) ResetSession(_ context.Context, id string) error {
	d.resets[id]++
	return nil
}

// TestJudgeReachResetsSilentSessions: the tunnel session of a remote in
// error is reset at once, not again within sessionResetInterval, again
// after it; a remote that answers again is reset at once when it goes
// silent the next time; one that answers is never reset; a driver
// without sessions is left alone.
func TestJudgeReachResetsSilentSessions(t *testing.T) {
	ctx := context.Background()
	p := &fakeProber{}
	p.SetTargets(map[string]netip.Addr{"c2": netip.MustParseAddr("242.0.2.1"), "c3": netip.MustParseAddr("242.0.3.1")})
	p.setDown("c3", true)
	drv := &resettingDriver{resets: map[string]int{}}
	e := &Engine{cfg: Config{HealthInterval: 100 * time.Millisecond, HealthTimeout: 500 * time.Millisecond, Reach: reach.NewBoard()},
		m: newMetrics(nil), log: slog.New(slog.DiscardHandler)}
	term := &activeTerm{prober: p, driver: drv, resetAt: map[string]time.Time{}}
	want := func(step string, c3 int) {
		t.Helper()
		if drv.resets["c3"] != c3 || drv.resets["c2"] != 0 {
			t.Fatalf("%s: resets %v, want c3 %d and c2 none", step, drv.resets, c3)
		}
	}
	e.judgeReach(ctx, term)
	want("silent", 1)
	if got := e.cfg.Reach.Get().Unreachable; !slices.Equal(got, []string{"c3"}) {
		t.Fatalf("unreachable %v, want [c3]", got)
	}
	e.judgeReach(ctx, term)
	want("silent again within the interval", 1)
	term.resetAt["c3"] = time.Now().Add(-time.Millisecond)
	e.judgeReach(ctx, term)
	want("silent after the interval", 2)
	p.setDown("c3", false)
	e.judgeReach(ctx, term)
	p.setDown("c3", true)
	e.judgeReach(ctx, term)
	want("silent after answering", 3)

	term.driver = countingDriver{}
	e.judgeReach(ctx, term) // no SessionResetter: nothing to call
}
