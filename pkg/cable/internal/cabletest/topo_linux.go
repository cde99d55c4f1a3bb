// Package cabletest builds the privileged test topology for cable drivers:
// two gateway namespaces joined by a veth "WAN" (198.18.0.1/24 and
// 198.18.0.2/24), each with a pod namespace behind it (10.1.0.2 behind
// gateway A, 10.2.0.2 behind gateway B; with AddIPv6 also fd00:1::2 and
// fd00:2::2). Everything lives in namespaces it creates and removes; the
// root namespace is never touched.
package cabletest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/internal/testserve"
)

// Fixed addresses of the topology.
var (
	WANA    = netip.MustParseAddr("198.18.0.1")
	WANB    = netip.MustParseAddr("198.18.0.2")
	SubnetA = netip.MustParsePrefix("10.1.0.0/24")
	SubnetB = netip.MustParsePrefix("10.2.0.0/24")
	PodA    = netip.MustParseAddr("10.1.0.2")
	PodB    = netip.MustParseAddr("10.2.0.2")
	// The IPv6 subnets and pods of a dual-stack topology (AddIPv6).
	SubnetA6 = netip.MustParsePrefix("fd00:1::/64")
	SubnetB6 = netip.MustParsePrefix("fd00:2::/64")
	PodA6    = netip.MustParseAddr("fd00:1::2")
	PodB6    = netip.MustParseAddr("fd00:2::2")
)

// RequireRoot skips t unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
}

// Topo is a created topology. Namespace fields are names under /run/netns.
type Topo struct {
	ID                   string
	GwA, GwB, PodA, PodB string
	// IPv6 is set by AddIPv6: the pods are dual-stack and Local lists
	// the IPv6 subnets too.
	IPv6 bool
}

// Path returns the bind-mount path of namespace name.
func Path(name string) string { return "/run/netns/" + name }

// New creates the topology and registers its removal with t.Cleanup.
func New(t testing.TB) *Topo {
	t.Helper()
	RequireRoot(t)
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	tp := &Topo{ID: id, GwA: "cab-" + id + "-gwa", GwB: "cab-" + id + "-gwb",
		PodA: "cab-" + id + "-poda", PodB: "cab-" + id + "-podb"}
	for _, ns := range []string{tp.GwA, tp.GwB, tp.PodA, tp.PodB} {
		Run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		Run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	// WAN.
	Run(t, "ip", "link", "add", "wan0", "netns", tp.GwA, "type", "veth", "peer", "name", "wan0", "netns", tp.GwB)
	Run(t, "ip", "-n", tp.GwA, "addr", "add", WANA.String()+"/24", "dev", "wan0")
	Run(t, "ip", "-n", tp.GwB, "addr", "add", WANB.String()+"/24", "dev", "wan0")
	// Pods.
	for _, p := range []struct {
		gw, pod string
		gwAddr  string
		podAddr netip.Addr
	}{{tp.GwA, tp.PodA, "10.1.0.1", PodA}, {tp.GwB, tp.PodB, "10.2.0.1", PodB}} {
		Run(t, "ip", "link", "add", "eth0", "netns", p.pod, "type", "veth", "peer", "name", "pod0", "netns", p.gw)
		Run(t, "ip", "-n", p.gw, "addr", "add", p.gwAddr+"/24", "dev", "pod0")
		Run(t, "ip", "-n", p.pod, "addr", "add", p.podAddr.String()+"/24", "dev", "eth0")
		Run(t, "ip", "-n", p.gw, "link", "set", "pod0", "up")
		Run(t, "ip", "-n", p.pod, "link", "set", "eth0", "up")
		Run(t, "ip", "-n", p.pod, "route", "add", "default", "via", p.gwAddr)
		Run(t, "ip", "netns", "exec", p.gw, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	}
	Run(t, "ip", "-n", tp.GwA, "link", "set", "wan0", "up")
	Run(t, "ip", "-n", tp.GwB, "link", "set", "wan0", "up")
	return tp
}

// AddIPv6 makes tp dual-stack behind the IPv4 WAN: pod A fd00:1::2/64
// behind gateway A's fd00:1::1, pod B fd00:2::2/64 behind fd00:2::1
// (default routes via them), IPv6 forwarding on in both gateways.
func (tp *Topo) AddIPv6(t testing.TB) {
	t.Helper()
	for _, p := range []struct {
		gw, pod string
		pfx     netip.Prefix
		addr    netip.Addr
	}{{tp.GwA, tp.PodA, SubnetA6, PodA6}, {tp.GwB, tp.PodB, SubnetB6, PodB6}} {
		gwAddr := p.pfx.Addr().Next().String()
		Run(t, "ip", "-n", p.gw, "addr", "add", gwAddr+"/64", "dev", "pod0", "nodad")
		Run(t, "ip", "-n", p.pod, "addr", "add", p.addr.String()+"/64", "dev", "eth0", "nodad")
		Run(t, "ip", "-n", p.pod, "-6", "route", "add", "default", "via", gwAddr)
		Run(t, "ip", "netns", "exec", p.gw, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	}
	tp.IPv6 = true
}

// Run runs a command and fails t on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// IfName returns a device name unique on the machine (≤ 15 bytes).
func (tp *Topo) IfName(suffix string) string { return "cab" + tp.ID + suffix }

// Listen opens a TCP listener on addr inside namespace ns.
func Listen(t testing.TB, ns string, addr netip.AddrPort) net.Listener {
	t.Helper()
	var ln net.Listener
	err := netnsx.Do(Path(ns), func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Dial connects to addr from namespace ns.
func Dial(ns string, addr netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := netnsx.Do(Path(ns), func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr.String(), timeout)
		return err
	})
	return c, err
}

// EchoServer starts a TCP echo server on addr in namespace ns.
func EchoServer(t testing.TB, ns string, addr netip.AddrPort) {
	t.Helper()
	ln := Listen(t, ns, addr)
	testserve.Serve(t, ln, func(c net.Conn) {
		io.Copy(c, c)
	})
}

// Echo writes msg on c and reads it back within timeout.
func Echo(c net.Conn, msg string, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, []byte(msg)) {
		return fmt.Errorf("echo: got %q, want %q", got, msg)
	}
	return nil
}

// DialEcho dials addr from ns, echoes msg once and closes.
func DialEcho(ns string, addr netip.AddrPort, msg string, timeout time.Duration) error {
	c, err := Dial(ns, addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	return Echo(c, msg, timeout)
}

// Eventually retries f every 100ms until it returns nil or timeout passes,
// and returns the last error.
func Eventually(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Run runs a command and returns its error (output included).
func (tp *Topo) Run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// MustRun runs a command and returns its output, failing t on error.
func (tp *Topo) MustRun(t testing.TB, name string, args ...string) string {
	t.Helper()
	return Run(t, name, args...)
}
