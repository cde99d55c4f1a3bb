package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// An echo stream is traffic between two pods, driven by the test process
// itself: the echo server's socket is opened in the server pod's network
// namespace, the client's in the client pod's, so the packets take the
// pods' real path (routes, route agent, tunnel) while the test reads
// every echo with its own clock. Each message is 16 bytes: a sequence
// number and the sender's monotonic offset.
const streamMsgLen = 16

// stream is one running echo stream (TCP: one connection for its whole
// life; UDP: independent datagrams, the dataplane's view without TCP's
// retransmission backoff).
type stream struct {
	proto    string
	start    time.Time
	interval time.Duration
	conn     net.Conn
	closers  []io.Closer
	done     chan struct{}
	wg       sync.WaitGroup

	mu   sync.Mutex
	recv []echo          // in arrival order
	err  error           // first failure of the connection (TCP) or of the check
	sent []time.Duration // send offset of each message, by sequence number
}

// echo is one message that came back.
type echo struct {
	seq      uint64
	sent, at time.Duration // offsets from start
}

// startStream starts an echo server for proto ("tcp" or "udp") on port
// (every address) inside serverNetns, connects to addr from clientNetns
// (that port of a pod IP, or an address translated to it on the way,
// such as a global IP:port) and sends a message every interval until
// Stop.
func startStream(proto, serverNetns, port, clientNetns, addr string, interval time.Duration) (*stream, error) {
	s := &stream{proto: proto, interval: interval, done: make(chan struct{})}
	if err := netnsx.Do(serverNetns, func() error { return s.serve(net.JoinHostPort("", port)) }); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%s echo server on port %s: %w", proto, port, err)
	}
	var conn net.Conn
	err := netnsx.Do(clientNetns, func() error {
		var err error
		conn, err = net.DialTimeout(proto, addr, 10*time.Second)
		return err
	})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("%s dial %s: %w", proto, addr, err)
	}
	s.conn, s.start = conn, time.Now()
	s.closers = append(s.closers, conn)
	s.wg.Add(2)
	go s.send()
	go s.receive()
	return s, nil
}

// serve opens the echo server's socket (in the calling thread's
// namespace) and answers in the background.
func (s *stream) serve(addr string) error {
	if s.proto == "udp" {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		s.closers = append(s.closers, pc)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			buf := make([]byte, 1500)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = pc.WriteTo(buf[:n], from)
			}
		}()
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, ln)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.closers = append(s.closers, c)
		s.mu.Unlock()
		_, _ = io.Copy(c, c)
	}()
	return nil
}

func (s *stream) send() {
	defer s.wg.Done()
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	var msg [streamMsgLen]byte
	for seq := uint64(0); ; seq++ {
		select {
		case <-s.done:
			return
		case <-tick.C:
		}
		at := time.Since(s.start)
		binary.BigEndian.PutUint64(msg[:8], seq)
		binary.BigEndian.PutUint64(msg[8:], uint64(at))
		// TCP: the socket buffer absorbs an outage (16 bytes per
		// message); the deadline only bounds a wedged connection.
		_ = s.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := s.conn.Write(msg[:]); err != nil {
			if s.proto == "tcp" {
				s.fail(fmt.Errorf("write message %d: %w", seq, err))
				return
			}
			// UDP: e.g. an ICMP error reported on a later write; the
			// message counts as lost.
		}
		s.mu.Lock()
		s.sent = append(s.sent, at)
		s.mu.Unlock()
	}
}

func (s *stream) receive() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	next := uint64(0)
	for {
		var err error
		if s.proto == "tcp" {
			_, err = io.ReadFull(s.conn, buf[:streamMsgLen])
		} else {
			var n int
			n, err = s.conn.Read(buf)
			if err == nil && n != streamMsgLen {
				err = fmt.Errorf("echo of %d bytes, want %d", n, streamMsgLen)
			}
		}
		at := time.Since(s.start)
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if s.proto == "udp" && !(errors.As(err, &ne) && ne.Timeout()) && !errors.Is(err, net.ErrClosed) {
				continue // UDP: ICMP errors surface as read errors; keep listening
			}
			s.fail(fmt.Errorf("read echo: %w", err))
			return
		}
		seq := binary.BigEndian.Uint64(buf[:8])
		if s.proto == "tcp" && seq != next {
			// One connection, in order, nothing lost or duplicated.
			s.fail(fmt.Errorf("echo of message %d, want %d", seq, next))
			return
		}
		next = seq + 1
		s.mu.Lock()
		s.recv = append(s.recv, echo{seq: seq, sent: time.Duration(binary.BigEndian.Uint64(buf[8:16])), at: at})
		s.mu.Unlock()
	}
}

