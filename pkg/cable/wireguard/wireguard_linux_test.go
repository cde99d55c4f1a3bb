package wireguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
)

const testPort = 51820

func factory(t testing.TB, tp *cabletest.Topo, side, stateDir string) cable.Driver {
	t.Helper()
	return newTest(t, tp, side, stateDir)
}

func newTest(t testing.TB, tp *cabletest.Topo, side, stateDir string) *Driver {
	t.Helper()
	d, err := NewWithMode(context.Background(), tp.Local(side, testPort, stateDir), ModeAuto)
	if err != nil {
		t.Fatalf("new wireguard %s: %v", side, err)
	}
	name := tp.IfName(side)
	t.Cleanup(func() {
		d.Close()
		if _, err := os.Stat(SocketPath(name)); err == nil {
			t.Errorf("uapi socket %s left after close", SocketPath(name))
			os.Remove(SocketPath(name))
		}
	})
	return d
}

func TestWireGuard(t *testing.T) {
	cabletest.RunSuite(t, testPort, factory)
}

// This machine's kernel may lack WireGuard: the probe must then pick the
// embedded device, and ModeKernel must fail rather than fall back.
func TestModeProbe(t *testing.T) {
	tp := cabletest.New(t)
	d := newTest(t, tp, "a", t.TempDir())
	kernel := tp.Run("ip", "-n", tp.GwB, "link", "add", "wgprobe", "type", "wireguard") == nil
	switch {
	case kernel && d.Mode() != ModeKernel:
		t.Fatalf("kernel supports wireguard but mode is %v", d.Mode())
	case !kernel && d.Mode() != ModeEmbedded:
		t.Fatalf("kernel lacks wireguard but mode is %v", d.Mode())
	}
	if !kernel {
		_, err := NewWithMode(context.Background(), tp.Local("b", testPort, t.TempDir()), ModeKernel)
		if err == nil {
			t.Fatal("ModeKernel succeeded on a kernel without wireguard")
		}
		t.Logf("embedded offloads: %+v", d.Offloads())
		if o := d.Offloads(); !o.TUNVnetHdr || o.TUNBatch <= 1 {
			t.Errorf("TUN offloads off: %+v", o)
		}
		// UAPI sockets are machine-wide: the same name in another
		// namespace is refused and does not disturb the first device.
		dup := tp.Local("b", testPort, t.TempDir())
		dup.Interface = tp.IfName("a")
		if d2, err := NewWithMode(context.Background(), dup, ModeEmbedded); err == nil {
			d2.Close()
			t.Fatal("second embedded device with the same name accepted")
		}
		if cabletest.LinkExists(tp.GwB, dup.Interface) {
			t.Fatal("refused device left its TUN behind")
		}
		if _, err := d.Connections(context.Background()); err != nil {
			t.Fatalf("first device broken by the refused duplicate: %v", err)
		}
		if _, err := os.Stat(SocketPath(tp.IfName("a"))); err != nil {
			t.Fatalf("embedded device serves no uapi socket: %v", err)
		}
	}
}

func TestHandshakeStatusAndKeyRotation(t *testing.T) {
	tp := cabletest.New(t)
	cabletest.EchoServer(t, tp.PodB, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort))
	ctx := context.Background()
	stateA := t.TempDir()
	a := newTest(t, tp, "a", stateA)
	b := newTest(t, tp, "b", t.TempDir())

	// The private key is persisted with mode 0600 and is stable.
	fi, err := os.Stat(filepath.Join(stateA, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}

	cabletest.Connect(t, a, b, testPort)
	echo := func() error {
		return cabletest.DialEcho(tp.PodA, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort), "ping", 2*time.Second)
	}
	if err := cabletest.Eventually(20*time.Second, echo); err != nil {
		t.Fatalf("traffic: %v", err)
	}
	st, err := a.Connections(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].ClusterID != "b" || st[0].LastHandshake.IsZero() || st[0].RxBytes == 0 || st[0].TxBytes == 0 || !st[0].Connected ||
		st[0].RxPackets != -1 || st[0].TxPackets != -1 {
		t.Fatalf("status after traffic: %+v", st)
	}
	// AllowedIPs are exactly the peer's subnets.
	out := tp.MustRun(t, "ip", "netns", "exec", tp.GwA, "wg", "show", tp.IfName("a"), "allowed-ips")
	if f := strings.Fields(out); len(f) != 2 || f[1] != cabletest.SubnetB.String() {
		t.Fatalf("allowed-ips: %q", out)
	}

	oldKey := a.PublicKey()
	newKey, err := a.RotateKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newKey == oldKey {
		t.Fatal("rotation kept the key")
	}
	// The new key is what a restart would load.
	if k, err := loadOrCreateKey(stateA); err != nil || cable.Key(k.PublicKey()) != newKey {
		t.Fatalf("persisted key after rotation: %v", err)
	}
	// B still knows the old key: changing the private key expires A's
	// sessions, and B rejects handshakes from the unknown new key.
	if err := cabletest.DialEcho(tp.PodA, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort), "x", 3*time.Second); err == nil {
		t.Fatal("traffic passed with a key the peer does not know")
	}
	// Hand B the new public key: traffic resumes.
	if err := b.Set(ctx, []cable.Connection{cabletest.ConnTo("a", testPort, newKey)}); err != nil {
		t.Fatal(err)
	}
	if err := cabletest.Eventually(30*time.Second, echo); err != nil {
		t.Fatalf("traffic after key rotation: %v", err)
	}
	st, err = b.Connections(ctx)
	if err != nil || len(st) != 1 || !st[0].Connected {
		t.Fatalf("b status after rotation: %+v %v", st, err)
	}
	if out := tp.MustRun(t, "ip", "netns", "exec", tp.GwB, "wg", "show", tp.IfName("b"), "peers"); strings.TrimSpace(out) != newKey.String() {
		t.Fatalf("b peers %q, want only %s", out, newKey)
	}

	// Removing the peer removes it from the device, not only the routes.
	if err := b.Set(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if out := tp.MustRun(t, "ip", "netns", "exec", tp.GwB, "wg", "show", tp.IfName("b"), "peers"); strings.TrimSpace(out) != "" {
		t.Fatalf("b peers after empty Set: %q", out)
	}
}

