package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.zx2c4.com/wireguard/wgctrl"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/internal/testserve"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/cable/drivers"
	"github.com/causeway-net/causeway/pkg/kube"
)

// Addresses of the test topology. Cluster c1 (two gateway candidates a and
// b) and cluster c3 (one gateway), joined by a bridged WAN.
var (
	c1Pods, c1Svcs = netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")
	c3Pods, c3Svcs = netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("10.97.0.0/16")
	wan1a, wan1b   = netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("198.18.0.12")
	wan3           = netip.MustParseAddr("198.18.0.13")
	pod1, pod3     = netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("10.245.0.2")
	// anycast1 is an address of c1 held by both candidates (on lo) with a
	// UDP echo server in each: the failover probe's target.
	anycast1 = netip.MustParseAddr("10.244.100.100")
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
}

type topo struct {
	id                           string
	wan, gw1a, gw1b, gw3, p1, p3 string
}

func (tp *topo) path(ns string) string { return "/run/netns/" + ns }
func (tp *topo) dev(s string) string   { return "gt" + tp.id + s }

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newNetns creates a namespace named prefix and a random suffix, with lo
// up, removed when t ends; it returns the name.
func newNetns(t *testing.T, prefix string) string {
	t.Helper()
	requireRoot(t)
	b := make([]byte, 3)
	rand.Read(b)
	ns := prefix + hex.EncodeToString(b)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

// newTopo creates the namespaces (removed when t ends): a WAN bridge, the
// three gateway namespaces on it, pod namespaces behind gw1a and gw3.
func newTopo(t *testing.T) *topo {
	requireRoot(t)
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	p := "gwt" + id + "-"
	tp := &topo{id: id, wan: p + "wan", gw1a: p + "gw1a", gw1b: p + "gw1b", gw3: p + "gw3", p1: p + "pod1", p3: p + "pod3"}
	for _, ns := range []string{tp.wan, tp.gw1a, tp.gw1b, tp.gw3, tp.p1, tp.p3} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", tp.wan, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", tp.wan, "link", "set", "br0", "up")
	for _, g := range []struct {
		ns   string
		addr netip.Addr
	}{{tp.gw1a, wan1a}, {tp.gw1b, wan1b}, {tp.gw3, wan3}} {
		port := strings.TrimPrefix(g.ns, p)
		run(t, "ip", "link", "add", "wan0", "netns", g.ns, "type", "veth", "peer", "name", port, "netns", tp.wan)
		run(t, "ip", "-n", tp.wan, "link", "set", port, "master", "br0", "up")
		run(t, "ip", "-n", g.ns, "addr", "add", g.addr.String()+"/24", "dev", "wan0")
		run(t, "ip", "-n", g.ns, "link", "set", "wan0", "up")
	}
	for _, pd := range []struct {
		gw, pod     string
		gwIP, podIP string
	}{{tp.gw1a, tp.p1, "10.244.0.1", pod1.String()}, {tp.gw3, tp.p3, "10.245.0.1", pod3.String()}} {
		run(t, "ip", "link", "add", "eth0", "netns", pd.pod, "type", "veth", "peer", "name", "pod0", "netns", pd.gw)
		run(t, "ip", "-n", pd.gw, "addr", "add", pd.gwIP+"/24", "dev", "pod0")
		run(t, "ip", "-n", pd.pod, "addr", "add", pd.podIP+"/24", "dev", "eth0")
		run(t, "ip", "-n", pd.gw, "link", "set", "pod0", "up")
		run(t, "ip", "-n", pd.pod, "link", "set", "eth0", "up")
		run(t, "ip", "-n", pd.pod, "route", "add", "default", "via", pd.gwIP)
	}
	for _, ns := range []string{tp.gw1a, tp.gw1b} {
		run(t, "ip", "-n", ns, "addr", "add", anycast1.String()+"/32", "dev", "lo")
		startUDPEcho(t, tp.path(ns), netip.AddrPortFrom(anycast1, 7777), ns)
	}
	return tp
}

// startUDPEcho answers every datagram on addr with name.
func startUDPEcho(t *testing.T, nsPath string, addr netip.AddrPort, name string) {
	var pc net.PacketConn
	err := netnsx.Do(nsPath, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", addr.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name), from)
		}
	}()
}

