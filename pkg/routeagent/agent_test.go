package routeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
)

func endpoint(name, host, privateIP string, subnets ...string) *v1alpha1.Endpoint {
	return &v1alpha1.Endpoint{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "causeway-system"},
		Spec: v1alpha1.EndpointSpec{ClusterID: name, Hostname: host, CableDriver: v1alpha1.CableWireGuard,
			PublicIP: "198.18.0.1", PrivateIP: privateIP, Port: 51820, Subnets: subnets},
	}
}

func setValid(ep *v1alpha1.Endpoint, ok bool) {
	st, reason := metav1.ConditionTrue, v1alpha1.ReasonValid
	if !ok {
		st, reason = metav1.ConditionFalse, v1alpha1.ReasonOverlappingCIDR
	}
	apimeta.SetStatusCondition(&ep.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionValid, Status: st,
		Reason: reason, Message: "test", ObservedGeneration: ep.Generation})
}

func TestInputsFromEndpoints(t *testing.T) {
	local := endpoint("c1", "n0", "172.18.1.10", "10.244.0.0/16")
	good := endpoint("c3", "g", "", "10.245.0.0/16", "10.97.0.0/16")
	setValid(good, true)
	bad := endpoint("c4", "g", "", "10.246.0.0/16")
	setValid(bad, false)
	pending := endpoint("c5", "g", "", "10.247.0.0/16") // no condition yet
	garbled := endpoint("c6", "g", "", "10.248.0.0/16", "nope")
	setValid(garbled, true)
	node := Node{ClusterID: "c1", Name: "n2", IP: nodeW}
	in, notes := InputsFromEndpoints(node, []v1alpha1.Endpoint{*garbled, *pending, *bad, *good, *local}, Params{})
	if in.Gateway == nil || in.Gateway.Hostname != "n0" || in.Gateway.NodeIP != nodeG0 {
		t.Errorf("gateway %+v", in.Gateway)
	}
	got := fmt.Sprint(in.Remotes)
	if want := "[{c3 [10.245.0.0/16 10.97.0.0/16]} {c6 [10.248.0.0/16]}]"; got != want {
		t.Errorf("remotes %s, want %s", got, want)
	}
	joined := strings.Join(notes, "\n")
	for _, w := range []string{"c4 is not Valid=True", "c5 is not Valid=True", `c6: subnet "nope"`} {
		if !strings.Contains(joined, w) {
			t.Errorf("notes %q lack %q", notes, w)
		}
	}

	// A local Endpoint marked invalid or without a usable privateIP gives no gateway.
	setValid(local, false)
	if in, _ := InputsFromEndpoints(node, []v1alpha1.Endpoint{*local}, Params{}); in.Gateway != nil {
		t.Errorf("invalid local endpoint used: %+v", in.Gateway)
	}
	noIP := endpoint("c1", "n0", "")
	if in, _ := InputsFromEndpoints(node, []v1alpha1.Endpoint{*noIP}, Params{}); in.Gateway != nil {
		t.Errorf("local endpoint without privateIP used: %+v", in.Gateway)
	}
}

