package routeagent

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/pkg/kube"
)

// The whole agent (informer, runner, Linux dataplane) programming a lab
// worker node: traffic to the remote subnet reaches gateway n0, and after
// the local Endpoint names n1 it reaches n1.
func TestAgentEndToEndFailover(t *testing.T) {
	tb := newTestbed(t)
	kc := kubetest.Start(t, "rae2e")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, f := range []string{"kube-apiserver.log", "etcd.log"} {
			b, _ := os.ReadFile(filepath.Join(kc.Dir(), "logs", f))
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s:\n%s", f, b)
		}
	})
	cl := kc.Client
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "causeway-system"}}); err != nil {
		t.Fatal(err)
	}
	localEP := endpoint("c1", "n0", tb.nodeIP("n0").String(), "10.244.0.0/16", "10.96.0.0/16")
	remote := endpoint("c3", "g3", "", remoteSubnet.String())
	if err := cl.Create(ctx, localEP); err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, remote); err != nil {
		t.Fatal(err)
	}
	setValid(remote, true)
	if err := cl.Status().Update(ctx, remote); err != nil {
		t.Fatal(err)
	}

	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-system", Name: kube.GatewayLease},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("n0")}}
	if err := cl.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}

	// One agent per node, as the DaemonSet would run them.
	agents := map[string]*Agent{}
	for _, n := range []string{"n0", "n1", "n2"} {
		dp, err := NewLinux(LinuxConfig{Netns: filepath.Join("/run/netns", tb.nodeNS(n))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := dp.Cleanup(context.Background()); err != nil {
				t.Errorf("cleanup %s: %v", n, err)
			}
			dp.Close()
		})
		var lister lazyLister
		agent := NewAgent(AgentConfig{Node: Node{ClusterID: "c1", Name: n, IP: tb.nodeIP(n)},
			Params:    Params{OverlayMTU: 1450, LocalCIDRs: []netip.Prefix{tb.cluster.PodCIDR, tb.cluster.ServiceCIDR}},
			Endpoints: &lister, Dataplane: dp})
		runner := NewRunner(RunnerConfig{}, agent.Sync)
		l, err := WatchEndpoints(ctx, kc.DaemonConfig(t, "route-agent"), "causeway-system", func() { agent.Changed(); runner.Kick() },
			func(from, to string) { agent.GatewayLeaseMoved(ctx, from, to, runner.Kick) })
		if err != nil {
			t.Fatal(err)
		}
		lister.set(l)
		go runner.Run(ctx)
		agents[n] = agent
	}

	waitGreeting := func(prefix string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		var last string
		var lastErr error
		for time.Now().Before(deadline) {
			last, lastErr = tb.dialRemote(t)
			if lastErr == nil && strings.HasPrefix(last, prefix) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no greeting from %s: last %q, %v", prefix, last, lastErr)
	}
	waitGreeting("n0 ")

	// A failover moves the Lease first: n0's agent forgets the flows its
	// gateway translated (a conntrack entry of a remote flow) then,
	// before the Endpoint names the new active; n1's are left alone.
	for _, n := range []string{"n0", "n1"} {
		tb.addRemoteFlow(t, n)
	}
	lease.Spec.HolderIdentity = ptr.To("n1")
	if err := cl.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); tb.remoteFlows(t, "n0") != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("n0's remote flow still tracked 30 s after the gateway Lease left n0")
		}
	}
	if n := tb.remoteFlows(t, "n1"); n != 1 {
		t.Errorf("n1 tracks %d remote flows after the Lease moved onto it, want its 1", n)
	}

	start := time.Now()
	localEP.Spec.Hostname, localEP.Spec.PrivateIP = "n1", tb.nodeIP("n1").String()
	if err := cl.Update(ctx, localEP); err != nil {
		t.Fatal(err)
	}
	waitGreeting("n1 ")
	t.Logf("Endpoint update -> traffic via n1: %v (figure, not asserted)", time.Since(start).Round(time.Millisecond))
	// Every agent follows the Endpoint through its own watch: the ones
	// not on the traffic's path may apply the change a moment later.
	var problem string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		problem = ""
		if d, _ := agents["n1"].Applied(); len(remoteRoutes(d)) != 0 || d.Overlay.Peer != nil {
			problem = fmt.Sprintf("new gateway n1 kept routes or a peer:\n%s", d)
		} else if d, _ := agents["n0"].Applied(); len(remoteRoutes(d)) != 1 || d.Overlay.Peer == nil || d.Overlay.Peer.NodeIP != tb.nodeIP("n1") {
			problem = fmt.Sprintf("old gateway n0 does not route via n1:\n%s", d)
		}
		if problem == "" {
			return
		}
	}
	t.Error(problem)
}

// addRemoteFlow creates, in node's namespace, the conntrack entry of a
// UDP flow from the remote subnet to a local pod.
func (tb *testbed) addRemoteFlow(t *testing.T, node string) {
	t.Helper()
	h, err := netnsx.Handle(filepath.Join("/run/netns", tb.nodeNS(node)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	src, dst := remoteSubnet.Addr().Next().AsSlice(), tb.cluster.PodCIDR.Addr().Next().AsSlice()
	f := &netlink.ConntrackFlow{FamilyType: unix.AF_INET, TimeOut: 120,
		Forward: netlink.IPTuple{SrcIP: src, DstIP: dst, SrcPort: 40000, DstPort: 7071, Protocol: unix.IPPROTO_UDP},
		Reverse: netlink.IPTuple{SrcIP: dst, DstIP: src, SrcPort: 7071, DstPort: 40000, Protocol: unix.IPPROTO_UDP}}
	if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
		t.Fatalf("%s: create conntrack entry %s: %v", node, f, err)
	}
}

// remoteFlows counts the conntrack entries in node's namespace of flows
// from the remote subnet.
func (tb *testbed) remoteFlows(t *testing.T, node string) int {
	t.Helper()
	h, err := netnsx.Handle(filepath.Join("/run/netns", tb.nodeNS(node)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, unix.AF_INET)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range flows {
		if a, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && remoteSubnet.Contains(a.Unmap()) {
			n++
		}
	}
	return n
}
