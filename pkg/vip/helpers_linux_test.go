package vip

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/rawsock"
	"github.com/causeway-net/causeway/internal/testserve"
)

// clientEnv turns the test binary into the client process of the privileged
// tests (see TestMain and runClient).
const clientEnv = "CAUSEWAY_VIP_TEST_CLIENT"

func TestMain(m *testing.M) {
	if os.Getenv(clientEnv) != "" {
		runClient(os.Stdin, os.Stdout)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("loading BPF programs and creating network namespaces needs root; CI runs as root")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		tb.Fatalf("remove memlock limit: %v", err)
	}
}

// netNS is a goroutine whose OS thread lives in a fresh network namespace.
// Do runs functions on that thread: sockets they open belong to the
// namespace, processes they start are born in it. The thread is never
// unlocked, so the runtime destroys it, and the namespace with it once
// nothing else refers to it, when the goroutine ends at cleanup.
type netNS struct {
	do   chan func()
	done chan struct{}
}

func newNetNS(tb testing.TB) *netNS {
	tb.Helper()
	ns := &netNS{do: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		defer close(ns.done)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		errc <- nil
		for f := range ns.do {
			f()
		}
	}()
	if err := <-errc; err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		close(ns.do)
		<-ns.done
	})
	ns.mustRun(tb, "ip", "link", "set", "lo", "up")
	return ns
}

// Do runs f on the namespace's thread.
func (ns *netNS) Do(f func() error) error {
	errc := make(chan error, 1)
	ns.do <- func() { errc <- f() }
	return <-errc
}

// mustRun runs a command inside the namespace.
func (ns *netNS) mustRun(tb testing.TB, name string, args ...string) {
	tb.Helper()
	var out []byte
	err := ns.Do(func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		tb.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(b)) {
		fields := strings.Fields(line)
		for i, f := range fields {
			if f == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	return "", errors.New("no cgroup2 mount in /proc/self/mountinfo")
}

// newCgroup creates a temporary cgroup v2 directory, removed at cleanup
// (register it before anything that puts processes into it).
func newCgroup(tb testing.TB) string {
	tb.Helper()
	mnt, err := cgroup2Mount()
	if err != nil {
		tb.Skipf("cgroup v2 is not mounted: %v", err)
	}
	dir, err := os.MkdirTemp(mnt, "causeway-vip-test-")
	if err != nil {
		tb.Fatalf("create cgroup: %v", err)
	}
	tb.Cleanup(func() {
		// Exited children may take a moment to leave the cgroup.
		var err error
		for range 100 {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		tb.Errorf("remove cgroup %s: %v", dir, err)
	})
	return dir
}

// newBPFFS mounts a private bpffs on a temporary directory, unmounted at
// cleanup.
func newBPFFS(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		tb.Fatalf("mount bpffs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount bpffs %s: %v", dir, err)
		}
	})
	return filepath.Join(dir, "causeway", "vip")
}

// client is a child process of the test binary running runClient, started
// inside a namespace (and a cgroup when given).
type client struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startClient(tb testing.TB, ns *netNS, cgroupDir string) *client {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), clientEnv+"=1")
	cmd.Stderr = os.Stderr
	if cgroupDir != "" {
		cg, err := os.Open(cgroupDir)
		if err != nil {
			tb.Fatal(err)
		}
		defer cg.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := ns.Do(cmd.Start); err != nil {
		tb.Fatalf("start client: %v", err)
	}
	c := &client{cmd: cmd, in: in, out: bufio.NewReader(out)}
	tb.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	return c
}

// do sends one command line and returns the client's one-line answer.
func (c *client) do(tb testing.TB, format string, args ...any) string {
	tb.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		tb.Fatalf("send to client: %v", err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		tb.Fatalf("read from client: %v", err)
	}
	return strings.TrimSpace(line)
}

