package gateway

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// echoProber sends one ICMP echo message per interval to every target
// from a local address, through a socket opened in the gateway's
// namespace, and matches the replies. Two transports:
//
//   - raw ICMP (network "ip4:icmp"): the tunnel health checks. The remote
//     kernel answers (the remote health-check IP is an address of its
//     gateway), so no responder process is needed.
//   - UDP (network "udp4", to port): the candidate probes. The message
//     is the UDP payload and the prober's peer process answers it
//     (serveEchoes), so an answer means the process is alive, not only
//     its node.
type echoProber struct {
	probeTable
	conn     net.PacketConn
	port     uint16 // UDP: the responders' port
	id       uint16
	interval time.Duration
	log      *slog.Logger
	onResult func(target string, rtt time.Duration) // rtt < 0: lost

	mu2      sync.Mutex
	payload  []byte              // an echo's data (SetPayload)
	inflight map[uint16]inflight // seq -> echo
	seq      uint16
	cancel   context.CancelFunc
	done     chan struct{}
}

type inflight struct {
	target string // the probeTable key: a cluster ID, a candidate
	to     netip.Addr
	sent   time.Time
}

// newICMPProber probes remote health-check IPs with raw ICMP echoes.
func newICMPProber(nsPath string, local netip.Addr, interval time.Duration, log *slog.Logger, onResult func(string, time.Duration)) (*echoProber, error) {
	var conn net.PacketConn
	err := netnsx.Do(nsPath, func() error {
		var err error
		conn, err = icmp.ListenPacket("ip4:icmp", local.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open health-check socket on %s: %w", local, err)
	}
	return startEchoProber(conn, 0, interval, log, onResult), nil
}

// newUDPProber probes echo responders (serveEchoes) on port of each
// target, from local.
func newUDPProber(nsPath string, local netip.Addr, port uint16, interval time.Duration, log *slog.Logger, onResult func(string, time.Duration)) (*echoProber, error) {
	conn, err := listenUDP(nsPath, netip.AddrPortFrom(local, 0))
	if err != nil {
		return nil, fmt.Errorf("open probe socket on %s: %w", local, err)
	}
	// ICMP errors (a closed port: the responder's process is gone) are
	// queued on the socket and reported by the next read.
	if err := setRecvErr(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("probe socket on %s: %w", local, err)
	}
	return startEchoProber(conn, port, interval, log, onResult), nil
}

func startEchoProber(conn net.PacketConn, port uint16, interval time.Duration, log *slog.Logger, onResult func(string, time.Duration)) *echoProber {
	var b [2]byte
	rand.Read(b[:])
	ctx, cancel := context.WithCancel(context.Background())
	p := &echoProber{conn: conn, port: port, id: binary.BigEndian.Uint16(b[:]), interval: interval, log: log,
		onResult: onResult, payload: []byte("causeway-health"), inflight: map[uint16]inflight{}, cancel: cancel, done: make(chan struct{})}
	go p.receive()
	go p.send(ctx)
	return p
}

// dest is where an echo to addr goes.
func (p *echoProber) dest(addr netip.Addr) net.Addr {
	if p.port != 0 {
		return &net.UDPAddr{IP: addr.AsSlice(), Port: int(p.port)}
	}
	return &net.IPAddr{IP: addr.AsSlice()}
}

// sourceOf is the address an answer came from.
func sourceOf(a net.Addr) netip.Addr {
	var ip net.IP
	switch a := a.(type) {
	case *net.IPAddr:
		ip = a.IP
	case *net.UDPAddr:
		ip = a.IP
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

func (p *echoProber) send(ctx context.Context) {
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
			seq, data := p.seq, p.payload
			p.inflight[seq] = inflight{target: id, to: addr, sent: now}
			p.mu2.Unlock()
			msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: int(p.id), Seq: int(seq), Data: data}}
			b, _ := msg.Marshal(nil)
			if _, err := p.conn.WriteTo(b, p.dest(addr)); err != nil {
				p.log.Debug("health-check send failed", "remote", id, "to", addr, "err", err)
			}
		}
	}
}