// tcpEcho listens in ns on addr and echoes lines back.
func tcpEcho(t *testing.T, nsPath string, addr netip.AddrPort) {
	var ln net.Listener
	if err := netnsx.Do(nsPath, func() error {
		var err error
		ln, err = net.Listen("tcp4", addr.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testserve.Serve(t, ln, func(c net.Conn) {
		s := bufio.NewScanner(c)
		for s.Scan() {
			fmt.Fprintln(c, s.Text())
		}
	})
}

// tcpRoundTrip dials addr from ns and checks one echoed line.
func tcpRoundTrip(nsPath string, addr netip.AddrPort) error {
	var c net.Conn
	if err := netnsx.Do(nsPath, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr.String(), 2*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintln(c, "hello"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "hello\n" {
		return fmt.Errorf("echo %q", line)
	}
	return nil
}

func eventually(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}

// env is the shared API servers of the integration tests.
type env struct {
	c1, c3, broker *kubetest.Cluster
	// identity is each cluster's broker identity (pkg/broker): it may
	// write only its own broker namespace.
	identity map[string]*rest.Config
	// local is the gateway's own ServiceAccount in each cluster, with the
	// least-privilege roles of the chart's templates/rbac.
	local map[string]*rest.Config
}

func startEnv(t *testing.T) *env {
	requireRoot(t)
	klog.SetSlogLogger(logger("client-go"))
	ctrllog.SetLogger(logr.FromSlogHandler(logger("controller-runtime").Handler()))
	cs := kubetest.StartMany(t, "c1", "c3", "broker")
	e := &env{c1: cs["c1"], c3: cs["c3"], broker: cs["broker"], identity: map[string]*rest.Config{}, local: map[string]*rest.Config{}}
	ctx := context.Background()
	for id, c := range map[string]*kubetest.Cluster{"c1": e.c1, "c3": e.c3} {
		if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "causeway-system"}}); err != nil {
			t.Fatal(err)
		}
		e.local[id] = c.DaemonConfig(t, "gateway")
	}
	for _, id := range []string{"c0", "c1", "c3", "c9"} {
		kc, err := broker.EnsureClusterIdentity(ctx, e.broker.Config, id)
		if err != nil {
			t.Fatal(err)
		}
		if e.identity[id], err = clientcmd.RESTConfigFromKubeConfig(kc); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// reset deletes every Causeway object and lease, between subtests.
func (e *env) reset(t *testing.T) {
	ctx := context.Background()
	for _, c := range []client.Client{e.c1.Client, e.c3.Client, e.broker.Client} {
		for _, obj := range []client.Object{&v1alpha1.Endpoint{}, &v1alpha1.Cluster{}, &v1alpha1.Gateway{}, &v1alpha1.CIDRClaim{}} {
			for _, ns := range []string{"causeway-system", "cluster-c0", "cluster-c1", "cluster-c3", "cluster-c9"} {
				if err := c.DeleteAllOf(ctx, obj, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
					t.Logf("reset: %v", err)
				}
			}
		}
	}
	for _, c := range []*kubetest.Cluster{e.c1, e.c3} {
		c.Kube.CoordinationV1().Leases("causeway-system").Delete(ctx, kube.GatewayLease, metav1.DeleteOptions{})
	}
}

// gw is one engine running in-process.
type gw struct {
	e      *Engine
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, once done is closed
}

// series returns the values of metric name in the candidate's registry,
// keyed by their labels ("k=v,k=v"; "" without labels).
func (g *gw) series(t *testing.T, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.e.cfg.Metrics.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

func (g *gw) stop(t *testing.T) {
	g.cancel()
	select {
	case <-g.done:
		if g.err != nil && g.err != context.Canceled {
			t.Errorf("engine stopped with %v", g.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("engine did not stop")
	}
}

func logger(name string) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("GATEWAY_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("engine", name)
}

func (e *env) startGateway(t *testing.T, tp *topo, driver, cluster, node, ns, dev string, pub, health netip.Addr, release bool) *gw {
	return e.startGatewayVia(t, e.local[cluster], tp, driver, cluster, node, ns, dev, pub, health, release)
}

// startGatewayVia starts a gateway whose local API client uses local
// (e.g. through a proxy the test can cut).
func (e *env) startGatewayVia(t *testing.T, local *rest.Config, tp *topo, driver, cluster, node, ns, dev string, pub, health netip.Addr, release bool) *gw {
	cfg := Config{
		ClusterID: cluster, NodeName: node, Namespace: "causeway-system",
		// The WAN is the candidates' only shared network: they probe
		// each other there.
		PublicIP: pub, PrivateIP: pub, CandidateProbePort: DefaultCandidateProbePort,
		Port: 4500, CableDriver: driver, TunnelDevice: tp.dev(dev),
		StateDir: t.TempDir(), Netns: tp.path(ns), HealthCheckIP: health,
		HealthInterval: 200 * time.Millisecond, ReleaseOnStop: release,
		Drivers: drivers.Registry(), Metrics: prometheus.NewRegistry(), Log: logger(node),
	}
	switch cluster {
	case "c1":
		cfg.PodCIDRs, cfg.ServiceCIDRs = []netip.Prefix{c1Pods}, []netip.Prefix{c1Svcs}
	case "c3":
		cfg.PodCIDRs, cfg.ServiceCIDRs = []netip.Prefix{c3Pods}, []netip.Prefix{c3Svcs}
	}
	cfg.Local, cfg.Broker = local, e.identity[cluster]
	en, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &gw{e: en, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		g.err = en.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-g.done
	})
	return g
}

func validCond(conds []metav1.Condition) *metav1.Condition {
	return meta.FindStatusCondition(conds, v1alpha1.ConditionValid)
}

func waitEndpointValid(t *testing.T, c client.Client, name string, want metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, "endpoint "+name+" Valid="+string(want), time.Minute, func() error {
		ep := &v1alpha1.Endpoint{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "causeway-system", Name: name}, ep); err != nil {
			return err
		}
		cond := validCond(ep.Status.Conditions)
		if cond == nil || cond.Status != want || cond.Reason != reason {
			return fmt.Errorf("condition %+v", cond)
		}
		return nil
	})
}

func gatewayObj(t *testing.T, c client.Client, node string) (*v1alpha1.Gateway, error) {
	gw := &v1alpha1.Gateway{}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: "causeway-system", Name: node}, gw)
	return gw, err
}

func TestGatewayEngine(t *testing.T) {
	requireRoot(t)
	env := startEnv(t)
	for _, driver := range []string{"wireguard", "vxlan"} {
		t.Run(driver, func(t *testing.T) {
			env.reset(t)
			tp := newTopo(t)
			testEngine(t, env, tp, driver)
		})
	}
}

func testEngine(t *testing.T, env *env, tp *topo, driver string) {
	ctx := context.Background()
	health1a, health1b, health3 := netip.MustParseAddr("10.244.255.1"), netip.MustParseAddr("10.244.255.2"), netip.MustParseAddr("10.245.255.1")
	// c9, a member without a gateway here, joined before c1 and c3: its
	// Cluster and its claim on its pod CIDR are the oldest of the
	// broker (creation times count in seconds).
	c9, err := client.New(env.identity["c9"], client.Options{Scheme: env.broker.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	c9Cluster := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: brokerNamespace("c9"), Name: "c9"},
		Spec:       v1alpha1.ClusterSpec{ClusterID: "c9", PodCIDRs: []string{"10.9.0.0/16"}, ServiceCIDRs: []string{"10.109.0.0/16"}},
	}
	if err := c9.Create(ctx, c9Cluster); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"10.9.0.0/16", "10.109.0.0/16"} {
		if err := c9.Create(ctx, c9Claim("c9", p)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond)

	start := time.Now()
	a := env.startGateway(t, tp, driver, "c1", "c1-gw-a", tp.gw1a, "1a", wan1a, health1a, true)
	g3 := env.startGateway(t, tp, driver, "c3", "c3-gw", tp.gw3, "3", wan3, health3, true)

	// Both clusters publish and mirror each other (and themselves).
	for _, c := range []client.Client{env.c1.Client, env.c3.Client} {
		waitEndpointValid(t, c, "c1", metav1.ConditionTrue, v1alpha1.ReasonValid)
		waitEndpointValid(t, c, "c3", metav1.ConditionTrue, v1alpha1.ReasonValid)
	}
	tcpEcho(t, tp.path(tp.p3), netip.AddrPortFrom(pod3, 8080))
	tcpEcho(t, tp.path(tp.p1), netip.AddrPortFrom(pod1, 8080))
	eventually(t, "pod1 -> pod3 TCP", time.Minute, func() error { return tcpRoundTrip(tp.path(tp.p1), netip.AddrPortFrom(pod3, 8080)) })
	t.Logf("%s: engines started -> first TCP round trip pod1->pod3: %s", driver, time.Since(start).Round(time.Millisecond))
	if err := tcpRoundTrip(tp.path(tp.p3), netip.AddrPortFrom(pod1, 8080)); err != nil {
		t.Fatalf("pod3 -> pod1: %v", err)
	}

	// Gateway status: active, connected to c3 with health-check RTTs.
	eventually(t, "c1-gw-a status connected", time.Minute, func() error {
		g, err := gatewayObj(t, env.c1.Client, "c1-gw-a")
		if err != nil {
			return err
		}
		if g.Status.HAStatus != v1alpha1.HAStatusActive || len(g.Status.Connections) != 1 {
			return fmt.Errorf("status %+v", g.Status)
		}
		c := g.Status.Connections[0]
		if c.ClusterID != "c3" || c.Status != v1alpha1.Connected || c.LatencyRTT == nil || c.LatencyRTT.Average == "" {
			return fmt.Errorf("connection %+v", c)
		}
		if driver == "wireguard" && c.LastHandshake == nil {
			return fmt.Errorf("no handshake time: %+v", c)
		}
		return nil
	})
	if g, _ := gatewayObj(t, env.c1.Client, "c1-gw-a"); g != nil && len(g.Status.Connections) == 1 {
		t.Logf("%s: c1-gw-a -> c3 %s rtt %+v", driver, g.Status.Connections[0].Status, *g.Status.Connections[0].LatencyRTT)
	}
	// Its metrics, read from the driver and the device at scrape time:
	// the device counted the traffic; WireGuard also per remote, with
	// the handshake; VXLAN counts nothing per remote.
	if got := a.series(t, "causeway_gateway_tunnel_device_receive_packets_total")["device="+tp.dev("1a")]; got == 0 {
		t.Errorf("%s: tunnel device received no packets: %v", driver, a.series(t, "causeway_gateway_tunnel_device_receive_packets_total"))
	}
	rx, hs := a.series(t, "causeway_gateway_tunnel_receive_bytes_total"), a.series(t, "causeway_gateway_tunnel_last_handshake_timestamp_seconds")
	switch driver {
	case "wireguard":
		if rx["remote_cluster=c3"] == 0 || hs["remote_cluster=c3"] < float64(start.Unix()) {
			t.Errorf("wireguard: bytes from c3 %v, handshake %v", rx, hs)
		}
	case "vxlan":
		if len(rx) != 0 || len(hs) != 0 {
			t.Errorf("vxlan: per-remote bytes %v or handshake %v", rx, hs)
		}
	}

	// A bad remote: c9 announces the default route. The broker's
	// admission refuses it from c9's own identity (pkg/broker
	// TestMemberBounds); written by the broker's administrator instead,
	// as a broker without that admission would take it, it is refused
	// with a condition and an event in both clusters, nothing
	// programmed, c3 unaffected.
	bad := &v1alpha1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: brokerNamespace("c9"), Name: "c9"},
		Spec: v1alpha1.EndpointSpec{ClusterID: "c9", Hostname: "evil", CableDriver: v1alpha1.CableDriver(driver),
			PublicIP: "198.18.0.99", Port: 4500, PublicKey: keyA, Subnets: []string{"0.0.0.0/0"}},
	}
	if err := c9.Create(ctx, bad.DeepCopy()); !apierrors.IsForbidden(err) {
		t.Fatalf("c9 announces the default route: err=%v, want Forbidden by the broker", err)
	}
	if err := env.broker.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*kubetest.Cluster{env.c1, env.c3} {
		waitEndpointValid(t, c.Client, "c9", metav1.ConditionFalse, v1alpha1.ReasonInvalidCIDR)
		eventually(t, "event for c9", time.Minute, func() error {
			evs, err := c.Kube.CoreV1().Events("causeway-system").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, ev := range evs.Items {
				if ev.InvolvedObject.Name == "c9" && ev.InvolvedObject.Kind == "Endpoint" && ev.Reason == v1alpha1.ReasonInvalidCIDR && ev.Type == corev1.EventTypeWarning {
					return nil
				}
			}
			return fmt.Errorf("no InvalidCIDR event among %d", len(evs.Items))
		})
	}
	for _, ns := range []string{tp.gw1a, tp.gw3} {
		out, _ := exec.Command("ip", "-n", ns, "route", "show", "table", "all").CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "default") || strings.Contains(line, "198.18.0.99") {
				t.Errorf("%s: route for the refused remote: %s", ns, line)
			}
		}
	}
	if err := tcpRoundTrip(tp.path(tp.p1), netip.AddrPortFrom(pod3, 8080)); err != nil {
		t.Fatalf("c3 broken by the bad remote: %v", err)
	}
	refusedC9 := "kind=Endpoint,reason=" + v1alpha1.ReasonInvalidCIDR + ",remote_cluster=c9"
	eventually(t, "c9 reported refused", 10*time.Second, func() error {
		if got := a.series(t, "causeway_gateway_remote_refused"); got[refusedC9] != 1 || len(got) != 1 {
			return fmt.Errorf("refused remotes %v, want only %s", got, refusedC9)
		}
		return nil
	})
	if err := env.broker.Client.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	eventually(t, "mirror of c9 removed", time.Minute, func() error {
		err := env.c1.Client.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: "c9"}, &v1alpha1.Endpoint{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	eventually(t, "no remote reported refused", 10*time.Second, func() error {
		if got := a.series(t, "causeway_gateway_remote_refused"); len(got) != 0 {
			return fmt.Errorf("refused remotes after the bad Endpoint went: %v", got)
		}
		return nil
	})

	testLateOverlap(t, env, tp, c9, c9Cluster, driver)
	if driver == "wireguard" {
		testKeySquat(t, env, tp)
	}

	// Failover. Candidate b joins as passive and holds no tunnel.
	// b never releases its lease: stopping it below simulates a crash.
	b := env.startGateway(t, tp, driver, "c1", "c1-gw-b", tp.gw1b, "1b", wan1b, health1b, false)
	eventually(t, "c1-gw-b passive", time.Minute, func() error {
		g, err := gatewayObj(t, env.c1.Client, "c1-gw-b")
		if err != nil {
			return err
		}
		if g.Status.HAStatus != v1alpha1.HAStatusPassive || len(g.Status.Connections) != 0 {
			return fmt.Errorf("status %+v", g.Status)
		}
		return nil
	})
	if out, _ := exec.Command("ip", "-n", tp.gw1b, "link", "show", tp.dev("1b")).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("passive candidate has a tunnel device: %s", out)
	}
	if got := b.series(t, "causeway_gateway_tunnel_device_receive_packets_total"); len(got) != 0 {
		t.Errorf("passive candidate reports a tunnel device: %v", got)
	}

	probe := startProbe(t, tp.path(tp.p3), netip.AddrPortFrom(anycast1, 7777))
	probe.waitFrom(t, tp.gw1a)

	// 1. Clean stop of the active (SIGTERM path: lease released).
	t0 := time.Now()
	active := roleAt(b.e, v1alpha1.HAStatusActive)
	a.stop(t)
	probe.waitFrom(t, tp.gw1b)
	gap := probe.gapSince(t0)
	t.Logf("FIGURE %s failover, clean stop of the active (lease released): traffic gap %s (b active after %s)",
		driver, gap.Round(time.Millisecond), (<-active).Sub(t0).Round(time.Millisecond))
	if b.e.Role() != v1alpha1.HAStatusActive {
		t.Errorf("b is %s after a stopped", b.e.Role())
	}
	// With a successor, a stop removes the tunnel like a lost term (a
	// kernel device kept for adoption would hold a's pods on its routes).
	if out, _ := exec.Command("ip", "-n", tp.gw1a, "link", "show", tp.dev("1a")).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("c1-gw-a stopped with a successor, its tunnel device stays: %s", out)
	}
	waitEndpointValid(t, env.c3.Client, "c1", metav1.ConditionTrue, v1alpha1.ReasonValid)
	if driver == "wireguard" {
		// Each candidate has its own key: b's claim came with its term,
		// a's stays (a node releases only its own stale claims).
		eventually(t, "tunnel keys of both c1 candidates", time.Minute, func() error {
			var keys v1alpha1.TunnelKeyList
			if err := env.broker.Client.List(ctx, &keys, client.MatchingLabels{v1alpha1.LabelClusterID: "c1"}); err != nil {
				return err
			}
			nodes := map[string]int{}
			for _, k := range keys.Items {
				nodes[k.Labels[v1alpha1.LabelNode]]++
			}
			if nodes["c1-gw-a"] != 1 || nodes["c1-gw-b"] != 1 {
				return fmt.Errorf("claims per node %v, want one each for c1-gw-a and c1-gw-b", nodes)
			}
			return nil
		})
	}

	// 2. Crash of the active (no release: the lease must expire). a comes
	// back as a passive candidate first.
	b2 := b
	a = env.startGateway(t, tp, driver, "c1", "c1-gw-a", tp.gw1a, "1a", wan1a, health1a, true)
	eventually(t, "c1-gw-a passive again", time.Minute, func() error {
		if a.e.Role() != v1alpha1.HAStatusPassive {
			return fmt.Errorf("role %s", a.e.Role())
		}
		g, err := gatewayObj(t, env.c1.Client, "c1-gw-a")
		if err != nil {
			return err
		}
		if g.Status.HAStatus != v1alpha1.HAStatusPassive {
			return fmt.Errorf("status %s", g.Status.HAStatus)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // a steady stream from b before the crash
	// The node dies: its WAN link goes down (a VXLAN tunnel would
	// otherwise keep forwarding in the kernel without the process) and
	// the process stops without releasing the lease.
	t0 = time.Now()
	active = roleAt(a.e, v1alpha1.HAStatusActive)
	run(t, "ip", "-n", tp.gw1b, "link", "set", "wan0", "down")
	b2.stop(t)
	probe.waitFrom(t, tp.gw1a)
	gap = probe.gapSince(t0)
	t.Logf("FIGURE %s failover, node failure of the active (no release: candidate probes, else lease expiry): traffic gap %s (a active after %s)",
		driver, gap.Round(time.Millisecond), (<-active).Sub(t0).Round(time.Millisecond))
	probe.close()
	probe.mu.Lock()
	t.Logf("%s: probe sent %d, answered %d", driver, probe.sent, len(probe.replies))
	probe.mu.Unlock()

	// SIGTERM path of c3: kernel state stays for adoption (VXLAN), the
	// process-owned WireGuard device goes; then --cleanup removes the
	// rest and c3's objects.
	g3.stop(t)
	out, _ := exec.Command("ip", "-n", tp.gw3, "link", "show", tp.dev("3")).CombinedOutput()
	if exists := !strings.Contains(string(out), "does not exist"); exists != (driver == "vxlan") {
		t.Errorf("after stop, tunnel device present = %v: %s", exists, out)
	}
	cfg := g3.e.cfg
	cfg.Metrics = nil
	cl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Cleanup(ctx); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if out, _ := exec.Command("ip", "-n", tp.gw3, "link", "show", tp.dev("3")).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("device left after cleanup: %s", out)
	}
	if out, _ := exec.Command("ip", "-n", tp.gw3, "route", "show", "proto", "157").CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("routes left after cleanup: %s", out)
	}
	if err := env.broker.Client.Get(ctx, client.ObjectKey{Namespace: brokerNamespace("c3"), Name: "c3"}, &v1alpha1.Endpoint{}); !apierrors.IsNotFound(err) {
		t.Errorf("broker endpoint after cleanup: %v", err)
	}
	if _, err := gatewayObj(t, env.c3.Client, "c3-gw"); !apierrors.IsNotFound(err) {
		t.Errorf("gateway object after cleanup: %v", err)
	}
}

