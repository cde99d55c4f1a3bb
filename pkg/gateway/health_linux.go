package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// icmpProber sends one ICMP echo per interval to every target from the
// local health-check IP, through a raw socket opened in the gateway's
// namespace. The remote kernel answers (the remote health-check IP is an
// address of its gateway), so no responder process is needed.
type icmpProber struct {
	probeTable
	conn     *icmp.PacketConn
	id       uint16
	interval time.Duration
	log      *slog.Logger
	onResult func(cluster string, rtt time.Duration) // rtt < 0: lost

	mu2      sync.Mutex
	inflight map[uint16]inflight // seq -> echo
	seq      uint16
	cancel   context.CancelFunc
	done     chan struct{}
}

type inflight struct {
	cluster string
	to      netip.Addr
	sent    time.Time
}

func newICMPProber(nsPath string, local netip.Addr, interval time.Duration, log *slog.Logger, onResult func(string, time.Duration)) (*icmpProber, error) {
	var conn *icmp.PacketConn
	err := netnsx.Do(nsPath, func() error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", local.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open health-check socket on %s: %w", local, err)
	}
	var b [2]byte
	rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	p := &icmpProber{conn: conn, id: binary.BigEndian.Uint16(b[:]), interval: interval, log: log,
		onResult: onResult, inflight: map[uint16]inflight{}, cancel: cancel, done: make(chan struct{})}
	go p.receive()
	go p.send(ctx)
	return p, nil
}

func (p *icmpProber) send(ctx context.Context) {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		p.expire(now)
		p.mu.Lock()
		targets := make(map[string]netip.Addr, len(p.targets))
		for id, a := range p.targets {
			targets[id] = a
		}
		p.mu.Unlock()
		for id, addr := range targets {
			p.mu2.Lock()
			p.seq++
			seq := p.seq
			p.inflight[seq] = inflight{cluster: id, to: addr, sent: now}
			p.mu2.Unlock()
			msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: int(p.id), Seq: int(seq), Data: []byte("causeway-health")}}
			b, _ := msg.Marshal(nil)
			if _, err := p.conn.WriteTo(b, &net.IPAddr{IP: addr.AsSlice()}); err != nil {
				p.log.Debug("health-check send failed", "remote", id, "to", addr, "err", err)
			}
		}
	}
}

// expire counts echoes older than two intervals as lost.
func (p *icmpProber) expire(now time.Time) {
	p.mu2.Lock()
	var lost []inflight
	for seq, f := range p.inflight {
		if now.Sub(f.sent) > 2*p.interval {
			lost = append(lost, f)
			delete(p.inflight, seq)
		}
	}
	p.mu2.Unlock()
	for _, f := range lost {
		p.record(f.cluster, f.to, -1, now)
	}
}

func (p *icmpProber) record(cluster string, to netip.Addr, rtt time.Duration, at time.Time) {
	p.mu.Lock()
	if l := p.logs[cluster]; l != nil && p.targets[cluster] == to {
		l.add(rtt, at)
	}
	p.mu.Unlock()
	if p.onResult != nil {
		p.onResult(cluster, rtt)
	}
}

func (p *icmpProber) receive() {
	buf := make([]byte, 1500)
	for {
		n, from, err := p.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		now := time.Now()
		msg, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || msg.Type != ipv4.ICMPTypeEchoReply {
			continue
		}
		echo, ok := msg.Body.(*icmp.Echo)
		if !ok || uint16(echo.ID) != p.id {
			continue
		}
		src, _ := netip.AddrFromSlice(from.(*net.IPAddr).IP)
		p.mu2.Lock()
		f, ok := p.inflight[uint16(echo.Seq)]
		if ok && f.to == src.Unmap() {
			delete(p.inflight, uint16(echo.Seq))
		}
		p.mu2.Unlock()
		if ok && f.to == src.Unmap() {
			p.record(f.cluster, f.to, now.Sub(f.sent), now)
		}
	}
}

func (p *icmpProber) Close() error {
	p.cancel()
	<-p.done
	return p.conn.Close()
}