// runClient executes commands, one per line, answering each with one line:
// "ok ..." or "err <errno name or message>".
//
//	tcp ADDR          dial (2 s timeout), send a line, print "ok <backend> <getpeername>"
//	open ADDR         dial and keep the connection: "ok <getpeername>"
//	say               on the kept connection: "ok <backend> <getpeername>"
//	udp ADDR          unconnected sendto + recvfrom: "ok <backend> <source>"
//	cudp ADDR         connect, send, recvfrom: "ok <backend> <source> <getpeername>"
//	tcp6, udp6, cudp6 ADDR  the same over an AF_INET6 socket (see exchange6);
//	                  cudp6 ADDR ADDR2 connects to ADDR, then to ADDR2, and talks to ADDR2
//	uopen NAME ADDR   connect a UDP socket NAME and keep it, send, read: "ok <backend>"
//	uopen6 NAME ADDR  the same from an AF_INET6 socket ([::ffff:a.b.c.d]:port)
//	usay NAME         send and read on kept UDP socket NAME: "ok <backend>"
//	urecv NAME        read only (2 s) on kept UDP socket NAME: "ok <backend>"
//	bench-tcp ADDR N  N times connect + close(RST): "ok <ns>"
//	bench-udp ADDR N  N times connect() of one UDP socket: "ok <ns>"
//	bench-tcp6, bench-udp6 ADDR N  the same with AF_INET6 sockets ([::ffff:a.b.c.d]:port)
func runClient(r io.Reader, w io.Writer) {
	var kept net.Conn
	keptUDP := map[string]net.Conn{}
	s := bufio.NewScanner(r)
	for s.Scan() {
		f := strings.Fields(s.Text())
		var res string
		var err error
		switch f[0] {
		case "tcp":
			var c net.Conn
			if c, err = net.DialTimeout("tcp4", f[1], 2*time.Second); err == nil {
				res, err = exchange(c)
				c.Close()
			}
		case "open":
			if kept, err = net.Dial("tcp4", f[1]); err == nil {
				res, err = peerName(kept)
			}
		case "say":
			res, err = exchange(kept)
		case "udp":
			res, err = udpExchange(f[1], false)
		case "cudp":
			res, err = udpExchange(f[1], true)
		case "uopen":
			var c net.Conn
			if c, err = net.Dial("udp4", f[2]); err == nil {
				keptUDP[f[1]] = c
				res, err = udpSay(c)
			}
		case "uopen6":
			var c net.Conn
			if c, err = dialUDP6(f[2]); err == nil {
				keptUDP[f[1]] = c
				res, err = udpSay(c)
			}
		case "usay":
			res, err = udpSay(keptUDP[f[1]])
		case "urecv":
			res, err = udpRecv(keptUDP[f[1]])
		case "tcp6", "udp6", "cudp6":
			res, err = exchange6(strings.TrimSuffix(f[0], "6"), f[1:]...)
		case "bench-tcp", "bench-udp", "bench-tcp6", "bench-udp6":
			n, _ := strconv.Atoi(f[2])
			var d time.Duration
			d, err = benchConnect(strings.HasPrefix(f[0], "bench-tcp"), f[1], n)
			res = strconv.FormatInt(d.Nanoseconds(), 10)
		default:
			err = fmt.Errorf("unknown command %q", f[0])
		}
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				fmt.Fprintln(w, "err", unix.ErrnoName(errno))
			} else {
				fmt.Fprintln(w, "err", strings.ReplaceAll(err.Error(), "\n", " "))
			}
			continue
		}
		fmt.Fprintln(w, "ok", res)
	}
}

// peerName returns getpeername() of c, asked of the kernel directly.
func peerName(c net.Conn) (string, error) {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return "", err
	}
	var sa unix.Sockaddr
	var serr error
	if err := rc.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) }); err != nil {
		return "", err
	}
	if serr != nil {
		return "", serr
	}
	return sockaddrString(sa)
}

// sockaddrString prints an IPv4 or IPv6 socket address as netip.AddrPort
// does: 1.2.3.4:80, [::ffff:1.2.3.4]:80.
func sockaddrString(sa unix.Sockaddr) (string, error) {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)).String(), nil
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)).String(), nil
	}
	return "", fmt.Errorf("address is %T", sa)
}

// exchange6 is tcp, udp or cudp (kind) over an AF_INET6 socket with
// IPV6_V6ONLY off, the dual-stack socket of Java and others, to addrs (an
// IPv4-mapped [::ffff:a.b.c.d]:port or a plain IPv6 one; tcp and cudp
// connect to each in turn and talk to the last). Raw system calls, because
// package net turns IPv4-mapped addresses into IPv4 ones: the addresses are
// printed as the kernel reports them. The answer has the shape of tcp's,
// udp's or cudp's.
func exchange6(kind string, addrs ...string) (string, error) {
	var sa *unix.SockaddrInet6
	typ := unix.SOCK_DGRAM
	if kind == "tcp" {
		typ = unix.SOCK_STREAM
	}
	fd, err := unix.Socket(unix.AF_INET6, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return "", err
	}
	tv := unix.NsecToTimeval((2 * time.Second).Nanoseconds()) // bounds connect() and recvfrom()
	for _, opt := range []int{unix.SO_SNDTIMEO, unix.SO_RCVTIMEO} {
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, opt, &tv); err != nil {
			return "", err
		}
	}
	for _, addr := range addrs {
		dst, err := netip.ParseAddrPort(addr)
		if err != nil {
			return "", err
		}
		sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
		if kind == "udp" {
			continue
		}
		if err := rawsock.Connect(fd, sa); err != nil {
			return "", err
		}
	}
	msg := []byte("hello\n")
	err = rawsock.IgnoringEINTR(func() error {
		if kind == "udp" {
			return unix.Sendto(fd, msg, 0, sa)
		}
		_, err := unix.Write(fd, msg)
		return err
	})
	if err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	var n int
	var from unix.Sockaddr
	err = rawsock.IgnoringEINTR(func() (err error) {
		n, from, err = unix.Recvfrom(fd, buf, 0) // the source goes through recvmsg6
		return err
	})
	if err != nil {
		return "", err
	}
	res := strings.Fields(string(buf[:n]))[0]
	if kind != "tcp" {
		src, err := sockaddrString(from)
		if err != nil {
			return "", err
		}
		res += " " + src
	}
	if kind != "udp" {
		sa, err := unix.Getpeername(fd)
		if err != nil {
			return "", err
		}
		peer, err := sockaddrString(sa)
		if err != nil {
			return "", err
		}
		res += " " + peer
	}
	return res, nil
}

