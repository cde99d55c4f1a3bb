package routeagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// fallbackBed is a gateway node in namespaces of its own:
//
//	pod (10.244.0.2) -- node -- up (192.0.2.2, the node's default route)
//	                     |
//	                   cw-gw (the "tunnel", a veth) -- far (10.245.0.1, the remote subnet)
//
// The cable route (what pkg/cable installs: proto 157, metric 0, on the
// tunnel device) sends the remote subnet into cw-gw; up counts every
// packet to the remote subnet that reaches it (the leak).
type fallbackBed struct {
	prefix string
}

var (
	fbNodeIP   = netip.MustParseAddr("192.0.2.1")
	fbRemoteIP = netip.MustParseAddr("10.245.0.1")
)

func newFallbackBed(t *testing.T) *fallbackBed {
	t.Helper()
	requireRoot(t)
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	fb := &fallbackBed{prefix: "fb" + hex.EncodeToString(b[:]) + "-"}
	for _, n := range []string{"node", "up", "far", "pod"} {
		fb.run(t, "ip", "netns", "add", fb.ns(n))
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", fb.ns(n)).CombinedOutput(); err != nil {
				t.Errorf("delete netns %s: %v: %s", fb.ns(n), err, out)
			}
		})
		fb.ip(t, n, "link", "set", "lo", "up")
	}
	for _, l := range []struct{ dev, peer, addr, peerAddr string }{
		{"up0", "up", "192.0.2.1/24", "192.0.2.2/24"},
		{"cw-gw", "far", "10.99.0.1/32", "10.245.0.1/16"},
		{"pod0", "pod", "10.244.0.1/24", "10.244.0.2/24"},
	} {
		fb.ip(t, "node", "link", "add", l.dev, "type", "veth", "peer", "name", "eth0", "netns", fb.ns(l.peer))
		fb.ip(t, "node", "addr", "add", l.addr, "dev", l.dev)
		fb.ip(t, l.peer, "addr", "add", l.peerAddr, "dev", "eth0")
		fb.ip(t, "node", "link", "set", l.dev, "up")
		fb.ip(t, l.peer, "link", "set", "eth0", "up")
	}
	fb.ip(t, "node", "route", "add", "default", "via", "192.0.2.2")
	fb.ip(t, "far", "route", "add", "default", "via", "10.99.0.1", "dev", "eth0", "onlink")
	fb.ip(t, "pod", "route", "add", "default", "via", "10.244.0.1")
	// ICMP errors to the pod every time, not once a second.
	fb.run(t, "ip", "netns", "exec", fb.ns("node"), "sysctl", "-qw", "net.ipv4.icmp_ratelimit=0", "net.ipv4.ip_forward=1")
	fb.run(t, "ip", "netns", "exec", fb.ns("up"), "iptables", "-t", "raw", "-A", "PREROUTING", "-d", "10.245.0.0/16", "-j", "ACCEPT")
	fb.echo(t)
	return fb
}

func (fb *fallbackBed) ns(n string) string   { return fb.prefix + n }
func (fb *fallbackBed) path(n string) string { return "/run/netns/" + fb.ns(n) }

func (fb *fallbackBed) run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (fb *fallbackBed) ip(t *testing.T, n string, args ...string) string {
	t.Helper()
	return fb.run(t, "ip", append([]string{"-n", fb.ns(n)}, args...)...)
}

// echo serves UDP echo on the remote address in far until the test ends.
func (fb *fallbackBed) echo(t *testing.T) {
	t.Helper()
	var c net.PacketConn
	err := netnsx.Do(fb.path("far"), func() error {
		var err error
		c, err = net.ListenPacket("udp4", netip.AddrPortFrom(fbRemoteIP, 7).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			if _, err := c.WriteTo(buf[:n], from); err != nil {
				return
			}
		}
	}()
}

// probe sends one datagram from namespace n to the remote echo server and
// waits up to wait for the echo. The socket has IP_RECVERR: a UDP socket
// reports an ICMP host unreachable (not a "hard" error) only with it.
func (fb *fallbackBed) probe(n string, wait time.Duration) error {
	return netnsx.Do(fb.path(n), func() error {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVERR, 1)
			}); err != nil {
				return err
			}
			return serr
		}}
		c, err := d.Dial("udp4", netip.AddrPortFrom(fbRemoteIP, 7).String())
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
			return err
		}
		buf := make([]byte, 16)
		k, err := c.Read(buf)
		if err != nil {
			return err
		}
		if string(buf[:k]) != "ping" {
			return errors.New("echo differs: " + string(buf[:k]))
		}
		return nil
	})
}

