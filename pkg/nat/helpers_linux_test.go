package nat

import (
	"bufio"
	"context"
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

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, nftables); CI runs as root")
	}
}

// topo is three namespaces under /run/netns named <id>-client, -gw, -pod,
// removed when the test ends.
type topo struct{ id string }

func (tp topo) ns(role string) string   { return tp.id + "-" + role }
func (tp topo) path(role string) string { return "/run/netns/" + tp.ns(role) }

func run(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// in runs a command inside the namespace of role.
func (tp topo) in(tb testing.TB, role string, args ...string) string {
	tb.Helper()
	return run(tb, append([]string{"ip", "netns", "exec", tp.ns(role)}, args...)...)
}

// inStdin runs a command inside the namespace of role with stdin.
func (tp topo) inStdin(tb testing.TB, role, stdin string, args ...string) {
	tb.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", tp.ns(role)}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newTopo(tb testing.TB) topo {
	tb.Helper()
	requireRoot(tb)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	tp := topo{id: "nat" + hex.EncodeToString(b)}
	for _, role := range []string{"client", "gw", "pod"} {
		run(tb, "ip", "netns", "add", tp.ns(role))
		tb.Cleanup(func() { _ = exec.Command("ip", "netns", "del", tp.ns(role)).Run() })
		tp.in(tb, role, "ip", "link", "set", "lo", "up")
	}
	c, g, p := tp.ns("client"), tp.ns("gw"), tp.ns("pod")
	run(tb, "ip", "-n", c, "link", "add", "c0", "type", "veth", "peer", "name", "g0", "netns", g)
	run(tb, "ip", "-n", g, "link", "add", "g1", "type", "veth", "peer", "name", "p0", "netns", p)
	for _, s := range [][]string{
		{c, "addr", "add", "10.9.0.2/24", "dev", "c0"},
		{c, "addr", "add", clientAddr.String() + "/32", "dev", "lo"},
		{c, "addr", "add", remoteService.String() + "/32", "dev", "lo"},
		{c, "link", "set", "c0", "up"},
		{c, "route", "add", "242.0.0.0/15", "via", "10.9.0.1", "src", clientAddr.String()},
		{g, "addr", "add", "10.9.0.1/24", "dev", "g0"},
		{g, "addr", "add", "10.244.0.1/24", "dev", "g1"},
		{g, "link", "set", "g0", "up"},
		{g, "link", "set", "g1", "up"},
		{g, "route", "add", remoteGlobal.String(), "via", "10.9.0.2"},
		{p, "addr", "add", podAddr.String() + "/24", "dev", "p0"},
		{p, "addr", "add", headlessPod.String() + "/24", "dev", "p0"},
		{p, "link", "set", "p0", "up"},
		{p, "route", "add", "default", "via", "10.244.0.1"},
	} {
		run(tb, append([]string{"ip", "-n", s[0]}, s[1:]...)...)
	}
	tp.in(tb, "gw", "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return tp
}

// syncedTable is a Table in gw synced to cfg, removed when the test
// ends.
func (tp topo) syncedTable(tb testing.TB, cfg Config) *Table {
	tb.Helper()
	tab := NewTable(NewNftRunner(tp.path("gw")), nil)
	if _, err := tab.Sync(context.Background(), cfg); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tab.Cleanup(context.Background()) })
	return tab
}

// kubeProxy installs what kube-proxy (iptables mode) would for ClusterIP
// 10.96.0.10: tcp/80 → pod:8080, udp/53 → pod:5353.
func (tp topo) kubeProxy(tb testing.TB) {
	tb.Helper()
	tp.inStdin(tb, "gw", `*nat
:PREROUTING ACCEPT [0:0]
-A PREROUTING -d 10.96.0.10/32 -p tcp --dport 80 -j DNAT --to-destination 10.244.0.5:8080
-A PREROUTING -d 10.96.0.10/32 -p udp --dport 53 -j DNAT --to-destination 10.244.0.5:5353
COMMIT
`, "iptables-restore", "--noflush")
}

// tcpPeerServer answers every connection on addr inside the namespace with
// the connection's remote address (what the server sees as the client).
func (tp topo) tcpPeerServer(tb testing.TB, role, addr string) {
	tb.Helper()
	var ln net.Listener
	if err := netnsx.Do(tp.path(role), func() (err error) { ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		tb.Fatalf("listen %s in %s: %v", addr, role, err)
	}
	testserve.Serve(tb, ln, func(c net.Conn) { _, _ = io.WriteString(c, c.RemoteAddr().String()+"\n") })
}

// udpPeerServer answers every datagram on addr with the sender's address.
func (tp topo) udpPeerServer(tb testing.TB, role, addr string) {
	tb.Helper()
	var pc net.PacketConn
	if err := netnsx.Do(tp.path(role), func() (err error) { pc, err = net.ListenPacket("udp4", addr); return err }); err != nil {
		tb.Fatalf("listen udp %s in %s: %v", addr, role, err)
	}
	tb.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(from.String()), from)
		}
	}()
}

// tcpAsk connects from the namespace of role (from local if valid) to
// addr and returns the line the server sends: how it saw us.
func (tp topo) tcpAsk(role string, local netip.Addr, addr netip.AddrPort) (string, error) {
	var c net.Conn
	err := netnsx.Do(tp.path(role), func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		if local.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
		}
		c, err = d.Dial("tcp4", addr.String())
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// udpAsk sends one datagram from an unconnected socket in the namespace
// of role to addr and returns the answer and the address it came from.
func (tp topo) udpAsk(role string, addr netip.AddrPort) (answer, from string, err error) {
	var pc net.PacketConn
	if err := netnsx.Do(tp.path(role), func() (err error) { pc, err = net.ListenPacket("udp4", ":0"); return err }); err != nil {
		return "", "", err
	}
	defer pc.Close()
	if _, err := pc.WriteTo([]byte("hello"), net.UDPAddrFromAddrPort(addr)); err != nil {
		return "", "", err
	}
	_ = pc.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 512)
	n, src, err := pc.ReadFrom(buf)
	if err != nil {
		return "", "", err
	}
	return string(buf[:n]), src.String(), nil
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("bad(%s)", addr)
	}
	return h
}
