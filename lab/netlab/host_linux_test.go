package netlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/testserve"
	"github.com/causeway-net/causeway/lab/apps"
)

// appEnv makes the test binary run a lab app instead of the tests, so that
// tests can start real processes in pods without building causeway-lab.
const appEnv = "NETLAB_TEST_APP"

func TestMain(m *testing.M) {
	switch os.Getenv(appEnv) {
	case "":
		os.Exit(m.Run())
	case "whereami":
		var cfg apps.WhereamiConfig
		fs := pflag.NewFlagSet("whereami", pflag.ExitOnError)
		cfg.AddFlags(fs)
		fs.Parse(os.Args[1:])
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		if err := apps.RunWhereami(ctx, cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	default:
		fmt.Fprintln(os.Stderr, "unknown app", os.Getenv(appEnv))
		os.Exit(2)
	}
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates network namespaces and cgroups")
	}
}

// newTestHost returns a Host with a fresh prefix whose lab is torn down,
// and checked to leave nothing behind, when the test ends.
func newTestHost(tb testing.TB, opts ...func(*Config)) *Host {
	tb.Helper()
	requireRoot(tb)
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	cfg := Config{Prefix: "cwt" + hex.EncodeToString(b[:]) + "-", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	h, err := NewHost(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if _, err := h.Teardown(); err != nil {
			tb.Errorf("teardown: %v", err)
		}
		left, err := h.Leftovers()
		if err != nil {
			tb.Errorf("leftovers: %v", err)
		}
		if !left.Empty() {
			tb.Errorf("left behind after teardown: %s", left)
		}
	})
	return h
}

