package routeagent

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/testserve"
	"github.com/causeway-net/causeway/lab/netlab"
)

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates network namespaces")
	}
}

// remoteSubnet stands for a remote cluster's pod CIDR; remoteIP lives on
// lo (no dummy module here) in every gateway-node namespace, with an echo server.
var (
	remoteSubnet = netip.MustParsePrefix("10.245.0.0/16")
	remoteIP     = netip.MustParseAddr("10.245.0.1")
)

// testbed is one lab cluster: n0 and n1 gateway candidates, n2 a worker
// with one pod, all on the cluster's node network (a bridge), built with
// the lab's own plumbing (pkg/lab/netlab) under a random prefix.
type testbed struct {
	h       *netlab.Host
	cluster netlab.Cluster
	pod     netlab.Pod
}

func newTestbed(t *testing.T) *testbed {
	t.Helper()
	requireRoot(t)
	h, c := labHost(t, "rat", 3)
	pod := netlab.Pod{Cluster: "c1", Node: "n2", Namespace: "default", Name: "client",
		IP: netip.MustParseAddr("10.244.2.2")}
	if err := h.EnsurePod(pod); err != nil {
		t.Fatalf("pod: %v", err)
	}
	tb := &testbed{h: h, cluster: c, pod: pod}
	tb.sh(t, h.Names().PodOf(pod), "sysctl -qw net.ipv4.tcp_timestamps=1")
	for _, n := range []string{"n0", "n1"} {
		tb.startRemote(t, n)
	}
	// Strict reverse-path filtering everywhere, as on many distributions:
	// the dataplane must cope with it.
	for _, n := range c.Nodes {
		tb.sh(t, tb.nodeNS(n.Name), "sysctl -qw net.ipv4.conf.all.rp_filter=1 net.ipv4.conf.eth0.rp_filter=1")
	}
	return tb
}

// labHost builds lab cluster c1 with nodes nodes under a random prefix
// starting with prefix (pkg/lab/netlab), torn down at cleanup with nothing
// left behind.
func labHost(tb testing.TB, prefix string, nodes int) (*netlab.Host, netlab.Cluster) {
	tb.Helper()
	return labHostOf(tb, prefix, netlab.ClusterSpec{Name: "c1", Index: 1, Nodes: nodes})
}

// labHostOf is labHost of cluster spec.
func labHostOf(tb testing.TB, prefix string, spec netlab.ClusterSpec) (*netlab.Host, netlab.Cluster) {
	tb.Helper()
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	h, err := netlab.NewHost(netlab.Config{Prefix: prefix + hex.EncodeToString(b[:]) + "-",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if _, err := h.Teardown(); err != nil {
			tb.Errorf("teardown: %v", err)
		}
		if left, err := h.Leftovers(); err != nil || !left.Empty() {
			tb.Errorf("left behind after teardown: %v %v", left, err)
		}
	})
	c, err := netlab.NewCluster(spec)
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.Apply(netlab.Topology{Prefix: h.Names().Prefix, Clusters: []netlab.Cluster{c}}); err != nil {
		tb.Fatalf("apply topology: %v", err)
	}
	return h, c
}

func (tb *testbed) nodeNS(node string) string { return tb.h.Names().Node("c1", node) }

func (tb *testbed) nodeIP(node string) netip.Addr {
	n, _ := tb.cluster.Node(node)
	return n.Address.Addr()
}

func (tb *testbed) sh(t *testing.T, ns, script string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %s: %v\n%s", ns, script, err, out)
	}
	return string(out)
}

// startRemote puts remoteIP on the node's lo and serves one
// line per connection: "<node> mss=<MSS the client's SYN announced, as the
// server sees it>".
func (tb *testbed) startRemote(t *testing.T, node string) {
	t.Helper()
	ns := tb.nodeNS(node)
	err := tb.h.Do(ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: remoteIP.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	})
	if err != nil {
		t.Fatalf("remote subnet in %s: %v", node, err)
	}
	tb.serveRemote(t, node, netip.AddrPortFrom(remoteIP, 7000))
}

// serveRemote serves on addr in node's namespace one line per connection,
// "<node> mss=<MSS the client's SYN announced, as the server sees it>",
// then echoes until the client closes.
func (tb *testbed) serveRemote(t *testing.T, node string, addr netip.AddrPort) {
	t.Helper()
	ln, err := tb.h.Listen(tb.nodeNS(node), "tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	testserve.Serve(t, ln, func(c net.Conn) {
		mss := -1
		if raw, err := c.(*net.TCPConn).SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
					mss = int(info.Snd_mss)
				}
			})
		}
		fmt.Fprintf(c, "%s mss=%d\n", node, mss)
		io.Copy(c, c) // echo until the client closes
	})
}