// SetPayload makes data the data of the echoes sent from now on (the
// candidate probes: the holder's probe token).
func (p *echoProber) SetPayload(data []byte) {
	p.mu2.Lock()
	defer p.mu2.Unlock()
	p.payload = slices.Clone(data)
}

// expire counts echoes older than two intervals as lost.
func (p *echoProber) expire(now time.Time) {
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
		p.record(f.target, f.to, -1, now)
	}
}

func (p *echoProber) record(target string, to netip.Addr, rtt time.Duration, at time.Time) {
	p.mu.Lock()
	if l := p.logs[target]; l != nil && p.targets[target] == to {
		l.add(rtt, at)
	}
	p.mu.Unlock()
	if p.onResult != nil {
		p.onResult(target, rtt)
	}
}

func (p *echoProber) receive() {
	buf := make([]byte, 1500)
	for {
		n, from, err := p.conn.ReadFrom(buf)
		var errno unix.Errno
		if errors.As(err, &errno) {
			// An ICMP error of an echo (IP_RECVERR: refused, host or
			// net unreachable, …), reported by this read: not the
			// socket's end.
			p.refusals()
			continue
		}
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
		src := sourceOf(from)
		p.mu2.Lock()
		f, ok := p.inflight[uint16(echo.Seq)]
		if ok && f.to == src {
			delete(p.inflight, uint16(echo.Seq))
		}
		p.mu2.Unlock()
		switch {
		case ok && f.to == src:
			p.record(f.target, f.to, now.Sub(f.sent), now)
		case !ok:
			p.recordLate(src, now)
		}
	}
}

// recordLate notes an answer from addr to an echo already counted as
// lost (its seq expired): the target is slow, not silent.
func (p *echoProber) recordLate(addr netip.Addr, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, a := range p.targets {
		if l := p.logs[id]; a == addr && l != nil {
			l.late(at)
		}
	}
}

// refusals drains the socket's error queue (IP_RECVERR): each ICMP port
// unreachable names the address an echo went to; its target is marked
// refused (until it answers again) and reported like a lost echo. Other
// errors (an unreachable host: the echo is lost anyway) mark nothing.
func (p *echoProber) refusals() {
	rc, err := p.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return
	}
	var refused []netip.Addr
	_ = rc.Read(func(fd uintptr) bool {
		buf, oob := make([]byte, 64), make([]byte, 512)
		for {
			_, oobn, _, from, err := unix.Recvmsg(int(fd), buf, oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if err != nil {
				return true // queue empty
			}
			to, ok := from.(*unix.SockaddrInet4)
			if ok && portUnreachable(oob[:oobn]) {
				refused = append(refused, netip.AddrFrom4(to.Addr))
			}
		}
	})
	for _, addr := range refused {
		p.mu.Lock()
		var target string
		for id, a := range p.targets {
			if a == addr {
				target = id
			}
		}
		if l := p.logs[target]; l != nil {
			l.refused = true
		}
		p.mu.Unlock()
		if target != "" && p.onResult != nil {
			p.onResult(target, -1)
		}
	}
}

// portUnreachable reports whether the control messages of an error
// queue read carry ECONNREFUSED (IP_RECVERR's sock_extended_err starts
// with ee_errno).
func portUnreachable(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR && len(m.Data) >= 4 &&
			unix.Errno(binary.NativeEndian.Uint32(m.Data)) == unix.ECONNREFUSED {
			return true
		}
	}
	return false
}

// setRecvErr turns IP_RECVERR on for conn's socket.
func setRecvErr(conn net.PacketConn) error {
	rc, err := conn.(syscall.Conn).SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_RECVERR, 1) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("IP_RECVERR: %w", serr)
	}
	return nil
}

func (p *echoProber) Close() error {
	p.cancel()
	<-p.done
	return p.conn.Close()
}

// listenUDP opens a UDP socket on addr inside the namespace at nsPath.
func listenUDP(nsPath string, addr netip.AddrPort) (net.PacketConn, error) {
	var conn net.PacketConn
	err := netnsx.Do(nsPath, func() error {
		var err error
		conn, err = net.ListenPacket("udp4", addr.String())
		return err
	})
	return conn, err
}
