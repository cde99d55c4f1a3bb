package nat

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/internal/testserve"
)

// baseConfig is the gateway's config of the test topology: the Service
// 10.96.0.10 (tcp/80, udp/53) exported at 242.0.1.2:1024/1025, the
// headless pod 10.244.0.6 at 242.0.1.252, egress from 242.0.1.253 and
// .254 (the addresses globalnet's layout and allocator give a /24); the
// "tunnel" is g0, the gateway's veth to the client.
func baseConfig() Config {
	gip := netip.MustParseAddr("242.0.1.2")
	return Config{
		LocalGlobal:  []netip.Prefix{localGlobal},
		Remote:       []netip.Prefix{remoteGlobal},
		RemoteEgress: []netip.Addr{netip.MustParseAddr("242.0.3.253"), netip.MustParseAddr("242.0.3.254")},
		Egress:       []netip.Addr{netip.MustParseAddr("242.0.1.253"), netip.MustParseAddr("242.0.1.254")},
		Ingress: []Ingress{
			{Protocol: "tcp", Global: netip.AddrPortFrom(gip, 1024), Target: netip.AddrPortFrom(clusterIP, 80)},
			{Protocol: "udp", Global: netip.AddrPortFrom(gip, 1025), Target: netip.AddrPortFrom(clusterIP, 53)},
		},
		Pods:   []PodIngress{{Global: netip.MustParseAddr("242.0.1.252"), Pod: headlessPod}},
		Device: "g0",
	}
}