// testKeySquat: a member (c0, whose ID sorts before every other) copies
// c3's published WireGuard key into its own Endpoint, with only its own
// broker identity. It cannot take or drop c3's claim on the key; c1 and
// c3 refuse c0's Endpoint (Valid=False KeyInUse, Warning Event) and c1
// keeps its peer to c3 as it was, and traffic flows. Then a stale claim
// of c1-gw-a (a key it no longer holds) is released by the active a,
// while the claim of another c1 node stays.
func testKeySquat(t *testing.T, env *env, tp *topo) {
	ctx := context.Background()
	victim := &v1alpha1.Endpoint{}
	if err := env.broker.Client.Get(ctx, client.ObjectKey{Namespace: brokerNamespace("c3"), Name: "c3"}, victim); err != nil {
		t.Fatal(err)
	}
	key := victim.Spec.PublicKey
	claim := &v1alpha1.TunnelKey{}
	if err := env.broker.Client.Get(ctx, client.ObjectKey{Name: broker.TunnelKeyName(key)}, claim); err != nil {
		t.Fatalf("c3's tunnel key claim: %v", err)
	}
	if claim.Spec.ClusterID != "c3" || claim.Labels[v1alpha1.LabelNode] != "c3-gw" {
		t.Fatalf("c3's tunnel key claim: %+v", claim)
	}
	before := wgPeers(t, tp.path(tp.gw1a), tp.dev("1a"))
	if before[key] != netip.AddrPortFrom(wan3, 4500).String() {
		t.Fatalf("c1's peers before the squat: %v, want c3's key at %s", before, wan3)
	}

	c0, err := client.New(env.identity["c0"], client.Options{Scheme: env.broker.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	mine := &v1alpha1.TunnelKey{
		ObjectMeta: metav1.ObjectMeta{Name: broker.TunnelKeyName(key), Labels: map[string]string{v1alpha1.LabelClusterID: "c0", v1alpha1.LabelNode: "evil"}},
		Spec:       v1alpha1.TunnelKeySpec{ClusterID: "c0", PublicKey: key},
	}
	if err := c0.Create(ctx, mine); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("c0 claims c3's key: err=%v, want AlreadyExists", err)
	}
	if err := c0.Delete(ctx, claim); !apierrors.IsForbidden(err) {
		t.Fatalf("c0 deletes c3's key claim: err=%v, want Forbidden", err)
	}
	squat := &v1alpha1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: brokerNamespace("c0"), Name: "c0"},
		Spec: v1alpha1.EndpointSpec{ClusterID: "c0", Hostname: "evil", CableDriver: v1alpha1.CableWireGuard,
			PublicIP: "198.18.0.98", Port: 4500, PublicKey: key, Subnets: []string{"10.250.0.0/16"}},
	}
	if err := c0.Create(ctx, squat); err != nil {
		t.Fatalf("c0 publishes its endpoint: %v", err)
	}
	for _, c := range []*kubetest.Cluster{env.c1, env.c3} {
		waitEndpointValid(t, c.Client, "c0", metav1.ConditionFalse, v1alpha1.ReasonKeyInUse)
		eventually(t, "KeyInUse event for c0", time.Minute, func() error {
			evs, err := c.Kube.CoreV1().Events("causeway-system").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, ev := range evs.Items {
				if ev.InvolvedObject.Name == "c0" && ev.InvolvedObject.Kind == "Endpoint" && ev.Reason == v1alpha1.ReasonKeyInUse && ev.Type == corev1.EventTypeWarning {
					return nil
				}
			}
			return fmt.Errorf("no KeyInUse event among %d", len(evs.Items))
		})
	}
	waitEndpointValid(t, env.c1.Client, "c3", metav1.ConditionTrue, v1alpha1.ReasonValid)
	if after := wgPeers(t, tp.path(tp.gw1a), tp.dev("1a")); !maps.Equal(after, before) {
		t.Errorf("c1's peers after the squat: %v, want %v", after, before)
	}
	if err := tcpRoundTrip(tp.path(tp.p1), netip.AddrPortFrom(pod3, 8080)); err != nil {
		t.Errorf("pod1 -> pod3 after the squat: %v", err)
	}
	if err := env.broker.Client.Delete(ctx, squat); err != nil {
		t.Fatal(err)
	}

	// Stale claims: one of c1-gw-a on a key it no longer holds, one of
	// another c1 node.
	c1, err := client.New(env.identity["c1"], client.Options{Scheme: env.broker.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	stale := func(node string, b byte) *v1alpha1.TunnelKey {
		pub := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32))
		return &v1alpha1.TunnelKey{
			ObjectMeta: metav1.ObjectMeta{Name: broker.TunnelKeyName(pub), Labels: map[string]string{v1alpha1.LabelClusterID: "c1", v1alpha1.LabelNode: node}},
			Spec:       v1alpha1.TunnelKeySpec{ClusterID: "c1", PublicKey: pub},
		}
	}
	old, other := stale("c1-gw-a", 1), stale("c1-gw-z", 2)
	for _, k := range []*v1alpha1.TunnelKey{old, other} {
		if err := c1.Create(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "c1-gw-a's stale claim released", time.Minute, func() error {
		err := env.broker.Client.Get(ctx, client.ObjectKeyFromObject(old), &v1alpha1.TunnelKey{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	if err := env.broker.Client.Get(ctx, client.ObjectKeyFromObject(other), &v1alpha1.TunnelKey{}); err != nil {
		t.Errorf("another node's claim: %v, want kept", err)
	}
	if err := c1.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
}

// wgPeers returns the WireGuard peers of dev in the namespace at nsPath:
// public key → endpoint.
func wgPeers(t *testing.T, nsPath, dev string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := netnsx.Do(nsPath, func() error {
		wg, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer wg.Close()
		d, err := wg.Device(dev)
		if err != nil {
			return err
		}
		for _, p := range d.Peers {
			ep := ""
			if p.Endpoint != nil {
				a := p.Endpoint.AddrPort()
				ep = netip.AddrPortFrom(a.Addr().Unmap(), a.Port()).String()
			}
			out[p.PublicKey.String()] = ep
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wireguard peers of %s: %v", dev, err)
	}
	return out
}

// roleAt reports when e reaches role (polled every 2 ms).
func roleAt(e *Engine, role v1alpha1.HAStatus) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		for e.Role() != role {
			time.Sleep(2 * time.Millisecond)
		}
		ch <- time.Now()
	}()
	return ch
}

// probe sends a UDP datagram every 5 ms and records who answered when.
type probe struct {
	mu      sync.Mutex
	replies []reply
	sent    int
	conn    net.Conn
	stopped chan struct{}
}

type reply struct {
	at   time.Time
	from string
}

func startProbe(t *testing.T, nsPath string, to netip.AddrPort) *probe {
	p := &probe{stopped: make(chan struct{})}
	if err := netnsx.Do(nsPath, func() error {
		var err error
		p.conn, err = net.Dial("udp4", to.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := p.conn.Read(buf)
			if err != nil {
				select {
				case <-p.stopped:
					return
				default:
				}
				continue // ICMP errors surface as read errors on a connected socket
			}
			p.mu.Lock()
			p.replies = append(p.replies, reply{time.Now(), string(buf[:n])})
			p.mu.Unlock()
		}
	}()
	go func() {
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-p.stopped:
				return
			case <-tk.C:
				p.conn.Write([]byte("ping"))
				p.mu.Lock()
				p.sent++
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *probe) close() {
	select {
	case <-p.stopped:
	default:
		close(p.stopped)
		p.conn.Close()
	}
}

// waitFrom waits until answers come from the named gateway namespace.
func (p *probe) waitFrom(t *testing.T, name string) {
	t.Helper()
	eventually(t, "probe answered by "+name, time.Minute, func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		if n := len(p.replies); n > 0 && p.replies[n-1].from == name {
			return nil
		}
		return fmt.Errorf("last answers: %v", p.lastFrom(3))
	})
}

func (p *probe) lastFrom(n int) []string {
	var out []string
	for i := max(0, len(p.replies)-n); i < len(p.replies); i++ {
		out = append(out, p.replies[i].from)
	}
	return out
}

// gapSince is the longest silence between answers after t0 (including the
// time from t0 to the first answer after it).
func (p *probe) gapSince(t0 time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(p.replies, t0, func(r reply, t time.Time) int { return r.at.Compare(t) })
	prev := t0
	if i > 0 {
		prev = p.replies[i-1].at
	}
	var gap time.Duration
	for ; i < len(p.replies); i++ {
		gap = max(gap, p.replies[i].at.Sub(prev))
		prev = p.replies[i].at
	}
	return gap
}

// c9Claim is member id's CIDRClaim on cidr.
func c9Claim(id, cidr string) *v1alpha1.CIDRClaim {
	return &v1alpha1.CIDRClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: brokerNamespace(id), Name: addrpolicy.CIDRClaimName(netip.MustParsePrefix(cidr))},
		Spec:       v1alpha1.CIDRClaimSpec{CIDR: cidr, ClusterID: id},
	}
}

// testLateOverlap: c9, the oldest member, with only its own broker
// identity, adds c3's pod CIDR to its Cluster and Endpoint. c1 keeps
// routing it to c3 (pod1 -> pod3), and accepts c9 for its own CIDRs
// only, saying why the other was left out: first unclaimed, then
// claimed, but later than c3's claim. c9 cannot forge an older claim:
// not in c3's namespace, not in c3's name.
func testLateOverlap(t *testing.T, env *env, tp *topo, c9 client.Client, cluster *v1alpha1.Cluster, driver string) {
	ctx := context.Background()
	if err := c9.Create(ctx, c9Claim("c3", c3Pods.String())); !apierrors.IsForbidden(err) {
		t.Fatalf("c9 claims in c3's namespace: err=%v, want Forbidden", err)
	}
	forged := c9Claim("c9", "10.8.0.0/16")
	forged.Spec.ClusterID = "c3"
	if err := c9.Create(ctx, forged); !apierrors.IsForbidden(err) {
		t.Fatalf("c9 claims in c3's name: err=%v, want Forbidden", err)
	}

	cluster.Spec.PodCIDRs = []string{"10.9.0.0/16", c3Pods.String()}
	if err := c9.Update(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	// With wireguard, c9's key must be claimed in its name (else its
	// Endpoint is refused: KeyInUse).
	key := &v1alpha1.TunnelKey{
		ObjectMeta: metav1.ObjectMeta{Name: broker.TunnelKeyName(keyB), Labels: map[string]string{v1alpha1.LabelClusterID: "c9", v1alpha1.LabelNode: "c9-gw"}},
		Spec:       v1alpha1.TunnelKeySpec{ClusterID: "c9", PublicKey: keyB},
	}
	if driver == "wireguard" {
		if err := c9.Create(ctx, key); err != nil {
			t.Fatalf("c9 claims its tunnel key: %v", err)
		}
	}
	ep := &v1alpha1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: brokerNamespace("c9"), Name: "c9"},
		Spec: v1alpha1.EndpointSpec{ClusterID: "c9", Hostname: "c9-gw", CableDriver: v1alpha1.CableDriver(driver),
			PublicIP: "198.18.0.99", Port: 4500, PublicKey: keyB, Subnets: []string{"10.9.0.0/16", "10.109.0.0/16", c3Pods.String()}},
	}
	if err := c9.Create(ctx, ep); err != nil {
		t.Fatal(err)
	}
	leftOut := func(reason, why string) {
		t.Helper()
		eventually(t, "c1's mirror of c9 leaves out "+c3Pods.String()+" ("+reason+")", time.Minute, func() error {
			var cl v1alpha1.Cluster
			if err := env.c1.Client.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: "c9"}, &cl); err != nil {
				return err
			}
			cond := validCond(cl.Status.Conditions)
			if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "left out: "+c3Pods.String()+" "+why) {
				return fmt.Errorf("cluster condition %+v", cond)
			}
			var mep v1alpha1.Endpoint
			if err := env.c1.Client.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: "c9"}, &mep); err != nil {
				return err
			}
			if cond := validCond(mep.Status.Conditions); cond == nil || cond.Status != metav1.ConditionTrue ||
				!slices.Equal(mep.Spec.Subnets, []string{"10.9.0.0/16", "10.109.0.0/16"}) {
				return fmt.Errorf("endpoint subnets %v, condition %+v", mep.Spec.Subnets, cond)
			}
			return nil
		})
		waitEndpointValid(t, env.c1.Client, "c3", metav1.ConditionTrue, v1alpha1.ReasonValid)
		if err := tcpRoundTrip(tp.path(tp.p1), netip.AddrPortFrom(pod3, 8080)); err != nil {
			t.Fatalf("c1 -> c3 after c9 announced %s (%s): %v", c3Pods, reason, err)
		}
	}
	leftOut(v1alpha1.ReasonCIDRNotClaimed, "is not claimed by cluster \"c9\"")
	if err := c9.Create(ctx, c9Claim("c9", c3Pods.String())); err != nil {
		t.Fatal(err)
	}
	leftOut(v1alpha1.ReasonOverlappingCIDR, "(claimed")
	var last v1alpha1.Cluster
	if err := env.c1.Client.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: "c9"}, &last); err == nil {
		if cond := validCond(last.Status.Conditions); cond != nil && !strings.Contains(cond.Message, `claimed earlier by cluster "c3"`) {
			t.Errorf("c9's condition does not name c3's older claim: %s", cond.Message)
		}
	}

	// c9 goes (as the broker's administrator removes a member's objects).
	for _, obj := range []client.Object{&v1alpha1.Endpoint{}, &v1alpha1.Cluster{}, &v1alpha1.CIDRClaim{}} {
		if err := env.broker.Client.DeleteAllOf(ctx, obj, client.InNamespace(brokerNamespace("c9"))); err != nil {
			t.Fatal(err)
		}
	}
	if driver == "wireguard" {
		if err := env.broker.Client.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "mirror of c9's endpoint removed", time.Minute, func() error {
		err := env.c1.Client.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: "c9"}, &v1alpha1.Endpoint{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
}
