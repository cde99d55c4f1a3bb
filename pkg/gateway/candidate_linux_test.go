package gateway

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strings"
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
	var data atomic.Value
	go serveEchoes(conn, func(d []byte) bool {
		data.Store(string(d))
		return holding.Load()
	})
	port := netip.MustParseAddrPort(conn.LocalAddr().String()).Port()
	var downs atomic.Int32
	h := &holderProbe{misses: 3, onDown: func() { downs.Add(1) }}
	p := startProber(t, "", lo, port, h)
	h.watch("a", lo, "a's token")
	if h.answering("a") {
		t.Fatal("a answering before any echo")
	}
	within(t, "a, out of its term, down", func() bool { return h.down("a") && downs.Load() > 0 })
	if h.answering("a") || !p.Stats()["a"].LastReply.IsZero() {
		t.Fatalf("a answered out of its term (answering %v)", h.answering("a"))
	}
	if got := data.Load(); got != "a's token" {
		t.Errorf("the echoes carry %q, want a's token", got)
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
	h.watch("", netip.Addr{}, "")
	if n := len(p.Stats()); n != 0 {
		t.Errorf("probing %d targets after watch(\"\"), want none", n)
	}
}

// TestForgedProbe: what reaches a holder's probe port without its token
// (a pod's forged echo) is answered, but does not count as a passive
// candidate watching, so the holder's stop keeps its state for
// adoption; a passive candidate's prober, aimed with the token from
// the Lease, does count.
func TestForgedProbe(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	conn, err := listenUDP("", netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	el := &elector{probeToken: "holder-token", renewed: time.Now()}
	go serveEchoes(conn, el.answerProbe)
	port := netip.MustParseAddrPort(conn.LocalAddr().String()).Port()

	forger := &holderProbe{misses: 3}
	startProber(t, "", lo, port, forger)
	forger.watch("a", lo, "a guess")
	within(t, "the forged echoes answered", func() bool { return forger.answering("a") })
	if el.probedWithin(time.Hour) {
		t.Fatal("echoes without the holder's token count as a passive candidate's")
	}

	passive := &holderProbe{misses: 3}
	startProber(t, "", lo, port, passive)
	passive.watch("a", lo, "holder-token")
	within(t, "the passive candidate noted", func() bool { return el.probedWithin(time.Second) })
}

// A holder whose answers come late (after the prober counted its
// echoes lost: a loaded node) is slow, not down. The responder holds its
// answers to the first misses echoes and answers no other: the holder is
// down once they are counted lost, and answering again when the held
// answers arrive — by late answers alone, every echo still counted lost.
// The silence is generous (a minute): no check depends on how fast the
// answers come.
func TestCandidateProbesLateAnswers(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	conn, err := listenUDP("", netip.AddrPortFrom(lo, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const misses = 3
	type answer struct {
		b  []byte
		to net.Addr
	}
	held := make(chan answer, misses)
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
			b, err := msg.Marshal(nil)
			if err != nil {
				continue
			}
			select {
			case held <- answer{b, from}: // the first misses echoes
			default:
			}
		}
	}()
	port := netip.MustParseAddrPort(conn.LocalAddr().String()).Port()
	h := &holderProbe{misses: misses, silence: time.Minute}
	p := startProber(t, "", lo, port, h)
	h.watch("a", lo, "")
	// Echoes expire oldest first: these are the held ones.
	within(t, "a's first echoes lost", func() bool { return p.Stats()["a"].LostInARow >= misses })
	if !h.down("a") || h.answering("a") {
		t.Fatalf("a silent: down %v, answering %v, want down (%+v)", h.down("a"), h.answering("a"), p.Stats()["a"])
	}
	for range misses {
		a := <-held
		if _, err := conn.WriteTo(a.b, a.to); err != nil {
			t.Fatal(err)
		}
	}
	within(t, "a's late answers heard", func() bool { return !p.Stats()["a"].LastReply.IsZero() })
	s := p.Stats()["a"]
	if s.Lost != s.Sent || s.LostInARow < misses {
		t.Fatalf("an answer counted in time (%+v), want late ones only", s)
	}
	if h.down("a") || !h.answering("a") {
		t.Errorf("a answering late: down %v, answering %v, want answering (%+v)", h.down("a"), h.answering("a"), s)
	}
}

// An ICMP error other than port unreachable (here host unreachable: an
// nftables reject in the test's namespace, for a second target) reaches
// the prober socket as a read error (IP_RECVERR). The receiver reads on:
// the holder's answers are still heard after the errors, and the other
// target is not marked refused.
func TestCandidateProbesAfterNetworkError(t *testing.T) {
	ns := newNetns(t, "gwp")
	nsPath := "/run/netns/" + ns
	holder, other := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	conn, err := listenUDP(nsPath, netip.AddrPortFrom(holder, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go serveEchoes(conn, func([]byte) bool { return true })
	port := netip.MustParseAddrPort(conn.LocalAddr().String()).Port()
	run(t, "ip", "netns", "exec", ns, "nft", "add table ip t")
	run(t, "ip", "netns", "exec", ns, "nft", "add chain ip t out { type filter hook output priority 0 ; }")
	run(t, "ip", "netns", "exec", ns, "nft", fmt.Sprintf("add rule ip t out ip daddr %s udp dport %d counter reject with icmp type host-unreachable", other, port))
	h := &holderProbe{misses: 3}
	p := startProber(t, nsPath, holder, port, h)
	p.SetTargets(map[string]netip.Addr{"a": holder, "x": other})
	within(t, "x's echoes rejected", func() bool { return rejected(t, ns) >= 3 })
	after := time.Now()
	within(t, "a's answers after the errors", func() bool { return p.Stats()["a"].LastReply.After(after) })
	if s := p.Stats()["x"]; s.Refused || s.LostInARow == 0 {
		t.Errorf("x, host unreachable: %+v, want lost, not refused", s)
	}
}

// startProber starts h's prober (echoes every 20 ms from local, in the
// network namespace nsPath, "" = this one, to port), closed when the
// test ends.
func startProber(t *testing.T, nsPath string, local netip.Addr, port uint16, h *holderProbe) *echoProber {
	t.Helper()
	p, err := newUDPProber(nsPath, local, port, 20*time.Millisecond, slog.New(slog.DiscardHandler), h.result)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	h.p = p
	return p
}

// rejected is the packet count of the reject rule in ns's table t.
func rejected(t *testing.T, ns string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "chain", "ip", "t", "out").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	var n int
	if _, err := fmt.Sscanf(string(out[strings.Index(string(out), "packets"):]), "packets %d", &n); err != nil {
		t.Fatalf("nft counter: %v\n%s", err, out)
	}
	return n
}