// A UAPI socket file nobody serves (a killed embedded device's) is
// removed; a served one and a missing one are left alone.
func TestRemoveStaleSocket(t *testing.T) {
	name := fmt.Sprintf("cwst%x", time.Now().UnixNano()&0xffffff)
	path := SocketPath(name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	if removed, err := RemoveStaleSocket(name); removed || err != nil {
		t.Fatalf("no socket: removed %v, %v; want nothing done", removed, err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveStaleSocket(name); removed || err != nil {
		t.Fatalf("served socket: removed %v, %v; want it kept", removed, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("served socket gone: %v", err)
	}
	l.SetUnlinkOnClose(false) // as a killed process leaves it
	l.Close()
	if removed, err := RemoveStaleSocket(name); !removed || err != nil {
		t.Fatalf("stale socket: removed %v, %v; want it removed", removed, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("stale socket still there: %v", err)
	}
}

// TestResetSessionEndsAHalfOpenSession: B loses its session with A (its
// peer re-created, without the persistent keepalive that would make it
// start a handshake) while A keeps its keys. A's packets are then
// dropped by B, and B, which receives nothing, sends nothing: WireGuard
// alone would start a new handshake 15 s after A's first unanswered
// packet. ResetSession on A ends it at once, and keeps A's peer as
// configured.
func TestResetSessionEndsAHalfOpenSession(t *testing.T) {
	tp := cabletest.New(t)
	cabletest.EchoServer(t, tp.PodB, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort))
	ctx := context.Background()
	a := newTest(t, tp, "a", t.TempDir())
	b := newTest(t, tp, "b", t.TempDir())
	cabletest.Connect(t, a, b, testPort)
	echo := func() error {
		return cabletest.DialEcho(tp.PodA, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort), "ping", 2*time.Second)
	}
	if err := cabletest.Eventually(20*time.Second, echo); err != nil {
		t.Fatalf("traffic: %v", err)
	}

	toA := cabletest.ConnTo("a", testPort, a.PublicKey())
	devB := tp.IfName("b")
	tp.MustRun(t, "ip", "netns", "exec", tp.GwB, "wg", "set", devB, "peer", toA.PublicKey.String(), "remove")
	tp.MustRun(t, "ip", "netns", "exec", tp.GwB, "wg", "set", devB, "peer", toA.PublicKey.String(),
		"endpoint", toA.Endpoint.String(), "allowed-ips", toA.Subnets[0].String())
	if err := cabletest.DialEcho(tp.PodA, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort), "half-open", 3*time.Second); err == nil {
		t.Fatal("traffic passed while B had no session with A: the half-open session was not made")
	}
	before := tp.MustRun(t, "ip", "netns", "exec", tp.GwA, "wg", "show", tp.IfName("a"), "allowed-ips")
	start := time.Now()
	if err := a.ResetSession(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := cabletest.Eventually(10*time.Second, echo); err != nil {
		t.Fatalf("traffic after ResetSession: %v", err)
	}
	t.Logf("traffic again %v after ResetSession", time.Since(start).Round(time.Millisecond))
	if after := tp.MustRun(t, "ip", "netns", "exec", tp.GwA, "wg", "show", tp.IfName("a"), "allowed-ips"); after != before {
		t.Errorf("allowed-ips after ResetSession %q, want as before %q", after, before)
	}
	if err := a.ResetSession(ctx, "nobody"); err == nil {
		t.Error("ResetSession of an unknown cluster succeeded")
	}
}

// An embedded device whose UAPI socket file another process removed is
// still cleaned up without an error: wireguard-go's listener has closed
// itself then (seen in TestLabJoin, where uninstall's gateway cleanup Pod
// failed so).
func TestCleanupAfterSocketRemoved(t *testing.T) {
	tp := cabletest.New(t)
	d, err := NewWithMode(context.Background(), tp.Local("a", testPort, t.TempDir()), ModeEmbedded)
	if err != nil {
		t.Fatalf("embedded device: %v", err)
	}
	if err := os.Remove(SocketPath(tp.IfName("a"))); err != nil {
		t.Fatal(err)
	}
	// The listener notices the removal (inotify) and closes itself, which
	// ends the device's accept loop: wait for that, so that Cleanup meets
	// the closed listener.
	closed := make(chan struct{})
	go func() { d.emb.wg.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the UAPI listener did not close itself after its socket file was removed")
	}
	if err := d.Cleanup(context.Background()); err != nil {
		t.Fatalf("cleanup after the socket was removed: %v", err)
	}
	if cabletest.LinkExists(tp.GwA, tp.IfName("a")) {
		t.Fatal("TUN device left after cleanup")
	}
}
