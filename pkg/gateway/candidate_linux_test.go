package gateway

import (
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// TestCandidateProbes runs the candidate probes over real UDP sockets
// (loopback of the test's namespace): a responder answers, the holder is
// up; once the responder is gone the holder is down after misses lost
// echoes and onDown fires.
func TestCandidateProbes(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	conn, err := listenUDP("", netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	go serveEchoes(conn)
	port := netip.MustParseAddrPort(conn.LocalAddr().String()).Port()
	var downs atomic.Int32
	h := &holderProbe{misses: 3, onDown: func() { downs.Add(1) }}
	p, err := newUDPProber("", lo, port, 20*time.Millisecond, slog.New(slog.DiscardHandler), h.result)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h.p = p
	h.watch("a", lo)
	within(t, "answers from a", func() bool { return !p.Stats()["a"].LastReply.IsZero() })
	if h.down("a") || downs.Load() != 0 {
		t.Fatalf("a answering but down (%v), onDown called %d times", h.down("a"), downs.Load())
	}
	conn.Close()
	within(t, "a down after its responder stopped", func() bool { return h.down("a") && downs.Load() > 0 })
	if s := p.Stats()["a"]; s.LostInARow < 3 {
		t.Errorf("down with %d echoes lost in a row, want ≥ 3", s.LostInARow)
	}
	h.watch("", netip.Addr{})
	if n := len(p.Stats()); n != 0 {
		t.Errorf("probing %d targets after watch(\"\"), want none", n)
	}
}