func TestGatewayTranslatesBothWays(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.kubeProxy(t)
	cfg := baseConfig()
	tcpG, udpG, podG := cfg.Ingress[0].Global, cfg.Ingress[1].Global, cfg.Pods[0].Global
	tp.tcpPeerServer(t, "pod", podAddr.String()+":8080")
	tp.udpPeerServer(t, "pod", podAddr.String()+":5353")
	tp.tcpPeerServer(t, "pod", headlessPod.String()+":9000")
	tp.tcpPeerServer(t, "client", remoteService.String()+":7000")

	// Without the table a global address leads nowhere.
	if got, err := tp.tcpAsk("client", netip.Addr{}, tcpG); err == nil {
		t.Fatalf("before Sync the client reached %s (answer %q)", tcpG, got)
	}

	tab := NewTable(NewNftRunner(tp.path("gw")), nil)
	ctx := context.Background()
	res, err := tab.Sync(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full || res.Elements != 2+2+4*2+2 {
		t.Fatalf("first sync: %+v, want full with 14 elements", res)
	}
	t.Cleanup(func() { _ = tab.Cleanup(ctx) })

	// TCP: reaches the pod through ClusterIP + kube-proxy's DNAT, the pod
	// sees the client's global source, and since the connection was
	// established the SYN-ACK came from tcpG (the socket is connected to it).
	got, err := tp.tcpAsk("client", netip.Addr{}, tcpG)
	if err != nil {
		t.Fatalf("tcp to %s: %v", tcpG, err)
	}
	if hostOf(got) != clientAddr.String() {
		t.Errorf("pod saw the tcp client as %s, want %s", got, clientAddr)
	}
	// UDP on an unconnected socket: recvfrom shows where the reply came from.
	ans, from, err := tp.udpAsk("client", udpG)
	if err != nil {
		t.Fatalf("udp to %s: %v", udpG, err)
	}
	if hostOf(ans) != clientAddr.String() || from != udpG.String() {
		t.Errorf("udp: pod saw %s, reply from %s; want %s and %s", ans, from, clientAddr, udpG)
	}
	// A global port of one protocol does not answer for the other.
	if _, _, err := tp.udpAsk("client", tcpG); err == nil {
		t.Errorf("udp to the tcp pair %s was answered", tcpG)
	}

	// Headless pod 1:1, inbound: the pod sees the client, the reply comes
	// from the pod's global IP (connection established).
	if got, err := tp.tcpAsk("client", netip.Addr{}, netip.AddrPortFrom(podG, 9000)); err != nil || hostOf(got) != clientAddr.String() {
		t.Errorf("tcp to headless %s:9000: answer %q, err %v; want seen as %s", podG, got, err, clientAddr)
	}
	// Headless pod outbound: leaves with its global IP, not an egress IP.
	remote := netip.AddrPortFrom(remoteService, 7000)
	if got, err := tp.tcpAsk("pod", headlessPod, remote); err != nil || hostOf(got) != podG.String() {
		t.Errorf("headless pod → remote: seen as %q (err %v), want %s", got, err, podG)
	}
	// Any other pod: SNAT to one of the egress IPs.
	got, err = tp.tcpAsk("pod", podAddr, remote)
	if err != nil {
		t.Fatalf("pod → remote: %v", err)
	}
	if ip := netip.MustParseAddr(hostOf(got)); !slices.Contains(cfg.Egress, ip) {
		t.Errorf("pod → remote seen as %s, want one of the egress IPs %v", got, cfg.Egress)
	}
	// The gateway itself (host network) leaves with an egress IP too.
	gwOut := ""
	{
		var err error
		gwOut, err = tp.tcpAsk("gw", netip.Addr{}, remote)
		if err != nil {
			t.Fatalf("gateway → remote: %v", err)
		}
	}
	if ip := netip.MustParseAddr(hostOf(gwOut)); !slices.Contains(cfg.Egress, ip) {
		t.Errorf("gateway → remote seen as %s, want one of %v", gwOut, cfg.Egress)
	}

	// An equal Sync writes nothing; Cleanup removes everything.
	if res, err := tab.Sync(ctx, cfg); err != nil || res.Full || res.Added+res.Removed != 0 {
		t.Errorf("equal sync: %+v, %v; want no change", res, err)
	}
	if err := tab.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if out := tp.in(t, "gw", "nft", "list", "tables"); strings.Contains(out, TableName) {
		t.Errorf("after Cleanup: %s", out)
	}
	if got, err := tp.tcpAsk("client", netip.Addr{}, tcpG); err == nil {
		t.Errorf("after Cleanup the client still reached %s (%q)", tcpG, got)
	}
}

// TestNamespaceEgress: a pod of a namespace with its own global egress
// IP (PodEgress) reaches the remote from that IP, a pod of any other
// namespace from the cluster-wide egress range and a headless pod from
// its own global IP; taking the pod out of the map (an incremental sync)
// puts it back on the cluster-wide range.
func TestNamespaceEgress(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	labelled := netip.MustParseAddr("10.244.0.7")
	tp.in(t, "pod", "ip", "addr", "add", labelled.String()+"/24", "dev", "p0")
	tp.tcpPeerServer(t, "client", remoteService.String()+":7000")
	remote := netip.AddrPortFrom(remoteService, 7000)

	cfg := baseConfig()
	nsIP := netip.MustParseAddr("242.0.1.251") // the next whole IP after the headless pod's
	cfg.PodEgress = []PodEgress{{Pod: labelled, Global: nsIP}}
	tab := tp.syncedTable(t, cfg)
	ctx := context.Background()

	seenAs := func(src netip.Addr) netip.Addr {
		t.Helper()
		got, err := tp.tcpAsk("pod", src, remote)
		if err != nil {
			t.Fatalf("%s → remote: %v", src, err)
		}
		return netip.MustParseAddr(hostOf(got))
	}
	if got := seenAs(labelled); got != nsIP {
		t.Errorf("labelled namespace's pod seen as %s, want its namespace's egress IP %s", got, nsIP)
	}
	if got := seenAs(podAddr); !slices.Contains(cfg.Egress, got) {
		t.Errorf("other pod seen as %s, want one of the cluster-wide egress IPs %v", got, cfg.Egress)
	}
	if got, want := seenAs(headlessPod), cfg.Pods[0].Global; got != want {
		t.Errorf("headless pod seen as %s, want its own global IP %s", got, want)
	}

	cfg.PodEgress = nil
	if res, err := tab.Sync(ctx, cfg); err != nil || res.Full || res.Removed != 1 {
		t.Fatalf("pod out of the map: %+v, %v; want one element removed incrementally", res, err)
	}
	if got := seenAs(labelled); !slices.Contains(cfg.Egress, got) {
		t.Errorf("after the namespace lost its egress IP its pod is seen as %s, want one of %v", got, cfg.Egress)
	}
}

// TestFailoverReplyWaitsForTheRemote is a failover onto the backend's
// node: a UDP flow from a remote client (seen at its cluster's egress
// address) to an exported port loses its conntrack entry, as a new
// active term deletes the entries of flows it tracked while passive,
// and the backend answers before the client's next datagram. That
// answer must not leave (SNATed to our egress IP it would leak and make
// an entry holding the tuple the client's flow needs), and the client's
// next datagram must be translated and answered from the global port.
func TestFailoverReplyWaitsForTheRemote(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.kubeProxy(t)
	_, udpG, _ := tp.lateAnswers(t, 300*time.Millisecond)
	var c net.PacketConn
	if err := netnsx.Do(tp.path("client"), func() (err error) {
		c, err = net.ListenPacket("udp4", clientAddr.String()+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func(want string, within time.Duration) (string, string) {
		t.Helper()
		if want != "" {
			if _, err := c.WriteTo([]byte(want), net.UDPAddrFromAddrPort(udpG)); err != nil {
				t.Fatal(err)
			}
		}
		buf := make([]byte, 64)
		_ = c.SetReadDeadline(time.Now().Add(within))
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return "", ""
		}
		return string(buf[:n]), from.String()
	}
	if got, from := ask("hi", 3*time.Second); got != "now" || from != udpG.String() {
		t.Fatalf("first answer %q from %s, want \"now\" from %s", got, from, udpG)
	}
	if n, err := DeleteConntrack(tp.path("gw"), []netip.Prefix{remoteGlobal}); err != nil || n == 0 {
		t.Fatalf("delete the flow's conntrack entry: %d deleted, %v", n, err)
	}
	if got, from := ask("", time.Second); got != "" {
		t.Errorf("the pod's late answer left the gateway without its flow's entry: %q from %s", got, from)
	}
	got, from := ask("again", 3*time.Second)
	for got == "late" { // the second datagram's own late answer may come first on a slow machine
		got, from = ask("", 3*time.Second)
	}
	if got != "now" || from != udpG.String() {
		t.Errorf("after the failover the client's datagram got %q from %s, want \"now\" from %s", got, from, udpG)
	}
}

// TestHandoverReplyOverTheOverlayWaitsForTheRemote is a gateway handing
// over while serving a remote client's TCP connection: its route agent
// has removed the node's entries of remote flows and routes the pods'
// traffic to the successor over the overlay (here a veth whose peer is
// down), while the tunnel still brings the client's packets. The pod
// writes in between; that segment must not leave and make an entry, or
// the client's next segment through the tunnel meets an entry holding
// its reply tuple: its destination port is remapped and the pod resets
// the connection. Dropped, it is retransmitted once the client's
// segment has made the right entry, and the connection lives.
func TestHandoverReplyOverTheOverlayWaitsForTheRemote(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.kubeProxy(t)
	var ln net.Listener
	if err := netnsx.Do(tp.path("pod"), func() (err error) { ln, err = net.Listen("tcp4", podAddr.String()+":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	// The pod answers each line at once, and a line "late" also 300 ms
	// later.
	testserve.Serve(t, ln, func(c net.Conn) {
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			line := string(buf[:n])
			_, _ = io.WriteString(c, "echo "+line)
			if line == "late\n" {
				time.AfterFunc(300*time.Millisecond, func() { _, _ = io.WriteString(c, "later\n") })
			}
		}
	})
	cfg := baseConfig()
	tp.syncedTable(t, cfg)
	var c net.Conn
	if err := netnsx.Do(tp.path("client"), func() (err error) {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(clientAddr, 0)), Timeout: 3 * time.Second}
		c, err = d.Dial("tcp4", cfg.Ingress[0].Global.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	read := func() string {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return line
	}
	if _, err := io.WriteString(c, "late\n"); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "echo late\n" {
		t.Fatalf("first answer %q", got)
	}
	tp.in(t, "gw", "ip", "link", "add", "ov0", "type", "veth", "peer", "name", "ov1")
	tp.in(t, "gw", "ip", "link", "set", "ov0", "up")
	tp.in(t, "gw", "ip", "route", "replace", remoteGlobal.String(), "dev", "ov0")
	if n, err := DeleteConntrack(tp.path("gw"), []netip.Prefix{remoteGlobal}); err != nil || n == 0 {
		t.Fatalf("delete the flow's conntrack entry: %d deleted, %v", n, err)
	}
	time.Sleep(time.Second) // the pod's "later" is due in this second
	tp.in(t, "gw", "ip", "route", "replace", remoteGlobal.String(), "via", "10.9.0.2")
	if _, err := io.WriteString(c, "again\n"); err != nil {
		t.Fatal(err)
	}
	got := []string{read(), read()}
	slices.Sort(got)
	if want := []string{"echo again\n", "later\n"}; !slices.Equal(got, want) {
		t.Errorf("after the handover the client read %q, want %q", got, want)
	}
}

// TestTableWithoutItsDeviceTranslatesNothing is the table a killed
// gateway leaves behind once its tunnel device went with it: traffic
// takes another way (here the client reaches the pod network directly)
// and no rule of the table touches it — no rewrite, no SNAT, no drop
// (the drop of a new flow to a remote egress address, the one rule
// without the device, sees no such flow here).
func TestTableWithoutItsDeviceTranslatesNothing(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.kubeProxy(t)
	run(t, "ip", "-n", tp.ns("client"), "route", "add", "10.244.0.0/24", "via", "10.9.0.1")
	tp.tcpPeerServer(t, "pod", podAddr.String()+":8080")
	tp.tcpPeerServer(t, "client", remoteService.String()+":7000")
	cfg := baseConfig()
	cfg.Device = "cw-gone" // no such device
	tp.syncedTable(t, cfg)
	if got, err := tp.tcpAsk("client", netip.Addr{}, cfg.Ingress[0].Global); err == nil {
		t.Errorf("the client reached %s through a table scoped to a missing device (%q)", cfg.Ingress[0].Global, got)
	}
	// The pod's own connection leaves unSNATed, and the pod's reply to a
	// remote client's connection (ct direction reply) is not dropped.
	if got, err := tp.tcpAsk("pod", podAddr, netip.AddrPortFrom(remoteService, 7000)); err != nil || hostOf(got) != podAddr.String() {
		t.Errorf("pod → remote: seen as %q (err %v), want its own %s", got, err, podAddr)
	}
	if got, err := tp.tcpAsk("client", clientAddr, netip.AddrPortFrom(podAddr, 8080)); err != nil || hostOf(got) != clientAddr.String() {
		t.Errorf("remote client → pod directly: answer %q, err %v; want seen as %s", got, err, clientAddr)
	}
}

func TestOutsideFlushIsRepaired(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.kubeProxy(t)
	tp.tcpPeerServer(t, "pod", podAddr.String()+":8080")
	cfg := baseConfig()
	tab := NewTable(NewNftRunner(tp.path("gw")), nil)
	ctx := context.Background()
	if _, err := tab.Sync(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	want, err := tab.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Same config after an outside flush: the canary probe notices.
	tp.in(t, "gw", "nft", "flush", "ruleset")
	res, err := tab.Sync(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full || !res.CanaryMissing {
		t.Errorf("sync after flush: %+v, want full with canary missing", res)
	}
	if got, err := tab.Counts(ctx); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after repair counts %v (err %v), want %v", got, err, want)
	}
	// A changed config after a flush: the incremental transaction fails on
	// the canary and the same Sync replaces the table.
	tp.in(t, "gw", "nft", "flush", "ruleset")
	cfg.Ingress = append(cfg.Ingress, Ingress{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.2:1026"), Target: netip.AddrPortFrom(clusterIP, 443)})
	res, err = tab.Sync(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Full || !res.CanaryMissing {
		t.Errorf("changed sync after flush: %+v, want full with canary missing", res)
	}
	tp.kubeProxy(t) // the flush took kube-proxy's rules too
	if got, err := tp.tcpAsk("client", netip.Addr{}, cfg.Ingress[0].Global); err != nil || hostOf(got) != clientAddr.String() {
		t.Errorf("after repair: %q, %v", got, err)
	}
}

func TestIncrementalSyncChangesOnlyTheDifference(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	ctx := context.Background()
	cfg := manyPortsConfig(t, 2000)
	tab := NewTable(NewNftRunner(tp.path("gw")), nil)
	if _, err := tab.Sync(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	extra := Ingress{Protocol: "udp", Global: netip.MustParseAddrPort("242.0.1.200:4000"), Target: netip.MustParseAddrPort("10.97.0.1:53")}
	res, err := tab.Sync(ctx, withIngress(cfg, extra))
	if err != nil {
		t.Fatal(err)
	}
	if res.Full || res.Added != 4 || res.Removed != 0 {
		t.Errorf("add one: %+v, want partial +4", res)
	}
	counts, err := tab.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts["tcp-in-addr"] != 2000 || counts["udp-in-addr"] != 1 || counts["udp-out-port"] != 1 {
		t.Errorf("counts after add: %v", counts)
	}
	// Re-point an existing pair to another ClusterIP: delete + add of its elements.
	moved := slices.Clone(cfg.Ingress)
	moved[7].Target = netip.MustParseAddrPort("10.98.0.7:8080")
	res, err = tab.Sync(ctx, Config{LocalGlobal: cfg.LocalGlobal, Remote: cfg.Remote, RemoteEgress: cfg.RemoteEgress, Egress: cfg.Egress, Ingress: moved})
	if err != nil {
		t.Fatal(err)
	}
	if res.Full || res.Added != 4 || res.Removed != 4+4 {
		t.Errorf("move one and drop the extra: %+v, want partial +4 -8", res)
	}
	if counts, err = tab.Counts(ctx); err != nil || counts["tcp-in-addr"] != 2000 || counts["udp-in-addr"] != 0 {
		t.Errorf("counts after move: %v, %v", counts, err)
	}
	out := tp.in(t, "gw", "nft", "list", "map", "ip", TableName, "tcp-in-port")
	if !strings.Contains(out, "10.98.0.7 . "+fmt.Sprint(moved[7].Global.Port())+" : 8080") {
		t.Errorf("moved pair not in tcp-in-port")
	}
}

// lateAnswers makes the pod answer every datagram on its UDP port
// twice, "now" at once and "late" after delay, and syncs the gateway's
// table with baseConfig; it returns the config, the UDP pair's global
// address and the table.
func (tp topo) lateAnswers(t *testing.T, delay time.Duration) (Config, netip.AddrPort, *Table) {
	t.Helper()
	var pc net.PacketConn
	if err := netnsx.Do(tp.path("pod"), func() (err error) { pc, err = net.ListenPacket("udp4", podAddr.String()+":5353"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte("now"), from)
			time.AfterFunc(delay, func() { _, _ = pc.WriteTo([]byte("late"), from) })
		}
	}()
	cfg := baseConfig()
	return cfg, cfg.Ingress[1].Global, tp.syncedTable(t, cfg)
}

// TestReleasedPairNeverLeaksClusterIP: a UDP flow outlives its pair. New
// packets to the released pair go nowhere, and a late reply of the old
// flow (conntrack still knows it) is dropped instead of reaching the
// remote cluster with the ClusterIP as its source.
func TestReleasedPairNeverLeaksClusterIP(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	tp.kubeProxy(t)
	cfg, udpG, tab := tp.lateAnswers(t, 500*time.Millisecond)
	ctx := context.Background()
	var c net.PacketConn
	if err := netnsx.Do(tp.path("client"), func() (err error) { c, err = net.ListenPacket("udp4", ":0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteTo([]byte("hi"), net.UDPAddrFromAddrPort(udpG)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, from, err := c.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "now" || from.String() != udpG.String() {
		t.Fatalf("first reply %q from %v, err %v; want \"now\" from %s", buf[:n], from, err, udpG)
	}
	// Release the pair before the late reply.
	cfg.Ingress = cfg.Ingress[:1]
	if res, err := tab.Sync(ctx, cfg); err != nil || res.Full || res.Removed != 4 {
		t.Fatalf("release sync: %+v, %v", res, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
	if n, from, err := c.ReadFrom(buf); err == nil {
		t.Errorf("late reply %q of a released pair reached the remote client from %s", buf[:n], from)
	}
}

// TestRunnerStaysInItsNamespace: knftables (knftables.New's checks, the
// transactions, the listing) runs in the runner's namespace only: the
// table appears in gw and nowhere else, and a runner whose namespace
// cannot be entered runs nothing.
func TestRunnerStaysInItsNamespace(t *testing.T) {
	t.Parallel()
	tp := newTopo(t)
	cfg := baseConfig()
	tab := tp.syncedTable(t, cfg)
	ctx := context.Background()
	if out := tp.in(t, "gw", "nft", "list", "tables"); !strings.Contains(out, "table ip "+TableName) {
		t.Errorf("gw lacks the table: %q", out)
	}
	for _, role := range []string{"client", "pod"} {
		if out := tp.in(t, role, "nft", "list", "tables"); out != "" {
			t.Errorf("%s holds tables: %q", role, out)
		}
	}
	if counts, err := tab.Counts(ctx); err != nil || counts[MapPodIn] != 1 {
		t.Errorf("counts in gw: %v, %v", counts, err)
	}

	lost := NewTable(NewNftRunner(tp.path("gone")), nil)
	if _, err := lost.Sync(ctx, cfg); err == nil || !strings.Contains(err.Error(), "netns") {
		t.Errorf("sync in a missing namespace: %v, want the namespace's error", err)
	}
	if _, err := lost.Counts(ctx); err == nil {
		t.Error("counts in a missing namespace succeeded")
	}
}
