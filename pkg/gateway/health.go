package gateway

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// probeWindow is how many recent echoes loss and the RTT summary cover.
const probeWindow = 10

// probeStats summarises the recent health checks of one remote.
type probeStats struct {
	Sent     int // echoes sent in the window (answered or not)
	Lost     int
	Last     time.Duration // zero when the last echo got no answer yet
	Min, Max time.Duration
	Avg      time.Duration
	// LastReply is when the last answer arrived, also one to an echo
	// already counted as lost (zero: never).
	LastReply time.Time
	// LostInARow counts the unanswered echoes since the last answer
	// (within the window).
	LostInARow int
	// AnsweredInARow counts the answered echoes since the last lost one
	// (within the window).
	AnsweredInARow int
	// Refused: since the last answer, the target's kernel refused an
	// echo (ICMP port unreachable: nothing listens on the port; UDP
	// probes only).
	Refused bool
}

// LossPercent is the share of unanswered echoes in the window.
func (s probeStats) LossPercent() int32 {
	if s.Sent == 0 {
		return 0
	}
	return int32(100 * s.Lost / s.Sent)
}

// probeLog keeps the outcomes of the last probeWindow echoes to one remote.
// It is the pure bookkeeping of the prober (no I/O). Loss (Sent, Lost)
// counts from the remote's first answer, late or not, once there is one:
// the echoes lost before went out while the path was being set up (a new
// tunnel's handshake) and are no loss of a path that works. Until then,
// and for the runs in a row, every echo counts (a remote that never
// answers is unreachable).
type probeLog struct {
	rtts      []time.Duration // -1 = lost
	setup     int             // how many of rtts went out before the first answer
	lastReply time.Time
	refused   bool
}

func (l *probeLog) add(rtt time.Duration, at time.Time) {
	if rtt >= 0 && l.lastReply.IsZero() {
		l.setup = len(l.rtts)
	}
	l.rtts = append(l.rtts, rtt)
	if drop := len(l.rtts) - probeWindow; drop > 0 {
		l.rtts = slices.Delete(l.rtts, 0, drop)
		l.setup = max(0, l.setup-drop)
	}
	if rtt >= 0 {
		l.lastReply = at
		l.refused = false
	}
}

// late records an answer to an echo already counted as lost: the target
// is alive, only slow.
func (l *probeLog) late(at time.Time) {
	if l.lastReply.IsZero() {
		l.setup = len(l.rtts)
	}
	l.lastReply = at
	l.refused = false
}

func (l *probeLog) stats() probeStats {
	s := probeStats{Sent: len(l.rtts) - l.setup, LastReply: l.lastReply, Refused: l.refused}
	var sum time.Duration
	n := 0
	for i, r := range l.rtts {
		if r < 0 {
			if i >= l.setup {
				s.Lost++
			}
			s.LostInARow++
			s.AnsweredInARow = 0
			if i == len(l.rtts)-1 {
				s.Last = 0
			}
			continue
		}
		s.LostInARow = 0
		s.AnsweredInARow++
		if n == 0 || r < s.Min {
			s.Min = r
		}
		if r > s.Max {
			s.Max = r
		}
		sum += r
		n++
		s.Last = r
	}
	if n > 0 {
		s.Avg = sum / time.Duration(n)
	}
	return s
}

// prober sends health-check echoes through the tunnels and reports RTT and
// loss per remote cluster.
type prober interface {
	// SetTargets replaces the remotes to probe: cluster ID -> its
	// health-check IP.
	SetTargets(map[string]netip.Addr)
	// Stats returns the current summary per probed cluster.
	Stats() map[string]probeStats
	Close() error
}

// noProber is used when the gateway has no health-check IP: it probes
// nothing and connection status rests on the driver's view.
type noProber struct{}

func (noProber) SetTargets(map[string]netip.Addr) {}
func (noProber) Stats() map[string]probeStats     { return nil }
func (noProber) Close() error                     { return nil }

// probeTable is the shared state of a real prober: targets and their logs.
type probeTable struct {
	mu      sync.Mutex
	targets map[string]netip.Addr
	logs    map[string]*probeLog
}

func (t *probeTable) SetTargets(targets map[string]netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.logs == nil {
		t.logs = map[string]*probeLog{}
	}
	for id, addr := range t.targets {
		if targets[id] != addr {
			delete(t.logs, id) // a new address starts a new history
		}
	}
	t.targets = map[string]netip.Addr{}
	for id, addr := range targets {
		t.targets[id] = addr
		if t.logs[id] == nil {
			t.logs[id] = &probeLog{}
		}
	}
}

func (t *probeTable) Stats() map[string]probeStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]probeStats, len(t.logs))
	for id, l := range t.logs {
		out[id] = l.stats()
	}
	return out
}

// serveEchoes answers the ICMP echo messages UDP probers send to conn
// when answer, given an echo's data, says so, until conn is closed (the
// candidate probes: the answer comes from this process, so it means the
// process is alive, not only its node, and — answer being
// elector.answerProbe — in its term).
func serveEchoes(conn net.PacketConn, answer func(data []byte) bool) {
	buf := make([]byte, 1500)
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		msg, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || msg.Type != ipv4.ICMPTypeEcho {
			continue
		}
		echo, ok := msg.Body.(*icmp.Echo)
		if !ok || !answer(echo.Data) {
			continue
		}
		msg.Type = ipv4.ICMPTypeEchoReply
		if b, err := msg.Marshal(nil); err == nil {
			_, _ = conn.WriteTo(b, from)
		}
	}
}