func mustApply(t *testing.T, h *Host, top Topology) {
	t.Helper()
	if err := h.Apply(top); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// linkIndexes returns name→ifindex of a namespace's links, to prove that
// a second Apply recreated nothing.
func linkIndexes(t *testing.T, h *Host, ns string) map[string]int {
	t.Helper()
	out := map[string]int{}
	err := h.withHandle(ns, func(nh *netlink.Handle, _ netns.NsHandle) error {
		links, err := nh.LinkList()
		for _, l := range links {
			out[l.Attrs().Name] = l.Attrs().Index
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// httpIn returns an HTTP client whose connections are opened inside ns.
func httpIn(h *Host, ns string) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
				return h.Dial(ns, network, addr)
			},
		},
	}
}

// waitHTTP polls url from ns until it answers or the deadline passes (the
// server process needs a moment to start; this is readiness, not timing).
func waitHTTP(t *testing.T, h *Host, ns, url string) apps.Identity {
	t.Helper()
	c := httpIn(h, ns)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			var id apps.Identity
			derr := json.NewDecoder(resp.Body).Decode(&id)
			resp.Body.Close()
			if derr != nil {
				t.Fatalf("decode reply: %v", derr)
			}
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s from %s: %v", url, ns, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startWhereami runs whereami on port 8080 in pod p (this test binary,
// see TestMain), logging to logPath.
func startWhereami(t *testing.T, h *Host, p Pod, logPath string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := h.Start(Process{
		Netns:   h.Names().PodOf(p),
		Cgroup:  h.Cgroups().PodOf(p),
		Path:    self,
		Args:    []string{"--port", "8080", "--cluster", p.Cluster, "--namespace", p.Namespace, "--pod", p.Name, "--pod-ip", p.IP.String()},
		Env:     append(os.Environ(), appEnv+"=whereami"),
		LogPath: logPath,
		Setsid:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestOneClusterPodToPodAcrossNodes(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	names, cg := h.Names(), h.Cgroups()
	c, err := NewCluster(ClusterSpec{Name: "c1", Index: 1, Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	top := Topology{Prefix: h.prefix, Clusters: []Cluster{c}}
	mustApply(t, h, top)
	before := linkIndexes(t, h, names.Node("c1", "n0"))
	mustApply(t, h, top)
	if after := linkIndexes(t, h, names.Node("c1", "n0")); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("second Apply changed links: %v -> %v", before, after)
	}

	server := Pod{Cluster: "c1", Node: "n0", Namespace: "kubecon", Name: "whereami-0", IP: netip.MustParseAddr("10.244.0.2")}
	client := Pod{Cluster: "c1", Node: "n1", Namespace: "kubecon", Name: "client-0", IP: netip.MustParseAddr("10.244.1.2")}
	for _, p := range []Pod{server, client, server} { // twice: idempotent
		if err := h.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}

	logPath := filepath.Join(t.TempDir(), "whereami.log")
	cmd := startWhereami(t, h, server, logPath)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	// The process runs in the pod's cgroup and network namespace.
	pid := cmd.Process.Pid
	cgLine, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(cg.Root, cg.PodOf(server))
	if want := "0::/" + rel; !strings.Contains(string(cgLine), want+"\n") {
		t.Errorf("/proc/%d/cgroup = %q, want a line %q", pid, cgLine, want)
	}
	var st unix.Stat_t
	if err := unix.Stat(h.netnsPath(names.PodOf(server)), &st); err != nil {
		t.Fatal(err)
	}
	if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); link != fmt.Sprintf("net:[%d]", st.Ino) {
		t.Errorf("process netns %s, want net:[%d]", link, st.Ino)
	}

	// Pod → pod across nodes: the server names itself and sees the
	// client pod's address.
	id := waitHTTP(t, h, names.PodOf(client), "http://10.244.0.2:8080/")
	if id.Cluster != "c1" || id.Pod != server.Name || id.Namespace != server.Namespace || id.PodIP != "10.244.0.2" {
		t.Errorf("reply %+v does not name the server pod", id)
	}
	if host, _, _ := net.SplitHostPort(id.Client); host != client.IP.String() {
		t.Errorf("server saw client %s, want %s", id.Client, client.IP)
	}

	// UDP echo the same way.
	err = h.Do(names.PodOf(client), func() error {
		conn, err := net.Dial("udp", "10.244.0.2:8080")
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 2048)
		n, err := conn.Read(buf)
		if err != nil {
			return err
		}
		var uid apps.Identity
		if err := json.Unmarshal(buf[:n], &uid); err != nil {
			return err
		}
		if uid.Pod != server.Name || uid.Echo != "ping" || !strings.HasPrefix(uid.Client, "10.244.1.2:") {
			return fmt.Errorf("UDP reply %+v", uid)
		}
		return nil
	})
	if err != nil {
		t.Errorf("UDP echo: %v", err)
	}

	// A pod reaches its own node's listeners at APIAddress, as a node
	// process does (the lab kubelet's API server forwarders).
	ln, err := h.Listen(names.Node("c1", "n1"), "tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("n1"))
			conn.Close()
		}
	}()
	for _, ns := range []string{names.PodOf(client), names.Node("c1", "n1")} {
		err = h.Do(ns, func() error {
			conn, err := net.DialTimeout("tcp", netip.AddrPortFrom(APIAddress, uint16(ln.Addr().(*net.TCPAddr).Port)).String(), 10*time.Second)
			if err != nil {
				return err
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			b, err := io.ReadAll(conn)
			if err != nil || string(b) != "n1" {
				return fmt.Errorf("read %q: %v, want n1's listener", b, err)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s → %s: %v", ns, APIAddress, err)
		}
	}

	// A real program (curl) started in the client pod reaches the server.
	curlLog := filepath.Join(t.TempDir(), "curl.log")
	curl, err := h.Start(Process{Netns: names.PodOf(client), Cgroup: cg.PodOf(client), Path: "curl", Args: []string{"-sS", "--max-time", "10", "http://10.244.0.2:8080/"}, LogPath: curlLog})
	if err != nil {
		t.Fatal(err)
	}
	if err := curl.Wait(); err != nil {
		out, _ := os.ReadFile(curlLog)
		t.Fatalf("curl: %v: %s", err, out)
	}
	if out, _ := os.ReadFile(curlLog); !strings.Contains(string(out), `"client":"10.244.1.2:`) || !strings.Contains(string(out), `"pod":"whereami-0"`) {
		t.Errorf("curl output %s", out)
	}

	// Unlike under `ip netns exec`, a started program sees the host's
	// cgroup file system (route agents attach BPF through it).
	probe, err := h.Start(Process{Netns: names.PodOf(client), Path: "test", Args: []string{"-d", cg.PodOf(client)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Wait(); err != nil {
		t.Errorf("%s not visible to a program started in the pod: %v", cg.PodOf(client), err)
	}

	// The node routes the service CIDR out of eth0 with its own source.
	err = h.withHandle(names.Node("c1", "n1"), func(nh *netlink.Handle, _ netns.NsHandle) error {
		rs, err := nh.RouteGet(net.ParseIP("10.96.0.1"))
		if err != nil {
			return err
		}
		eth0, err := nh.LinkByName(NodeLink)
		if err != nil {
			return err
		}
		if len(rs) != 1 || rs[0].LinkIndex != eth0.Attrs().Index || !rs[0].Src.Equal(net.ParseIP("172.18.1.11")) {
			return fmt.Errorf("route to 10.96.0.1: %+v", rs)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// Deleting the pod kills its process and removes its namespace.
	if err := h.DeletePod(server); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err == nil {
		t.Error("whereami exited cleanly; want killed")
	}
	if ns, _ := h.PodNetns("c1", "n0"); len(ns) != 0 {
		t.Errorf("pod namespaces left on n0: %v", ns)
	}
	if _, err := os.Stat(cg.PodOf(server)); !os.IsNotExist(err) {
		t.Errorf("pod cgroup still there: %v", err)
	}

	// Teardown removes everything, also from `ip netns list`.
	rep, err := h.Teardown()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Namespaces) != 4 { // switch, 2 nodes, client pod
		t.Errorf("teardown removed namespaces %v, want 4", rep.Namespaces)
	}
	left, err := h.Leftovers()
	if err != nil || !left.Empty() {
		t.Errorf("leftovers: %s %v", left, err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	if strings.Contains(string(out), h.prefix) {
		t.Errorf("ip netns list still shows the lab:\n%s", out)
	}
}

// serveIdentity answers every TCP connection accepted on l with the text
// "<cluster> <client address>".
func serveIdentity(t *testing.T, l net.Listener, cluster string) {
	testserve.Serve(t, l, func(c net.Conn) {
		fmt.Fprintf(c, "%s %s\n", cluster, c.RemoteAddr())
	})
}

// ask dials addr from ns and returns the first line it reads.
func ask(h *Host, ns, addr string) (string, error) {
	var line string
	err := h.Do(ns, func() error {
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		line = strings.TrimSpace(string(b))
		return err
	})
	return line, err
}

func TestTwoClustersSameCIDRsAndWAN(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	names := h.Names()
	var clusters []Cluster
	for i, name := range []string{"c1", "c2"} {
		c, err := NewCluster(ClusterSpec{Name: name, Index: i + 1, Nodes: 2, Gateways: 1})
		if err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c)
	}
	if clusters[0].PodCIDR != clusters[1].PodCIDR || clusters[0].ServiceCIDR != clusters[1].ServiceCIDR {
		t.Fatal("test wants identical pod and service CIDRs")
	}
	top := Topology{Prefix: h.prefix, WAN: DefaultWAN, Clusters: clusters}
	mustApply(t, h, top)

	// The same pod address in both clusters, each answering with its
	// cluster's name; clients in either cluster reach their own.
	for _, c := range clusters {
		srv := Pod{Cluster: c.Name, Node: "n1", Namespace: "kubecon", Name: "whereami", IP: netip.MustParseAddr("10.244.1.2")}
		cli := Pod{Cluster: c.Name, Node: "n0", Namespace: "kubecon", Name: "client", IP: netip.MustParseAddr("10.244.0.2")}
		for _, p := range []Pod{srv, cli} {
			if err := h.EnsurePod(p); err != nil {
				t.Fatal(err)
			}
		}
		l, err := h.Listen(names.PodOf(srv), "tcp", "10.244.1.2:8080")
		if err != nil {
			t.Fatal(err)
		}
		serveIdentity(t, l, c.Name)
	}
	for _, c := range clusters {
		got, err := ask(h, names.Pod(c.Name, "n0", "kubecon", "client"), "10.244.1.2:8080")
		if err != nil {
			t.Fatalf("%s client: %v", c.Name, err)
		}
		if !strings.HasPrefix(got, c.Name+" 10.244.0.2:") {
			t.Errorf("%s client got %q, want its own cluster's server seeing 10.244.0.2", c.Name, got)
		}
	}

	// Gateways reach each other over the WAN.
	l, err := h.Listen(names.Node("c2", "n0"), "tcp", "198.18.2.10:9000")
	if err != nil {
		t.Fatal(err)
	}
	serveIdentity(t, l, "c2-gw")
	got, err := ask(h, names.Node("c1", "n0"), "198.18.2.10:9000")
	if err != nil {
		t.Fatalf("gateway to gateway over WAN: %v", err)
	}
	if !strings.HasPrefix(got, "c2-gw 198.18.1.10:") {
		t.Errorf("WAN reply %q", got)
	}

	// Nothing leaks: non-gateways have no WAN, node networks are separate.
	l2, err := h.Listen(names.Node("c2", "n1"), "tcp", "172.18.2.11:9001")
	if err != nil {
		t.Fatal(err)
	}
	serveIdentity(t, l2, "c2-n1")
	for _, probe := range []struct{ from, addr string }{
		{names.Node("c1", "n1"), "198.18.2.10:9000"}, // non-gateway to the WAN
		{names.Node("c1", "n0"), "172.18.2.11:9001"}, // gateway to the other cluster's node network
		{names.Node("c1", "n1"), "172.18.2.11:9001"},
	} {
		if got, err := ask(h, probe.from, probe.addr); err == nil {
			t.Errorf("%s reached %s: %q", probe.from, probe.addr, got)
		}
	}
	ports := linkIndexes(t, h, names.Switch("c1"))
	if _, ok := ports["n0"]; !ok || len(ports) != 4 { // lo, br0, n0, n1
		t.Errorf("c1 switch links %v, want lo br0 n0 n1", ports)
	}
	if _, ok := linkIndexes(t, h, names.Node("c1", "n1"))[NodeWANLink]; ok {
		t.Error("non-gateway node has a WAN link")
	}

	// Dropping c2 from the topology removes its namespaces and cgroups and
	// keeps c1 with its pods.
	mustApply(t, h, Topology{Prefix: h.prefix, WAN: DefaultWAN, Clusters: clusters[:1]})
	if left, _ := h.ListNetns(names.Switch("c2")); len(left) != 0 {
		t.Errorf("c2 namespaces after pruning: %v", left)
	}
	if _, err := os.Stat(h.Cgroups().Cluster("c2")); !os.IsNotExist(err) {
		t.Errorf("c2 cgroup after pruning: %v", err)
	}
	if got, err := ask(h, names.Pod("c1", "n0", "kubecon", "client"), "10.244.1.2:8080"); err != nil || !strings.HasPrefix(got, "c1 ") {
		t.Errorf("c1 after pruning c2: %q %v", got, err)
	}
}
