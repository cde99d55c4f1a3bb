package routeagent

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/clusterset"
)

// The route agent as the lab runs it: a process per node namespace with
// the flags from README.md, reaching the API server through a forwarder
// on the node's 127.0.0.1:6443. Traffic follows a failover, /metrics
// reports the routes, SIGTERM stops it leaving the node programmed, and
// `--cleanup` removes everything.
func TestDaemonProcessInLabNodes(t *testing.T) {
	tb := newTestbed(t)
	kc := kubetest.Start(t, "raproc")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cl := kc.Client
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "causeway-system"}}); err != nil {
		t.Fatal(err)
	}
	// The ClusterSet policy as the gateway mirrors it: the agent waits for it.
	if err := clusterset.Store(ctx, cl, addrpolicy.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	localEP := endpoint("c1", "n0", tb.nodeIP("n0").String(), "10.244.0.0/16", "10.96.0.0/16")
	remote := endpoint("c3", "g3", "", remoteSubnet.String())
	for _, ep := range []*v1alpha1.Endpoint{localEP, remote} {
		if err := cl.Create(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	setValid(remote, true)
	if err := cl.Status().Update(ctx, remote); err != nil {
		t.Fatal(err)
	}
	kubeconfig := kc.DaemonKubeconfig(t, "route-agent", "https://127.0.0.1:6443")
	apiAddr := strings.TrimPrefix(kc.URL, "https://")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			for _, n := range []string{"n0", "n1", "n2"} {
				b, _ := os.ReadFile(filepath.Join(logDir, n+".log"))
				t.Logf("%s log:\n%s", n, b)
			}
		}
	})

	start := func(node string, extra ...string) *exec.Cmd {
		t.Helper()
		args := append([]string{"--kubeconfig", kubeconfig, "--cluster-id", "c1", "--node-name", node,
			"--node-ip", tb.nodeIP(node).String(), "--pod-cidrs", "10.244.0.0/16", "--service-cidrs", "10.96.0.0/16",
			"--tunnel-mtu", "1420", "--metrics-addr", "127.0.0.1:9532",
			// The VIP datapath is tested in pkg/vip and the lab e2e.
			"--vip=false"}, extra...)
		cmd, err := tb.h.Start(netlab.Process{Netns: tb.nodeNS(node), Cgroup: tb.h.Cgroups().NodeSystem("c1", node),
			Path: self, Args: args, Env: append(os.Environ(), mainEnv+"=1"), LogPath: filepath.Join(logDir, node+".log")})
		if err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	procs := map[string]*exec.Cmd{}
	for _, n := range []string{"n0", "n1", "n2"} {
		ln, err := tb.h.Listen(tb.nodeNS(n), "tcp", "127.0.0.1:6443")
		if err != nil {
			t.Fatal(err)
		}
		go netlab.Forward(ctx, ln, func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", apiAddr)
		}, nil)
		procs[n] = start(n)
		t.Cleanup(func() { procs[n].Process.Kill(); procs[n].Wait() })
	}

	waitGreeting := func(prefix string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		var last string
		var lastErr error
		for time.Now().Before(deadline) {
			if last, lastErr = tb.dialRemote(t); lastErr == nil && strings.HasPrefix(last, prefix) {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no greeting from %s: last %q, %v", prefix, last, lastErr)
	}
	waitGreeting("n0 ")
	localEP.Spec.Hostname, localEP.Spec.PrivateIP = "n1", tb.nodeIP("n1").String()
	if err := cl.Update(ctx, localEP); err != nil {
		t.Fatal(err)
	}
	waitGreeting("n1 ")

	metrics := tb.get(t, "n2", "http://127.0.0.1:9532/metrics")
	for _, want := range []string{"causeway_route_agent_routes_programmed 1", "causeway_route_agent_gateway_changes_total 1",
		"causeway_route_agent_sync_duration_seconds_count", "causeway_route_agent_last_sync_success_timestamp_seconds"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if ready := tb.get(t, "n2", "http://127.0.0.1:9532/readyz"); !strings.Contains(strings.ToLower(ready), "ok") {
		t.Errorf("/readyz: %s", ready)
	}

	// SIGTERM: the process stops, the node stays programmed (restart
	// without interruption); --cleanup then removes everything.
	for n, p := range procs {
		p.Process.Signal(syscall.SIGTERM)
		if err := p.Wait(); err != nil {
			t.Errorf("%s: exit after SIGTERM: %v", n, err)
		}
	}
	if _, err := tb.dialRemote(t); err != nil {
		t.Fatalf("traffic stopped with the agents: %v", err)
	}
	for _, n := range []string{"n0", "n1", "n2"} {
		c := start(n, "--cleanup")
		if err := c.Wait(); err != nil {
			t.Fatalf("%s --cleanup: %v", n, err)
		}
		out := tb.sh(t, tb.nodeNS(n), "ip -d link show type vxlan; ip route show table all proto 148; iptables-save | grep CAUSEWAY || true")
		if strings.TrimSpace(out) != "" {
			t.Errorf("%s after --cleanup:\n%s", n, out)
		}
	}
}

// get fetches url from inside node's namespace.
func (tb *testbed) get(t *testing.T, node, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return tb.h.Dial(tb.nodeNS(node), network, addr)
		}}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
