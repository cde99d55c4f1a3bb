package gateway

import (
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// TestCandidateProbes runs the candidate probes over real UDP sockets
// (loopback of the test's namespace): a responder out of its term
// answers nothing, the holder is neither answering nor down, then down;
// in its term it answers, the holder is answering; once the responder is
// gone its port is closed: the holder is gone at the next echo (the
// kernel refuses it), down after misses lost echoes, and onDown fires.
func TestCandidateProbes(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	conn, err := listenUDP("", netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	var holding atomic.Bool
	go serveEchoes(conn, holding.Load)
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
	if h.answering("a") {
		t.Fatal("a answering before any echo")
	}
	within(t, "a, out of its term, down", func() bool { return h.down("a") && downs.Load() > 0 })
	if h.answering("a") || !p.Stats()["a"].LastReply.IsZero() {
		t.Fatalf("a answered out of its term (answering %v)", h.answering("a"))
	}
	holding.Store(true)
	within(t, "answers from a in its term", func() bool { return h.answering("a") })
	downs.Store(0)
	if h.down("a") || h.gone("a") {
		t.Fatalf("a answering but down (%v) or gone (%v)", h.down("a"), h.gone("a"))
	}
	conn.Close()
	within(t, "a gone after its responder stopped", func() bool { return h.gone("a") && downs.Load() > 0 })
	if s := p.Stats()["a"]; s.LostInARow >= 3 {
		t.Errorf("gone only after %d echoes lost in a row, want it at the first refused one", s.LostInARow)
	}
	within(t, "a down after its responder stopped", func() bool { return h.down("a") })
	if h.answering("a") {
		t.Error("a down and answering")
	}
	if s := p.Stats()["a"]; s.LostInARow < 3 {
		t.Errorf("down with %d echoes lost in a row, want ≥ 3", s.LostInARow)
	}
	h.watch("", netip.Addr{})
	if n := len(p.Stats()); n != 0 {
		t.Errorf("probing %d targets after watch(\"\"), want none", n)
	}
}

// A holder whose answers all come late (after the prober counted its
// echoes lost: a loaded node) is slow, not down: it keeps answering.
func TestCandidateProbesLateAnswers(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	conn, err := listenUDP("", netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const interval = 20 * time.Millisecond
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			msg, err := icmp.ParseMessage(1, buf[:n])
			if err != nil {
				continue
			}
			msg.Type = ipv4.ICMPTypeEchoReply
			b, _ := msg.Marshal(nil)
			time.AfterFunc(3*interval, func() { _, _ = conn.WriteTo(b, from) }) // lost after 2 intervals
		}
	}()
	port := netip.MustParseAddrPort(conn.LocalAddr().String()).Port()
	h := &holderProbe{misses: 3, silence: 3 * interval}
	p, err := newUDPProber("", lo, port, interval, slog.New(slog.DiscardHandler), h.result)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	h.p = p
	h.watch("a", lo)
	within(t, "a's echoes lost in a row", func() bool { return p.Stats()["a"].LostInARow >= 3 })
	for end := time.Now().Add(20 * interval); time.Now().Before(end); time.Sleep(interval / 2) {
		if h.down("a") || !h.answering("a") {
			t.Fatalf("a answering late: down %v, answering %v (%+v)", h.down("a"), h.answering("a"), p.Stats()["a"])
		}
	}
}