// dialRemote connects from the pod to the remote address, checks the echo
// of a 1 MiB payload (full-size segments through the overlay) and returns
// the server's greeting.
func (tb *testbed) dialRemote(t *testing.T) (string, error) {
	t.Helper()
	var c net.Conn
	err := tb.h.Do(tb.h.Names().PodOf(tb.pod), func() error {
		var err error
		c, err = (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp", netip.AddrPortFrom(remoteIP, 7000).String())
		return err
	})
	if err != nil {
		return "", err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read greeting: %w", err)
	}
	payload := make([]byte, 1<<20)
	rand.Read(payload)
	go c.Write(payload)
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(r, got); err != nil {
		return "", fmt.Errorf("read echo: %w", err)
	}
	if string(got) != string(payload) {
		return "", errors.New("echo differs from payload")
	}
	return strings.TrimSpace(line), nil
}

func (tb *testbed) dataplane(t *testing.T, node string) *Linux {
	t.Helper()
	dp, err := NewLinux(LinuxConfig{Netns: filepath.Join("/run/netns", tb.nodeNS(node))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	return dp
}

func (tb *testbed) desired(node, gateway string) DesiredState {
	in := Inputs{
		NodeName: node, NodeIP: tb.nodeIP(node),
		Remotes: []Remote{{ClusterID: "c3", Subnets: []netip.Prefix{remoteSubnet}}},
		Params:  Params{LocalCIDRs: []netip.Prefix{tb.cluster.PodCIDR, tb.cluster.ServiceCIDR}},
	}
	if gateway != "" {
		in.Gateway = &Gateway{Hostname: gateway, NodeIP: tb.nodeIP(gateway)}
	}
	return Compute(in)
}

func set(t *testing.T, dp Dataplane, d DesiredState) Report {
	t.Helper()
	rep, err := dp.Set(context.Background(), d)
	if err != nil {
		t.Fatalf("set: %v", err)
	}
	return rep
}

// wantVIPUnreachable dials an address of the VIP range from namespace ns
// and wants EHOSTUNREACH: the route lookup's own answer (a hang would
// end in the dialer's timeout instead).
func (tb *testbed) wantVIPUnreachable(t *testing.T, ns string) {
	t.Helper()
	vip := netip.AddrPortFrom(netip.MustParseAddr("243.0.0.77"), 80).String()
	err := tb.h.Do(ns, func() error {
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp4", vip)
		if err == nil {
			c.Close()
		}
		return err
	})
	if !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("%s: dial %s: %v, want EHOSTUNREACH", ns, vip, err)
	}
}

func TestDataplaneOverlayFailoverCleanup(t *testing.T) {
	tb := newTestbed(t)
	worker := tb.dataplane(t, "n2")
	gw0 := tb.dataplane(t, "n0")
	gw1 := tb.dataplane(t, "n1")

	if _, err := tb.dialRemote(t); err == nil {
		t.Fatal("remote subnet reachable before any route was programmed")
	}

	// n0 is the active gateway: it only receives on the overlay.
	set(t, gw0, tb.desired("n0", "n0"))
	set(t, gw1, tb.desired("n1", "n0"))
	rep := set(t, worker, tb.desired("n2", "n0"))
	if rep.Changes == nil {
		t.Fatal("first Set reported no changes")
	}
	greeting, err := tb.dialRemote(t)
	if err != nil {
		t.Fatalf("pod -> remote subnet via gateway n0: %v", err)
	}
	// The SYN left n2 through the overlay: its MSS is clamped to
	// min(overlay 1450, tunnel 1420) - 40 = 1380; unclamped it would be
	// 1460. The server's send MSS is that minus the 12-byte timestamp
	// option (timestamps are on in the pod, see newTestbed).
	if want := "n0 mss=1368"; greeting != want {
		t.Fatalf("greeting %q, want %q", greeting, want)
	}
	if rx := rxPackets(t, tb, "n0", DefaultDevice); rx == 0 {
		t.Fatal("gateway n0 received nothing on the overlay device")
	}
	// A clusterset VIP without a BPF map entry (no VIP datapath here at
	// all) meets the unreachable VIP range and fails at once, on a node,
	// gateway or not. pkg/vip's TestKernelUnknownVIPFailsFast checks that
	// known VIPs still connect.
	for _, n := range []string{"n0", "n2"} {
		tb.wantVIPUnreachable(t, tb.nodeNS(n))
	}

	// An equal Set changes nothing, also through a fresh dataplane (restart).
	if rep := set(t, worker, tb.desired("n2", "n0")); len(rep.Changes) != 0 || rep.OutsideFlush {
		t.Fatalf("equal Set changed %v (outside flush %v)", rep.Changes, rep.OutsideFlush)
	}
	restarted := tb.dataplane(t, "n2")
	if rep := set(t, restarted, tb.desired("n2", "n0")); len(rep.Changes) != 0 {
		t.Fatalf("Set after restart changed %v", rep.Changes)
	}

	// Failover to n1: traffic follows, n0's overlay entries are pruned.
	set(t, gw0, tb.desired("n0", "n1"))
	set(t, gw1, tb.desired("n1", "n1"))
	set(t, worker, tb.desired("n2", "n1"))
	if greeting, err := tb.dialRemote(t); err != nil || !strings.HasPrefix(greeting, "n1 ") {
		t.Fatalf("after failover: greeting %q, err %v; want n1", greeting, err)
	}
	routes := strings.TrimSpace(tb.sh(t, tb.nodeNS("n2"), "ip route show table all proto 148"))
	if want := "10.245.0.0/16 via 241.18.1.11 dev vx-causeway metric 100 onlink \nunreachable 10.245.0.0/16 metric 4096 \n" +
		"unreachable 242.0.0.0/8 metric 4096 \nunreachable 243.0.0.0/12 metric 100"; routes != want {
		t.Fatalf("routes after failover:\n%s\nwant\n%s", routes, want)
	}
	fdb := tb.sh(t, tb.nodeNS("n2"), "bridge fdb show dev "+DefaultDevice)
	if strings.Contains(fdb, tb.nodeIP("n0").String()) || !strings.Contains(fdb, tb.nodeIP("n1").String()) {
		t.Fatalf("fdb after failover:\n%s", fdb)
	}

	// No gateway known: remote subnets fail fast instead of leaking.
	set(t, worker, tb.desired("n2", ""))
	_, err = tb.dialRemote(t)
	if !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.ENETUNREACH) {
		t.Fatalf("without gateway: dial error %v, want host/net unreachable", err)
	}
	set(t, worker, tb.desired("n2", "n1"))
	if _, err := tb.dialRemote(t); err != nil {
		t.Fatalf("gateway back: %v", err)
	}
	// From a pod, the node forwards the SYN to the unreachable route and
	// answers with ICMP host unreachable. The kernel sends at most one such
	// ICMP per second to one host (net.ipv4.icmp_ratelimit), and the
	// no-gateway dial above just had one: lift the limit for this check.
	tb.sh(t, tb.nodeNS("n2"), "sysctl -qw net.ipv4.icmp_ratelimit=0")
	tb.wantVIPUnreachable(t, tb.h.Names().PodOf(tb.pod))

	// Cleanup leaves no device, owned route or chain.
	for _, n := range []string{"n0", "n1", "n2"} {
		dp := map[string]*Linux{"n0": gw0, "n1": gw1, "n2": worker}[n]
		if err := dp.Cleanup(context.Background()); err != nil {
			t.Fatalf("cleanup %s: %v", n, err)
		}
		ns := tb.nodeNS(n)
		if out := tb.sh(t, ns, "ip -d link show type vxlan"); strings.TrimSpace(out) != "" {
			t.Errorf("%s: vxlan devices left:\n%s", n, out)
		}
		if out := tb.sh(t, ns, "ip route show table all proto 148"); strings.TrimSpace(out) != "" {
			t.Errorf("%s: routes left:\n%s", n, out)
		}
		if out := tb.sh(t, ns, "iptables-save"); strings.Contains(out, "CAUSEWAY") {
			t.Errorf("%s: chains left:\n%s", n, out)
		}
	}
	if _, err := tb.dialRemote(t); err == nil {
		t.Fatal("remote subnet still reachable after cleanup")
	}
}

func TestDataplaneRepairsOutsideFlush(t *testing.T) {
	tb := newTestbed(t)
	worker := tb.dataplane(t, "n2")
	set(t, tb.dataplane(t, "n0"), tb.desired("n0", "n0"))
	want := tb.desired("n2", "n0")
	if rep := set(t, worker, want); !rep.OutsideFlush {
		t.Error("first Set on a fresh node: canary should be reported missing")
	}
	ns := tb.nodeNS("n2")
	mssRule := "-A " + ChainMSS + " -d " + remoteSubnet.String()

	// Someone flushes our chain: the next Set puts the rules back.
	tb.sh(t, ns, "iptables -t mangle -F "+ChainMSS)
	if out := tb.sh(t, ns, "iptables-save -t mangle"); strings.Contains(out, mssRule) {
		t.Fatal("flush did not flush")
	}
	rep := set(t, worker, want)
	if len(rep.Changes) == 0 || rep.OutsideFlush {
		t.Fatalf("after chain flush: changes %v, outside flush %v", rep.Changes, rep.OutsideFlush)
	}
	if out := tb.sh(t, ns, "iptables-save -t mangle"); !strings.Contains(out, mssRule) {
		t.Fatalf("rule not restored:\n%s", out)
	}

	// Someone flushes and deletes everything in mangle (firewall reload):
	// the canary reports it and the next Set restores chain and jump.
	tb.sh(t, ns, "iptables -t mangle -F && iptables -t mangle -X")
	rep = set(t, worker, want)
	if !rep.OutsideFlush {
		t.Error("deleted canary not reported")
	}
	out := tb.sh(t, ns, "iptables-save -t mangle")
	if !strings.Contains(out, mssRule) || strings.Count(out, "-j "+ChainMSS) != 1 {
		t.Fatalf("mangle not restored to one jump + rules:\n%s", out)
	}
	// A duplicate jump added outside is removed; foreign rules stay.
	tb.sh(t, ns, `iptables -t mangle -A POSTROUTING -m comment --comment "causeway route agent" -j `+ChainMSS+
		` && iptables -t mangle -A POSTROUTING -p udp -j ACCEPT`)
	set(t, worker, want)
	out = tb.sh(t, ns, "iptables-save -t mangle")
	if strings.Count(out, "-j "+ChainMSS) != 1 || !strings.Contains(out, "-A POSTROUTING -p udp -j ACCEPT") {
		t.Fatalf("duplicate jump not removed or foreign rule touched:\n%s", out)
	}
	if _, err := tb.dialRemote(t); err != nil {
		t.Fatalf("traffic after repairs: %v", err)
	}
}

func rxPackets(t *testing.T, tb *testbed, node, dev string) uint64 {
	t.Helper()
	var rx uint64
	err := tb.h.Do(tb.nodeNS(node), func() error {
		l, err := netlink.LinkByName(dev)
		if err != nil {
			return err
		}
		rx = l.Attrs().Statistics.RxPackets
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return rx
}

// `route-agent --cleanup`, run inside a programmed node, leaves nothing
// the agent owns and nothing else touched.
func TestCleanupCommand(t *testing.T) {
	tb := newTestbed(t)
	set(t, tb.dataplane(t, "n2"), tb.desired("n2", "n0"))
	ns := tb.nodeNS("n2")
	tb.sh(t, ns, "iptables -t mangle -A POSTROUTING -p udp -j ACCEPT")
	before := tb.sh(t, ns, "ip route show table all proto 76")
	err := tb.h.Do(ns, func() error {
		cmd := NewCommand()
		cmd.SetArgs([]string{"--cleanup", "--log-level", "warn"})
		return cmd.Execute()
	})
	if err != nil {
		t.Fatalf("route-agent --cleanup: %v", err)
	}
	if out := tb.sh(t, ns, "ip -d link show type vxlan; ip route show table all proto 148"); strings.TrimSpace(out) != "" {
		t.Errorf("left after --cleanup:\n%s", out)
	}
	out := tb.sh(t, ns, "iptables-save")
	if strings.Contains(out, "CAUSEWAY") || !strings.Contains(out, "-A POSTROUTING -p udp -j ACCEPT") {
		t.Errorf("iptables after --cleanup:\n%s", out)
	}
	if after := tb.sh(t, ns, "ip route show table all proto 76"); after != before || before == "" {
		t.Errorf("lab routes changed by --cleanup:\n%s\nwas\n%s", after, before)
	}
}

// kubeProxyRules are the nat rules kube-proxy (iptables mode,
// --cluster-cidr=10.244.0.0/16) installs for a ClusterIP 10.96.0.10:80
// whose endpoint is the pod on n2: traffic from outside the cluster CIDR
// is marked for masquerade and KUBE-POSTROUTING masquerades it. The jump
// to KUBE-POSTROUTING is inserted first, as kube-proxy does when it
// starts after the route agent.
const kubeProxyRules = `*nat
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SVC-TEST - [0:0]
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -j MASQUERADE
-A KUBE-SVC-TEST -d 10.96.0.10/32 -p tcp -m tcp --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ
-A KUBE-SVC-TEST -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.244.2.2:8080
-A PREROUTING -j KUBE-SVC-TEST
-A OUTPUT -j KUBE-SVC-TEST
-I POSTROUTING 1 -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
COMMIT
`

// A remote client reaching a ClusterIP through the gateway keeps its
// source address at the backend pod on another node: kube-proxy's
// masquerade is skipped for remote subnets (our nat jump, moved back in
// front of kube-proxy's), and the reply returns through the gateway that
// did the DNAT (overlay route on the worker, loose rp_filter, conntrack).
func TestDataplaneKeepsRemoteSourceThroughClusterIP(t *testing.T) {
	tb := newTestbed(t)
	gw := tb.dataplane(t, "n0")
	worker := tb.dataplane(t, "n2")
	set(t, gw, tb.desired("n0", "n0"))
	set(t, worker, tb.desired("n2", "n0"))

	// The backend in the pod on n2 answers with the client address it sees.
	ln, err := tb.h.Listen(tb.h.Names().PodOf(tb.pod), "tcp", netip.AddrPortFrom(tb.pod.IP, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	testserve.Serve(t, ln, func(c net.Conn) {
		fmt.Fprintf(c, "%s\n", c.RemoteAddr().(*net.TCPAddr).IP)
	})
	// The client is the remote address on the gateway node (remote
	// traffic enters the cluster there), talking to the ClusterIP.
	seenBy := func() (string, error) {
		var c net.Conn
		err := tb.h.Do(tb.nodeNS("n0"), func() error {
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: remoteIP.AsSlice()}}
			var err error
			c, err = d.Dial("tcp", "10.96.0.10:80")
			return err
		})
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line), err
	}

	ns := tb.nodeNS("n0")
	cmd := exec.Command("ip", "netns", "exec", ns, "iptables-restore", "--noflush")
	cmd.Stdin = strings.NewReader(kubeProxyRules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kube-proxy rules: %v\n%s", err, out)
	}
	// With kube-proxy's jump in front, the backend sees the gateway node:
	// the test reproduces the problem.
	if got, err := seenBy(); err != nil || got != tb.nodeIP("n0").String() {
		t.Fatalf("kube-proxy's masquerade first: backend saw %q (err %v), want the gateway node %s", got, err, tb.nodeIP("n0"))
	}
	rep := set(t, gw, tb.desired("n0", "n0"))
	if len(rep.Changes) == 0 {
		t.Fatal("Set did not move the nat jump back in front of kube-proxy's")
	}
	out := tb.sh(t, ns, "iptables -t nat -S POSTROUTING")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "-j "+ChainNAT) || !strings.HasSuffix(lines[2], "-j KUBE-POSTROUTING") {
		t.Fatalf("nat POSTROUTING:\n%s\nwant our jump, then kube-proxy's", out)
	}
	if got, err := seenBy(); err != nil || got != remoteIP.String() {
		t.Fatalf("backend saw %q (err %v), want the remote client %s", got, err, remoteIP)
	}
	if rx := rxPackets(t, tb, "n0", DefaultDevice); rx == 0 {
		t.Fatal("the reply did not come back through the overlay to the gateway")
	}
	if rep := set(t, gw, tb.desired("n0", "n0")); len(rep.Changes) != 0 {
		t.Fatalf("equal Set changed %v", rep.Changes)
	}

	// Cleanup removes our chain and jump and leaves kube-proxy's.
	if err := gw.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	out = tb.sh(t, ns, "iptables-save -t nat")
	if strings.Contains(out, "CAUSEWAY") || !strings.Contains(out, "-j KUBE-POSTROUTING") {
		t.Fatalf("nat after cleanup:\n%s", out)
	}
}

// TestDataplaneIPv6RemoteSubnet: a dual-stack cluster (n0 the active
// gateway, n1 a worker with a dual-stack pod) and a remote cluster's IPv6
// subnet (a dual-stack globalnet cluster's, reached directly) behind n0.
// The worker routes it over the IPv4 overlay via n0's link-local overlay
// address, ip6tables clamps the SYN's MSS for IPv6 (min(overlay, tunnel)
// - 60), the IPv4 remote keeps working beside it, and Cleanup removes
// the IPv6 route, neighbour and ip6tables chains too.
func TestDataplaneIPv6RemoteSubnet(t *testing.T) {
	requireRoot(t)
	pod6, svc6 := netlab.IPv6CIDRs(1)
	h, c := labHostOf(t, "ra6", netlab.ClusterSpec{Name: "c1", Index: 1, Nodes: 2, PodCIDR6: pod6, ServiceCIDR6: svc6})
	n1, _ := c.Node("n1")
	pod := netlab.Pod{Cluster: "c1", Node: "n1", Namespace: "default", Name: "client", IP: netip.MustParseAddr("10.244.1.2")}
	pod.IP6 = n1.PodIP6(pod.IP)
	if err := h.EnsurePod(pod); err != nil {
		t.Fatalf("pod: %v", err)
	}
	tb := &testbed{h: h, cluster: c, pod: pod}
	remote6 := netip.MustParseAddr("fd00:10:245:3::1")
	tb.sh(t, tb.nodeNS("n0"), "ip -6 addr add "+remote6.String()+"/128 dev lo nodad")
	tb.startRemote(t, "n0")
	tb.serveRemote(t, "n0", netip.AddrPortFrom(remote6, 7000))
	dial6 := func() (string, error) {
		var line string
		err := h.Do(h.Names().PodOf(pod), func() error {
			c, err := (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp6", netip.AddrPortFrom(remote6, 7000).String())
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			line, err = bufio.NewReader(c).ReadString('\n')
			return err
		})
		return strings.TrimSpace(line), err
	}
	if _, err := dial6(); err == nil {
		t.Fatal("IPv6 remote subnet reachable before any route was programmed")
	}

	desired := func(node string) DesiredState {
		return Compute(Inputs{NodeName: node, NodeIP: tb.nodeIP(node), Gateway: &Gateway{Hostname: "n0", NodeIP: tb.nodeIP("n0")},
			Remotes: []Remote{{ClusterID: "c3", Subnets: []netip.Prefix{remoteSubnet, netip.MustParsePrefix("fd00:10:245:3::/64")}}},
			Params:  Params{LocalCIDRs: slices.Concat(c.PodCIDRs(), c.ServiceCIDRs())}})
	}
	gw, worker := tb.dataplane(t, "n0"), tb.dataplane(t, "n1")
	set(t, gw, desired("n0"))
	set(t, worker, desired("n1"))
	// IPv6: min(overlay 1450, tunnel 1420) - 60 = 1360, less the 12-byte
	// timestamp option; unclamped the pod's eth0 would announce 1440.
	if greeting, err := dial6(); err != nil || greeting != "n0 mss=1348" {
		t.Fatalf("pod -> [%s] via gateway n0: greeting %q, err %v; want \"n0 mss=1348\"", remote6, greeting, err)
	}
	if greeting, err := tb.dialRemote(t); err != nil || !strings.HasPrefix(greeting, "n0 ") {
		t.Fatalf("pod -> %s beside IPv6: greeting %q, err %v", remoteIP, greeting, err)
	}
	routes := strings.TrimSpace(tb.sh(t, tb.nodeNS("n1"), "ip -6 route show table all proto 148"))
	if want := "fd00:10:245:3::/64 via " + OverlayAddr6(tb.nodeIP("n0")).String() + " dev vx-causeway metric 100 onlink pref medium"; !strings.Contains(routes, want) {
		t.Fatalf("IPv6 routes on the worker:\n%s\nwant one %q", routes, want)
	}
	if rep := set(t, worker, desired("n1")); len(rep.Changes) != 0 || rep.OutsideFlush {
		t.Fatalf("equal Set changed %v (outside flush %v)", rep.Changes, rep.OutsideFlush)
	}

	for n, dp := range map[string]*Linux{"n0": gw, "n1": worker} {
		if err := dp.Cleanup(context.Background()); err != nil {
			t.Fatalf("cleanup %s: %v", n, err)
		}
		ns := tb.nodeNS(n)
		if out := tb.sh(t, ns, "ip -6 route show table all proto 148; ip -6 neigh show nud permanent"); strings.TrimSpace(out) != "" {
			t.Errorf("%s: IPv6 routes or neighbours left:\n%s", n, out)
		}
		if out := tb.sh(t, ns, "ip6tables-save"); strings.Contains(out, "CAUSEWAY") {
			t.Errorf("%s: ip6tables chains left:\n%s", n, out)
		}
	}
}