// The agent against a real API server: Endpoint changes reach the
// dataplane, including a gateway failover and a remote turning invalid.
func TestAgentFollowsEndpoints(t *testing.T) {
	kc := kubetest.Start(t, "ra")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cl := kc.Client
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "causeway-system"}}); err != nil {
		t.Fatal(err)
	}
	create := func(ep *v1alpha1.Endpoint, valid *bool) *v1alpha1.Endpoint {
		t.Helper()
		if err := cl.Create(ctx, ep); err != nil {
			t.Fatal(err)
		}
		if valid != nil {
			setValid(ep, *valid)
			if err := cl.Status().Update(ctx, ep); err != nil {
				t.Fatal(err)
			}
		}
		return ep
	}
	yes, no := true, false
	localEP := create(endpoint("c1", "n0", "172.18.1.10", "10.244.0.0/16", "10.96.0.0/16"), &yes)
	c3 := create(endpoint("c3", "g3", "", "10.245.0.0/16", "10.97.0.0/16"), &yes)
	create(endpoint("c4", "g4", "", "10.244.0.0/16"), &no) // overlaps c1: refused by the gateway

	dp := &fakeDataplane{}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var runner *Runner
	agent := NewAgent(AgentConfig{Node: Node{ClusterID: "c1", Name: "n2", IP: nodeW},
		Params:    Params{LocalCIDRs: local},
		Dataplane: dp, Metrics: m, Endpoints: nil})
	var lister lazyLister
	agent.cfg.Endpoints = &lister
	runner = NewRunner(RunnerConfig{MinInterval: 10 * time.Millisecond}, agent.Sync)
	l, err := WatchEndpoints(ctx, kc.DaemonConfig(t, "route-agent"), "causeway-system", func() { agent.Changed(); runner.Kick() },
		func(from, to string) { agent.GatewayLeaseMoved(ctx, from, to, runner.Kick) })
	if err != nil {
		t.Fatal(err)
	}
	lister.set(l)
	go runner.Run(ctx)

	waitFor := func(what string, ok func(DesiredState) bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if d, set := dp.Current(); set && ok(d) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		d, _ := dp.Current()
		t.Fatalf("never reached %s; last state:\n%s", what, d)
	}
	routesVia := func(via string, dsts ...string) func(DesiredState) bool {
		return func(d DesiredState) bool {
			routes := remoteRoutes(d)
			if len(routes) != len(dsts) || len(routesAt(d, RouteMetric)) != len(dsts)+1 {
				return false
			}
			for i, r := range routes {
				if r.Dst.String() != dsts[i] || r.Via.String() != via {
					return false
				}
			}
			return true
		}
	}
	waitFor("routes to c3 via n0", routesVia("241.18.1.10", "10.97.0.0/16", "10.245.0.0/16"))

	// Gateway failover: the local Endpoint now names n1.
	localEP.Spec.Hostname, localEP.Spec.PrivateIP = "n1", "172.18.1.11"
	if err := cl.Update(ctx, localEP); err != nil {
		t.Fatal(err)
	}
	waitFor("routes re-pointed to n1", routesVia("241.18.1.11", "10.97.0.0/16", "10.245.0.0/16"))
	if d, _ := dp.Current(); d.Overlay.Peer.NodeIP != nodeG1 {
		t.Fatalf("overlay peer %v, want n1", d.Overlay.Peer)
	}

	// The remote turns invalid: its routes go.
	setValid(c3, false)
	if err := cl.Status().Update(ctx, c3); err != nil {
		t.Fatal(err)
	}
	// Its fallbacks go with them: only the supernet's is left.
	waitFor("c3 withdrawn", func(d DesiredState) bool {
		return len(routesAt(d, RouteMetric)) == 1 && len(remoteRoutes(d)) == 0 && slices.Equal(fallbacks(t, d), []string{"242.0.0.0/8"})
	})

	// This node becomes the gateway: no routes, no peer; the fallbacks
	// under pkg/cable's routes.
	setValid(c3, true)
	if err := cl.Status().Update(ctx, c3); err != nil {
		t.Fatal(err)
	}
	localEP.Spec.Hostname, localEP.Spec.PrivateIP = "n2", nodeW.String()
	if err := cl.Update(ctx, localEP); err != nil {
		t.Fatal(err)
	}
	waitFor("gateway role", func(d DesiredState) bool {
		return d.Overlay.Peer == nil && len(routesAt(d, RouteMetric)) == 1 && len(remoteRoutes(d)) == 0 && len(d.Rules.Chains["mangle"][ChainMSS]) == 4 &&
			slices.Equal(fallbacks(t, d), []string{"10.97.0.0/16", "10.245.0.0/16", "242.0.0.0/8"})
	})
	if n := testutil.ToFloat64(m.GatewayChanges); n < 2 {
		t.Errorf("gateway changes %v, want >= 2", n)
	}
	if testutil.ToFloat64(m.LastSuccess) == 0 {
		t.Error("no last-success timestamp")
	}
	if testutil.CollectAndCount(m.ProgrammingLatency) != 1 {
		t.Error("no programming latency histogram")
	}
}