// leaked is how many packets to the remote subnet reached the default
// route's far end.
func (fb *fallbackBed) leaked(t *testing.T) int {
	t.Helper()
	out := fb.run(t, "ip", "netns", "exec", fb.ns("up"), "iptables", "-t", "raw", "-nvxL", "PREROUTING")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 8 && f[8] == "10.245.0.0/16" {
			n, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("counter in %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no counter for the remote subnet in:\n%s", out)
	return 0
}

// wantEchoed: node and pod reach the remote through the tunnel, nothing leaks.
func (fb *fallbackBed) wantEchoed(t *testing.T, what string) {
	t.Helper()
	before := fb.leaked(t)
	for _, n := range []string{"node", "pod"} {
		if err := fb.probe(n, 3*time.Second); err != nil {
			t.Fatalf("%s: %s -> remote: %v", what, n, err)
		}
	}
	if after := fb.leaked(t); after != before {
		t.Fatalf("%s: %d packets to the remote subnet left by the default route", what, after-before)
	}
}

// wantUnreachable: node and pod get EHOSTUNREACH (the node's own route
// lookup; the node's ICMP host unreachable for the pod's forwarded
// datagram), and nothing reaches the default route.
func (fb *fallbackBed) wantUnreachable(t *testing.T, what string) {
	t.Helper()
	before := fb.leaked(t)
	for _, n := range []string{"node", "pod"} {
		if err := fb.probe(n, 3*time.Second); !errors.Is(err, syscall.EHOSTUNREACH) {
			t.Fatalf("%s: %s -> remote: %v, want EHOSTUNREACH", what, n, err)
		}
	}
	if after := fb.leaked(t); after != before {
		t.Fatalf("%s: %d packets to the remote subnet left by the default route", what, after-before)
	}
}

// The gateway node with the route agent's fallbacks: while the cable's
// route (or its whole device) is gone, traffic to an accepted remote
// subnet is refused at once and never leaves by the default route;
// without the fallbacks (before the first Set, after Cleanup) it does.
func TestFallbackRoutesFailClosed(t *testing.T) {
	fb := newFallbackBed(t)
	cableRoute := []string{"route", "add", "10.245.0.0/16", "dev", "cw-gw", "proto", "157"}
	fb.ip(t, "node", cableRoute...)

	// The hole, without the agent's routes: the tunnel route gone, the
	// node's datagram leaves by the default route.
	fb.wantEchoed(t, "cable route, no agent")
	fb.ip(t, "node", "route", "del", "10.245.0.0/16", "dev", "cw-gw", "proto", "157")
	before := fb.leaked(t)
	if err := fb.probe("node", 500*time.Millisecond); err == nil {
		t.Fatal("echo without a tunnel")
	}
	if fb.leaked(t) == before {
		t.Fatal("no agent, no tunnel route: nothing reached the default route (the leak counter sees nothing)")
	}
	fb.ip(t, "node", cableRoute...)

	dp, err := NewLinux(LinuxConfig{Netns: fb.path("node")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	gw := &Gateway{Hostname: "gw", NodeIP: fbNodeIP}
	d := Compute(Inputs{NodeName: "gw", NodeIP: fbNodeIP, Gateway: gw,
		Remotes: []Remote{{ClusterID: "c3", Subnets: []netip.Prefix{pfx("10.245.0.0/16")}}},
		Params:  Params{LocalCIDRs: []netip.Prefix{pfx("10.244.0.0/16"), pfx("10.96.0.0/16")}}})
	set(t, dp, d)
	routes := fb.ip(t, "node", "route", "show", "10.245.0.0/16")
	if !strings.Contains(routes, "10.245.0.0/16 dev cw-gw proto 157") || !strings.Contains(routes, "unreachable 10.245.0.0/16 proto 148 metric 4096") {
		t.Fatalf("routes to the remote subnet:\n%s", routes)
	}
	if routes := fb.ip(t, "node", "route", "show", "proto", "148"); !strings.Contains(routes, "unreachable 242.0.0.0/8 metric 4096") {
		t.Fatalf("no fallback for the supernet:\n%s", routes)
	}
	// The cable's route wins by metric.
	fb.wantEchoed(t, "cable route over the fallback")

	// Tunnel down: its route removed.
	fb.ip(t, "node", "route", "del", "10.245.0.0/16", "dev", "cw-gw", "proto", "157")
	fb.wantUnreachable(t, "cable route removed")
	// The agent's next sync neither changes nor needs anything.
	if rep := set(t, dp, d); len(rep.Changes) != 0 {
		t.Fatalf("equal Set with the tunnel down changed %v", rep.Changes)
	}

	// Tunnel back.
	fb.ip(t, "node", cableRoute...)
	fb.wantEchoed(t, "cable route restored")
	if rep := set(t, dp, d); len(rep.Changes) != 0 {
		t.Fatalf("equal Set with the tunnel up changed %v", rep.Changes)
	}

	// The tunnel device gone with its routes (a userspace WireGuard
	// device dies with its process).
	fb.ip(t, "node", "link", "del", "cw-gw")
	fb.wantUnreachable(t, "tunnel device deleted")

	// Cleanup removes the fallbacks: traffic leaks again.
	if err := dp.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if routes := fb.ip(t, "node", "route", "show", "table", "all", "proto", "148"); strings.TrimSpace(routes) != "" {
		t.Fatalf("routes left after cleanup:\n%s", routes)
	}
	before = fb.leaked(t)
	if err := fb.probe("node", 500*time.Millisecond); err == nil {
		t.Fatal("echo without a tunnel")
	}
	if fb.leaked(t) == before {
		t.Fatal("after cleanup: nothing reached the default route, yet no fallback is left")
	}
}