// exchange sends a line on c and returns "<backend> <getpeername>".
func exchange(c net.Conn) (string, error) {
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	peer, err := peerName(c)
	if err != nil {
		return "", err
	}
	return strings.Fields(line)[0] + " " + peer, nil
}

func udpExchange(addr string, connected bool) (string, error) {
	dst, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return "", err
	}
	var c *net.UDPConn
	if connected {
		c, err = net.DialUDP("udp4", nil, dst)
	} else {
		c, err = net.ListenUDP("udp4", nil)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	if connected {
		_, err = c.Write([]byte("hello"))
	} else {
		_, err = c.WriteTo([]byte("hello"), dst)
	}
	if err != nil {
		return "", err
	}
	buf := make([]byte, 512)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, from, err := c.ReadFrom(buf) // recvfrom(): the source goes through recvmsg4
	if err != nil {
		return "", err
	}
	res := strings.Fields(string(buf[:n]))[0] + " " + from.String()
	if connected {
		peer, err := peerName(c)
		if err != nil {
			return "", err
		}
		res += " " + peer
	}
	return res, nil
}

// dialUDP6 connects a dual-stack AF_INET6 UDP socket to addr with raw
// system calls (package net would use AF_INET for an IPv4-mapped address).
func dialUDP6(addr string) (net.Conn, error) {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "udp6")
	defer f.Close() // FileConn holds its own copy
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
		return nil, err
	}
	if err := rawsock.Connect(fd, &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}); err != nil {
		return nil, err
	}
	return net.FileConn(f)
}

// udpSay sends on connected UDP socket c and returns the answering backend.
func udpSay(c net.Conn) (string, error) {
	if _, err := c.Write([]byte("hello")); err != nil {
		return "", err
	}
	return udpRecv(c)
}

// udpRecv reads one answer on c and returns the backend that sent it.
func udpRecv(c net.Conn) (string, error) {
	buf := make([]byte, 512)
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.Fields(string(buf[:n]))[0], nil
}

// benchConnect times n connect() calls to addr: TCP connect + close with
// RST (no TIME_WAIT), or connect() of one UDP socket (no packet sent). An
// IPv6 addr ([::ffff:a.b.c.d]:port or plain) is dialled from AF_INET6 sockets.
func benchConnect(tcp bool, addr string, n int) (time.Duration, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return 0, err
	}
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()})
	if ap.Addr().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	if !tcp {
		fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		defer unix.Close(fd)
		start := time.Now()
		for range n {
			if err := rawsock.Connect(fd, sa); err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	linger := &unix.Linger{Onoff: 1, Linger: 0}
	start := time.Now()
	for range n {
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		if err := rawsock.Connect(fd, sa); err != nil {
			unix.Close(fd)
			return 0, err
		}
		_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, linger)
		unix.Close(fd)
	}
	return time.Since(start), nil
}

// family is network ("tcp", "udp") with the IP version of addr: tcp4, tcp6.
func family(network, addr string) string {
	if netip.MustParseAddrPort(addr).Addr().Is6() {
		return network + "6"
	}
	return network + "4"
}

// tcpEcho serves name-prefixed echoes on addr inside ns until cleanup: every
// line received is answered with "<name> <line>".
func tcpEcho(tb testing.TB, ns *netNS, addr, name string) {
	tb.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen(family("tcp", addr), addr); return err }); err != nil {
		tb.Fatalf("listen %s: %v", addr, err)
	}
	testserve.Serve(tb, ln, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, name+" "+line); err != nil {
				return
			}
		}
	})
}

// udpEcho answers every datagram on addr inside ns with "<name> <payload>".
func udpEcho(tb testing.TB, ns *netNS, addr, name string) {
	tb.Helper()
	var pc net.PacketConn
	if err := ns.Do(func() (err error) { pc, err = net.ListenPacket(family("udp", addr), addr); return err }); err != nil {
		tb.Fatalf("listen %s: %v", addr, err)
	}
	tb.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte(name+" "), buf[:n]...), from)
		}
	}()
}