// A failed Set is retried (full) and the failure counted.
func TestAgentRetriesFailedSet(t *testing.T) {
	dp := &fakeDataplane{}
	dp.FailWith(fmt.Errorf("netlink says no"))
	m := NewMetrics(nil)
	agent := NewAgent(AgentConfig{Node: Node{ClusterID: "c1", Name: "n2", IP: nodeW}, Dataplane: dp, Metrics: m,
		Endpoints: staticLister{*endpoint("c1", "n0", "172.18.1.10", "10.244.0.0/16")}})
	if err := agent.Sync(context.Background(), false); err == nil {
		t.Fatal("failed Set not reported")
	}
	if _, ok := agent.Applied(); ok {
		t.Fatal("failed state recorded as applied")
	}
	dp.FailWith(nil)
	if err := agent.Sync(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if testutil.ToFloat64(m.SyncFailures) != 1 {
		t.Errorf("failures %v", testutil.ToFloat64(m.SyncFailures))
	}
	// An unchanged partial sync does not touch the dataplane; a full one does.
	n := dp.Sets()
	agent.Sync(context.Background(), false)
	if dp.Sets() != n {
		t.Error("unchanged partial sync called Set")
	}
	agent.Sync(context.Background(), true)
	if dp.Sets() != n+1 {
		t.Error("full sync skipped Set")
	}
}

// The gateway Lease decides when this node's remote flows are
// forgotten: once, as soon as its holder moves off this node (not when
// the mirrored Endpoint follows, which is later), with the remote
// subnets of the last sync; a failed ForgetFlows is retried by the next
// sync.
func TestAgentForgetsFlowsWhenTheGatewayLeaseLeavesThisNode(t *testing.T) {
	dp := &fakeDataplane{}
	remote := endpoint("c3", "g3", "", "242.0.2.0/24")
	setValid(remote, true)
	eps := staticLister{*endpoint("c1", "n2", nodeW.String(), "242.0.0.0/24"), *remote}
	agent := NewAgent(AgentConfig{Node: Node{ClusterID: "c1", Name: "n2", IP: nodeW}, Dataplane: dp,
		Endpoints: &eps})
	if err := agent.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	kicks := 0
	kick := func() { kicks++ }
	for _, step := range []struct {
		from, to string
		forgot   int
	}{
		{"n0", "n1", 0}, // between other nodes
		{"n1", "n2", 0}, // onto this node (its gateway cleans up itself)
		{"n2", "n1", 1}, // off this node
		{"n1", "n2", 1},
		{"n2", "", 2}, // released
	} {
		agent.GatewayLeaseMoved(context.Background(), step.from, step.to, kick)
		if got := dp.Forgotten(); len(got) != step.forgot {
			t.Fatalf("after the lease moved %q → %q: %d ForgetFlows calls, want %d", step.from, step.to, len(got), step.forgot)
		}
	}
	if got := dp.Forgotten()[0]; len(got) != 1 || got[0].String() != "242.0.2.0/24" {
		t.Errorf("forgot %v, want the remote subnet 242.0.2.0/24", got)
	}
	// The Endpoint following the Lease forgets nothing more.
	eps[0] = *endpoint("c1", "n1", "172.18.1.11", "242.0.0.0/24")
	if err := agent.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if got := len(dp.Forgotten()); got != 2 || kicks != 0 {
		t.Errorf("after the Endpoint followed: %d ForgetFlows calls, %d kicks; want 2 and none", got, kicks)
	}
	// A failure is retried by the next sync, and only once it succeeds
	// is it done.
	dp.FailForget(errors.New("netlink: busy"))
	agent.GatewayLeaseMoved(context.Background(), "n2", "n1", kick)
	if kicks != 1 {
		t.Errorf("a failed ForgetFlows asked for %d syncs, want 1", kicks)
	}
	if err := agent.Sync(context.Background(), false); err == nil {
		t.Error("sync with a failing ForgetFlows succeeded")
	}
	dp.FailForget(nil)
	for range 2 {
		if err := agent.Sync(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(dp.Forgotten()); got != 5 {
		t.Errorf("%d ForgetFlows calls after the retry, want 5 (two failed, one retried, none after)", got)
	}
}

// A Lease that leaves the node before the agent's first sync (a
// restarted agent) is forgotten by that sync, with the subnets it reads.
func TestAgentForgetsFlowsOfALeaseMovedBeforeItsFirstSync(t *testing.T) {
	dp := &fakeDataplane{}
	remote := endpoint("c3", "g3", "", "242.0.2.0/24")
	setValid(remote, true)
	eps := staticLister{*endpoint("c1", "n1", "172.18.1.11", "242.0.0.0/24"), *remote}
	agent := NewAgent(AgentConfig{Node: Node{ClusterID: "c1", Name: "n2", IP: nodeW}, Dataplane: dp,
		Endpoints: &eps})
	agent.GatewayLeaseMoved(context.Background(), "n2", "n1", func() {})
	if got := dp.Forgotten(); len(got) != 0 {
		t.Fatalf("before the first sync: %d ForgetFlows calls, want none (no remote subnets read yet)", len(got))
	}
	for range 2 {
		if err := agent.Sync(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
	if got := dp.Forgotten(); len(got) != 1 || len(got[0]) != 1 || got[0][0].String() != "242.0.2.0/24" {
		t.Errorf("after two syncs: forgot %v, want the remote subnet 242.0.2.0/24 once", got)
	}
}

type staticLister []v1alpha1.Endpoint

func (s staticLister) ListEndpoints(context.Context) ([]v1alpha1.Endpoint, error) { return s, nil }

func TestValidateFlags(t *testing.T) {
	good := flags{device: DefaultDevice, vni: DefaultVNI, port: DefaultPort, tunnelMTU: DefaultTunnelMTU, nodeIP: "172.18.1.11"}
	if err := validate(&good); err != nil {
		t.Fatalf("good flags refused: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*flags)
		want   string
	}{
		"vni":      {func(f *flags) { f.vni = 1 << 24 }, "--vxlan-vni"},
		"port":     {func(f *flags) { f.port = 0 }, "--vxlan-port"},
		"device":   {func(f *flags) { f.device = "a-very-long-device-name" }, "--vxlan-device"},
		"mtu":      {func(f *flags) { f.overlayMTU = 100 }, "--overlay-mtu"},
		"table":    {func(f *flags) { f.table = 255 }, "--route-table"},
		"backend":  {func(f *flags) { f.iptablesBackend = "ebtables" }, "--iptables-backend"},
		"node ip":  {func(f *flags) { f.nodeIP = "fd00::1" }, "--node-ip"},
		"node ip2": {func(f *flags) { f.nodeIP = "banana" }, "--node-ip"},
	} {
		f := good
		tc.mutate(&f)
		if err := validate(&f); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error mentioning %s", name, err, tc.want)
		}
	}
}

// A stopped agent whose node holds the active gateway goes on until it
// has applied a state routing through another node (or its bound
// passed); any other agent stops at once.
func TestLingerWhileGateway(t *testing.T) {
	remote := endpoint("c3", "g3", "", "242.0.2.0/24")
	setValid(remote, true)
	eps := staticLister{*endpoint("c1", "n2", nodeW.String(), "242.0.0.0/24"), *remote}
	agent := NewAgent(AgentConfig{Node: Node{ClusterID: "c1", Name: "n2", IP: nodeW}, Dataplane: &fakeDataplane{},
		Endpoints: &eps})
	if err := agent.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	done := func(ctx context.Context, within time.Duration) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(within):
			return false
		}
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()

	// The gateway stays on this node: the bound ends the linger.
	if !done(lingerWhileGateway(stopped, agent, nodeW, 100*time.Millisecond, slog.New(slog.DiscardHandler)), 30*time.Second) {
		t.Fatal("the linger outlived its bound")
	}

	// The gateway moves: the linger ends once the agent applied it.
	ctx := lingerWhileGateway(stopped, agent, nodeW, time.Hour, slog.New(slog.DiscardHandler))
	if done(ctx, 300*time.Millisecond) {
		t.Fatal("the agent stopped while its node still held the active gateway")
	}
	eps[0] = *endpoint("c1", "n0", "172.18.1.10", "242.0.0.0/24")
	if err := agent.Sync(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if !done(ctx, 30*time.Second) {
		t.Fatal("the agent did not stop once it routed through the new active gateway")
	}

	// Not the gateway node: no linger.
	if !done(lingerWhileGateway(stopped, agent, nodeW, time.Hour, slog.New(slog.DiscardHandler)), 30*time.Second) {
		t.Fatal("an agent off the gateway node lingered")
	}
}