func (s *stream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return // a failure caused by Stop
	default:
	}
	if s.err == nil {
		// When, and the last echo before: a failure's cause is found
		// in the timeline of that moment.
		last := "none"
		if n := len(s.recv); n > 0 {
			last = s.start.Add(s.recv[n-1].at).Format(time.StampMilli)
		}
		s.err = fmt.Errorf("at %s (last echo %s): %w", time.Now().Format(time.StampMilli), last, err)
	}
}

// Err is the stream's first failure.
func (s *stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// EchoedSince counts the echoes received of messages sent at or after t.
func (s *stream) EchoedSince(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	off, n := t.Sub(s.start), 0
	for _, e := range s.recv {
		if e.sent >= off {
			n++
		}
	}
	return n
}

// Stop ends the stream and closes its sockets.
func (s *stream) Stop() {
	s.mu.Lock()
	select {
	case <-s.done:
		s.mu.Unlock()
		return
	default:
	}
	close(s.done)
	closers := s.closers
	s.mu.Unlock()
	for _, c := range closers {
		_ = c.Close()
	}
	s.wg.Wait()
}

// gapStats describes the interruption around an instant.
type gapStats struct {
	// Longest is the longest interval without an echo arriving, among
	// echoes received after from (and the last one before it).
	Longest time.Duration
	// LongestAt is when that silence began, relative to from.
	LongestAt time.Duration
	// FirstNew is from → the first echo of a message sent after from.
	FirstNew time.Duration
	// Lost counts messages sent after from that never came back.
	Lost, Sent int
}

// Gap measures the interruption around from, over everything received
// until now.
func (s *stream) Gap(from time.Time) gapStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	off := from.Sub(s.start)
	var g gapStats
	prev := time.Duration(-1)
	echoed := map[uint64]bool{}
	firstNew := time.Duration(-1)
	for _, e := range s.recv {
		if e.sent >= off {
			echoed[e.seq] = true
			if firstNew < 0 {
				firstNew = e.at - off
			}
		}
		if e.at >= off && prev >= 0 && e.at-prev > g.Longest {
			g.Longest, g.LongestAt = e.at-prev, prev-off
		}
		prev = e.at
	}
	g.FirstNew = firstNew
	for seq, at := range s.sent {
		if at >= off {
			g.Sent++
			if !echoed[uint64(seq)] {
				g.Lost++
			}
		}
	}
	return g
}

// streamEnds are the ends of one stream: the echo server's port in the
// server's namespace and the address the client connects to.
type streamEnds struct{ port, addr string }

// startStreams starts a TCP stream and a UDP probe from clientNetns to
// echo servers in serverNetns, each sending a message every interval
// (stopped when the test ends), and waits until both carry 100 echoes.
func startStreams(t *testing.T, serverNetns, clientNetns string, tcpEnds, udpEnds streamEnds, interval time.Duration) (tcp, udp *stream) {
	t.Helper()
	for proto, ends := range map[string]streamEnds{"tcp": tcpEnds, "udp": udpEnds} {
		var s *stream
		// A path just programmed may refuse the first dials.
		waitForWithin(t, time.Minute, proto+" stream to "+ends.addr, func() error {
			var err error
			s, err = startStream(proto, serverNetns, ends.port, clientNetns, ends.addr, interval)
			return err
		})
		t.Cleanup(s.Stop)
		if proto == "tcp" {
			tcp = s
		} else {
			udp = s
		}
	}
	waitForWithin(t, time.Minute, "both streams flowing", bothFlowing(tcp, udp, time.Now(), 100))
	return tcp, udp
}

// bothFlowing checks that the TCP connection is intact and carried n
// echoes of messages sent since since, and the UDP probe n/2.
func bothFlowing(tcp, udp *stream, since time.Time, n int) func() error {
	return func() error {
		if err := tcp.Err(); err != nil {
			return stopWaiting{fmt.Errorf("the TCP connection failed: %w", err)}
		}
		if got := tcp.EchoedSince(since); got < n {
			return fmt.Errorf("%d TCP echoes of messages sent since %s, want %d", got, since.Format(time.StampMilli), n)
		}
		if got := udp.EchoedSince(since); got < n/2 {
			return fmt.Errorf("%d UDP echoes of messages sent since %s, want %d", got, since.Format(time.StampMilli), n/2)
		}
		return nil
	}
}
