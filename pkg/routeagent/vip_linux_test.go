package routeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestRouteAgentProgramsDualStackVIPs runs the real route agent process
// (VIP datapath on, default --vip-range-ipv6) in a lab node namespace
// against a real API server holding what the MCS controller writes for a
// dual-stack export: a ServiceImport with an IPv4 and an IPv6 clusterset
// VIP, and its rendered multicluster EndpointSlices with an IPv4 and an
// IPv6 backend. From a pod of the node, curl reaches the IPv4 VIP as
// [::ffff:<vip>] (a dual-stack socket) and the IPv6 VIP as [<vip>], each
// answered by the backend of its family; the node routes the IPv6 VIP
// range unreachable, so an unknown IPv6 VIP fails at once.
func TestRouteAgentProgramsDualStackVIPs(t *testing.T) {
	requireRoot(t)
	kc := kubetest.Start(t, "radualstack")
	ctx := context.Background()
	for _, ns := range []string{"causeway-system", "demo"} {
		if err := kc.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// The ClusterSet policy as the gateway mirrors it: the agent waits for it.
	if err := clusterset.Store(ctx, kc.Client, addrpolicy.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	vip4, vip6 := netip.MustParseAddr("243.0.0.10"), netip.MustParseAddr("fd63:6175:7365::10")
	be4, be6 := netip.MustParseAddr("10.200.0.1"), netip.MustParseAddr("fd00:200::1")
	si := mcs.BuildServiceImport(mcs.MergeResult{Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP,
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}, "demo", "web", []netip.Addr{vip4, vip6})
	si.Status = mcsv1beta1.ServiceImportStatus{}
	if err := kc.Client.Create(ctx, si); err != nil {
		t.Fatal(err)
	}
	for _, s := range mcs.RenderEndpointSlices(mcs.RenderInput{Import: si, LocalClusterID: "c1", Sources: []mcs.SourceEndpoints{{
		ClusterID: "c1", ReadyEndpoints: 1, Backends: []mcs.Backend{
			{Address: be4, Ports: map[string]int32{"http": 8080}, Ready: true, Serving: true},
			{Address: be6, Ports: map[string]int32{"http": 8080}, Ready: true, Serving: true},
		}}}}) {
		if err := kc.Client.Create(ctx, &s); err != nil {
			t.Fatal(err)
		}
	}

	h, pod, nodeIP := dualStackNode(t)
	podNS := h.Names().PodOf(pod)
	for _, b := range []struct {
		addr netip.Addr
		name string
	}{{be4, "v4"}, {be6, "v6"}} {
		ln, err := h.Listen(podNS, "tcp", netip.AddrPortFrom(b.addr, 8080).String())
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, b.name) })}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	startVIPAgent(t, h, kc, nodeIP, "debug")

	curl := func(url string) (string, error) {
		var out bytes.Buffer
		cmd, err := h.Start(netlab.Process{Netns: podNS, Cgroup: h.Cgroups().PodOf(pod), Path: "curl",
			Args: []string{"-sS", "-g", "--max-time", "2", url}, Stdout: &out, Stderr: &out})
		if err != nil {
			return "", err
		}
		err = cmd.Wait()
		return strings.TrimSpace(out.String()), err
	}
	for _, tc := range []struct{ url, want string }{
		{fmt.Sprintf("http://[%s]:80/", netip.AddrFrom16(vip4.As16())), "v4"}, // ::ffff:<vip>
		{fmt.Sprintf("http://[%s]:80/", vip6), "v6"},
	} {
		deadline := time.Now().Add(time.Minute)
		for {
			got, err := curl(tc.url)
			if err == nil && got == tc.want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("curl %s from the pod: %q (%v), want %q", tc.url, got, err, tc.want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	nodeNS := h.Names().Node("c1", "n0")
	unknown := netip.AddrPortFrom(netip.MustParseAddr("fd63:6175:7365::99"), 80).String()
	err := h.Do(nodeNS, func() error {
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp6", unknown)
		if err == nil {
			c.Close()
		}
		return err
	})
	if !errors.Is(err, syscall.EHOSTUNREACH) {
		t.Errorf("node: dial unknown IPv6 VIP %s: %v, want EHOSTUNREACH from the range's unreachable route (%s)", unknown, err, addrpolicy.DefaultVIPRangeIPv6)
	}
}

// dualStackNode is a lab cluster c1 of one node, n0, with a pod whose
// loopback holds the backends 10.200.0.1 and fd00:200::1.
func dualStackNode(t *testing.T) (*netlab.Host, netlab.Pod, netip.Addr) {
	t.Helper()
	h, c := labHost(t, "rad", 1)
	pod := netlab.Pod{Cluster: "c1", Node: "n0", Namespace: "demo", Name: "client", IP: netip.MustParseAddr("10.244.0.2")}
	if err := h.EnsurePod(pod); err != nil {
		t.Fatalf("pod: %v", err)
	}
	tb := &testbed{h: h}
	tb.sh(t, h.Names().PodOf(pod), "ip addr add 10.200.0.1/32 dev lo && ip -6 addr add fd00:200::1/128 dev lo nodad")
	node, _ := c.Node("n0")
	return h, pod, node.Address.Addr()
}

// startVIPAgent runs the route agent (test binary, mainEnv) in node n0's
// namespace with the VIP datapath on, attached to the node's cgroup and
// pinned on a private bpffs, reaching kc's API server through a forwarder
// at 127.0.0.1:6443, with metrics (and pprof) on 127.0.0.1:9532 there and env added
// to the environment; its log is shown when the test fails, and it is
// stopped (SIGTERM) at cleanup unless the caller waited for it.
func startVIPAgent(tb testing.TB, h *netlab.Host, kc *kubetest.Cluster, nodeIP netip.Addr, logLevel string, env ...string) *exec.Cmd {
	tb.Helper()
	nodeNS := h.Names().Node("c1", "n0")
	fctx, stopForward := context.WithCancel(context.Background())
	tb.Cleanup(stopForward)
	ln, err := h.Listen(nodeNS, "tcp", "127.0.0.1:6443")
	if err != nil {
		tb.Fatal(err)
	}
	apiAddr := strings.TrimPrefix(kc.URL, "https://")
	go netlab.Forward(fctx, ln, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", apiAddr)
	}, nil)
	kubeconfig, err := kc.KubeconfigAt("route-agent-test", "https://127.0.0.1:6443", "admin", []string{"system:masters"})
	if err != nil {
		tb.Fatal(err)
	}
	bpffs := tb.TempDir()
	if err := unix.Mount("bpf", bpffs, "bpf", 0, ""); err != nil {
		tb.Fatalf("mount bpffs on %s: %v", bpffs, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(bpffs, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount bpffs %s: %v", bpffs, err)
		}
	})
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	logPath := filepath.Join(tb.TempDir(), "agent.log")
	cmd, err := h.Start(netlab.Process{Netns: nodeNS, Cgroup: h.Cgroups().NodeSystem("c1", "n0"), Path: self,
		Args: []string{"--kubeconfig", kubeconfig, "--cluster-id", "c1", "--node-name", "n0",
			"--node-ip", nodeIP.String(), "--pod-cidrs", "10.244.0.0/16", "--service-cidrs", "10.96.0.0/16",
			"--tunnel-mtu", "1420", "--metrics-addr", "127.0.0.1:9532", "--profiling", "--log-level", logLevel,
			"--bpffs", bpffs, "--cgroup-root", h.Cgroups().Node("c1", "n0")},
		Env: append(append(os.Environ(), mainEnv+"=1"), env...), LogPath: logPath})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		if tb.Failed() {
			out, _ := os.ReadFile(logPath)
			tb.Logf("route agent log:\n%s", out)
		}
	})
	return cmd
}
