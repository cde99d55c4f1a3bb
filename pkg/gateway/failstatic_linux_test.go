package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/kube"
)

// TestGatewayFailStatic checks the fail-static policy with real API
// servers and the only c1 candidate a forwarding a probe from c3:
//
//  1. c1's kube-apiserver frozen (SIGSTOP) for 5 s, five lease durations:
//     a stays active, its tunnel device (same ifindex) and routes stay
//     untouched throughout, and after SIGCONT it renews the same term
//     (no transition, no second term, no rebuild);
//  2. a cut off from its API server (a proxy in front of it stops
//     answering) while the Lease, after it expired, is written with
//     another holder: a keeps forwarding while it cannot know, and steps
//     down, removing its tunnel, once the first read after the cut shows
//     the other holder — without overwriting the Lease.
//
// Timings are logged, not asserted.
func TestGatewayFailStatic(t *testing.T) {
	requireRoot(t)
	env := startEnv(t)
	for _, driver := range []string{"wireguard", "vxlan"} {
		t.Run(driver, func(t *testing.T) {
			env.reset(t)
			tp := newTopo(t)
			testFailStatic(t, env, tp, driver)
		})
	}
}

func testFailStatic(t *testing.T, env *env, tp *topo, driver string) {
	ctx := context.Background()
	proxy := newAPIProxy(t, env.local["c1"].Host)
	local := rest.CopyConfig(env.local["c1"])
	local.Host = "https://" + proxy.addr()
	a := env.startGatewayVia(t, local, tp, driver, "c1", "c1-gw-a", tp.gw1a, "1a", wan1a, netip.MustParseAddr("10.244.255.1"), true)
	env.startGateway(t, tp, driver, "c3", "c3-gw", tp.gw3, "3", wan3, netip.MustParseAddr("10.245.255.1"), true)
	for _, id := range []string{"c1", "c3"} {
		waitEndpointValid(t, env.c1.Client, id, metav1.ConditionTrue, v1alpha1.ReasonValid)
		waitEndpointValid(t, env.c3.Client, id, metav1.ConditionTrue, v1alpha1.ReasonValid)
	}
	probe := startProbe(t, tp.path(tp.p3), netip.AddrPortFrom(anycast1, 7777))
	probe.waitFrom(t, tp.gw1a)
	dev := tp.dev("1a")
	var base kernelState
	eventually(t, "tunnel device and routes of a", time.Minute, func() error {
		var err error
		if base, err = readKernelState(tp.gw1a, dev); err != nil {
			return err
		}
		if base.routes == "" {
			return fmt.Errorf("no proto 157 routes yet")
		}
		return nil
	})
	roles := watchRole(t, a.e)
	lease0 := leaseOf(t, env, "c1")
	const freeze = 5 * time.Second
	tb := time.Now()
	time.Sleep(freeze)
	t.Logf("%s: no fault, %s: longest probe silence %s (the machine's own noise)", driver, freeze, probe.gapSince(tb).Round(time.Millisecond))

	// 1. Frozen kube-apiserver, then frozen etcd.
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		freezeProcess(t, env, tp, a, probe, roles, lease0, base, driver, bin, freeze)
	}

	// 2. a cut off from its API server; after the lease expired, another
	// candidate takes it (written here as c1-gw-b, with a long duration
	// so that a, once passive, does not take it back). c1-gw-b writes no
	// probe IP, as a candidate without candidate probes: a copy of a's
	// own would have a, once passive, probe its own responder, find the
	// holder down and take the Lease back after quiet.
	samples := sampleKernel(t, tp.gw1a, dev, base)
	t0 := time.Now()
	proxy.cut()
	time.Sleep(2 * DefaultLeaseDuration)
	taken := leaseOf(t, env, "c1")
	taken.Spec.HolderIdentity = ptr.To("c1-gw-b")
	now := metav1.NewMicroTime(time.Now())
	taken.Spec.AcquireTime, taken.Spec.RenewTime = &now, &now
	taken.Spec.LeaseDurationSeconds = ptr.To[int32](3600)
	taken.Spec.LeaseTransitions = ptr.To(ptr.Deref(taken.Spec.LeaseTransitions, 0) + 1)
	delete(taken.Annotations, ProbeIPAnnotation)
	if _, err := env.c1.Kube.CoordinationV1().Leases("causeway-system").Update(ctx, taken, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write the lease as c1-gw-b: %v", err)
	}
	written := time.Now()
	time.Sleep(time.Second) // a cannot know: it keeps forwarding
	roleCut := a.e.Role()
	if r := roleCut; r != v1alpha1.HAStatusActive {
		t.Errorf("a is %s while cut off, before it could see the new holder; want active", r)
	}
	if changed, _ := samples.stop(); !changed.IsZero() {
		t.Errorf("tunnel device or routes changed %s after the cut", changed.Sub(t0).Round(time.Millisecond))
	}
	cutGap := probe.gapSince(t0)
	// The new holder publishes its Endpoint in the broker (which a
	// still reaches): a, whose term is no longer certain, must not
	// write its own back (the event kicks its sync).
	epKey := client.ObjectKey{Namespace: brokerNamespace("c1"), Name: "c1"}
	eventually(t, "publish c1-gw-b's Endpoint", time.Minute, func() error {
		ep := &v1alpha1.Endpoint{}
		if err := env.broker.Client.Get(ctx, epKey, ep); err != nil {
			return err
		}
		ep.Spec.Hostname, ep.Spec.PublicIP = "c1-gw-b", wan1b.String()
		return env.broker.Client.Update(ctx, ep)
	})
	time.Sleep(2 * time.Second)
	brokerHost := func() string {
		ep := &v1alpha1.Endpoint{}
		if err := env.broker.Client.Get(ctx, epKey, ep); err != nil {
			t.Fatal(err)
		}
		return ep.Spec.Hostname
	}
	if h := brokerHost(); h != "c1-gw-b" {
		t.Errorf("broker Endpoint of c1 names %q 2 s after c1-gw-b published it: the cut-off a wrote it back", h)
	}
	t2 := time.Now()
	passive := roleAt(a.e, v1alpha1.HAStatusPassive)
	proxy.heal()
	var stepped time.Time
	select {
	case stepped = <-passive:
	case <-time.After(time.Minute):
		t.Fatal("a did not step down after the cut healed")
	}
	eventually(t, "a's tunnel device removed", time.Minute, func() error {
		if ok, err := linkExists(tp.path(tp.gw1a), dev); err != nil || ok {
			return fmt.Errorf("device present %v (%v)", ok, err)
		}
		return nil
	})
	removed := time.Now()
	// Passive now, a must leave the Lease to c1-gw-b: look after a
	// takeover by probes would have happened (misses × interval down,
	// then quiet), not only right after the step-down.
	time.Sleep(2 * time.Second)
	if out, _ := exec.Command("ip", "-n", tp.gw1a, "route", "show", "table", "all", "proto", "157").CombinedOutput(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("routes left after the step-down: %s", out)
	}
	if h := brokerHost(); h != "c1-gw-b" {
		t.Errorf("broker Endpoint of c1 names %q after a stepped down, want c1-gw-b", h)
	}
	if h := ptr.Deref(leaseOf(t, env, "c1").Spec.HolderIdentity, ""); h != "c1-gw-b" {
		t.Errorf("lease holder %q after a stepped down, want c1-gw-b (a must not overwrite it)", h)
	}
	t.Logf("%s: cut off %s (lease written as c1-gw-b %s after the cut): a %s at the end of the cut, longest probe silence %s; after the heal a stepped down in %s, device gone after %s",
		driver, t2.Sub(t0).Round(time.Millisecond), written.Sub(t0).Round(time.Millisecond), roleCut, cutGap.Round(time.Millisecond),
		stepped.Sub(t2).Round(time.Millisecond), removed.Sub(t2).Round(time.Millisecond))
}

// freezeProcess SIGSTOPs c1's bin for freeze and checks that a stays
// active with its kernel state untouched and renews the same term.
func freezeProcess(t *testing.T, env *env, tp *topo, a *gw, probe *probe, roles *roleLog, lease0 *coordinationv1.Lease, base kernelState, driver, bin string, freeze time.Duration) {
	dev := tp.dev("1a")
	apiserver := env.c1.Process(bin)
	if apiserver == nil {
		t.Fatalf("no %s process for c1", bin)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(apiserver.PID(), syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT: %v", err)
			}
		}
	}
	t.Cleanup(resume) // never leave the shared control plane frozen
	samples := sampleKernel(t, tp.gw1a, dev, base)
	t0 := time.Now()
	if err := syscall.Kill(apiserver.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(freeze)
	if r := a.e.Role(); r != v1alpha1.HAStatusActive {
		t.Errorf("a is %s with %s frozen, want active", r, bin)
	}
	resume()
	t1 := time.Now()
	var renewedAfter time.Duration
	eventually(t, "a renewing its lease after the freeze", time.Minute, func() error {
		l := leaseOf(t, env, "c1")
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "c1-gw-a" {
			return fmt.Errorf("holder %q", h)
		}
		if !l.Spec.RenewTime.After(t1) {
			return fmt.Errorf("last renewal %s, before the resume", l.Spec.RenewTime.Format(time.StampMilli))
		}
		renewedAfter = l.Spec.RenewTime.Sub(t1)
		return nil
	})
	eventually(t, "lease_renewed_timestamp_seconds after the resume", 10*time.Second, func() error {
		if at := testutil.ToFloat64(a.e.m.leaseRenewed); at < float64(t1.UnixNano())/1e9 {
			return fmt.Errorf("%.3f, before the resume at %.3f", at, float64(t1.UnixNano())/1e9)
		}
		return nil
	})
	time.Sleep(time.Second) // a settled sync after the resume
	kept, n := samples.stop()
	if kept.IsZero() {
		t.Logf("%s: %s frozen %s: tunnel device (ifindex %d) and %d routes unchanged in all %d samples over %s, from the freeze to 1 s after the renewal",
			driver, bin, freeze, base.index, strings.Count(base.routes, "\n")+1, n, time.Since(t0).Round(time.Millisecond))
	} else {
		t.Errorf("%s: %s frozen: tunnel device or routes changed %s after the freeze began", driver, bin, kept.Sub(t0).Round(time.Millisecond))
	}
	if left, ok := roles.leftActive(); ok {
		t.Errorf("a left the active role %s after %s was frozen", left.Sub(t0).Round(time.Millisecond), bin)
	}
	if got := testutil.ToFloat64(a.e.m.leaderChanges); got != 1 {
		t.Errorf("a had %v active terms, want 1 (no rebuild)", got)
	}
	lease1 := leaseOf(t, env, "c1")
	if ptr.Deref(lease1.Spec.LeaseTransitions, 0) != ptr.Deref(lease0.Spec.LeaseTransitions, 0) || !lease1.Spec.AcquireTime.Equal(lease0.Spec.AcquireTime) {
		t.Errorf("lease transitions %d→%d, acquire time %s→%s: want the same term",
			ptr.Deref(lease0.Spec.LeaseTransitions, 0), ptr.Deref(lease1.Spec.LeaseTransitions, 0), lease0.Spec.AcquireTime, lease1.Spec.AcquireTime)
	}
	t.Logf("%s: %s frozen %s: longest probe silence %s; lease renewed %s after SIGCONT (renewals had stopped for %s)",
		driver, bin, freeze, probe.gapSince(t0).Round(time.Millisecond), renewedAfter.Round(time.Millisecond), (t1.Sub(t0) + renewedAfter).Round(time.Millisecond))
}

func leaseOf(t *testing.T, env *env, cluster string) *coordinationv1.Lease {
	t.Helper()
	c := env.c1
	if cluster == "c3" {
		c = env.c3
	}
	l, err := c.Kube.CoordinationV1().Leases("causeway-system").Get(context.Background(), kube.GatewayLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// kernelState is what a rebuild of the tunnel would change: the
// device's ifindex and the driver's routes.
type kernelState struct {
	index  int
	routes string
}

func readKernelState(ns, dev string) (kernelState, error) {
	out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", "dev", dev).CombinedOutput()
	if err != nil {
		return kernelState{}, fmt.Errorf("link %s: %v: %s", dev, err, out)
	}
	idx, err := strconv.Atoi(strings.SplitN(string(out), ":", 2)[0])
	if err != nil {
		return kernelState{}, fmt.Errorf("link %s: %q", dev, out)
	}
	routes, err := exec.Command("ip", "-n", ns, "route", "show", "table", "all", "proto", "157").CombinedOutput()
	if err != nil {
		return kernelState{}, fmt.Errorf("routes: %v: %s", err, routes)
	}
	return kernelState{index: idx, routes: strings.TrimSpace(string(routes))}, nil
}

// sampler reads the kernel state every 50 ms and notes when it first
// differed from the baseline.
type sampler struct {
	stopc   chan struct{}
	done    chan struct{}
	changed time.Time
	n       int
}

func sampleKernel(t *testing.T, ns, dev string, base kernelState) *sampler {
	s := &sampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			st, err := readKernelState(ns, dev)
			s.n++
			if (err != nil || st != base) && s.changed.IsZero() {
				s.changed = time.Now()
				t.Logf("kernel state changed: %+v (%v), was %+v", st, err, base)
			}
			select {
			case <-s.stopc:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

// stop ends the sampling and returns when the state first changed (zero:
// never) and how many samples were taken.
func (s *sampler) stop() (time.Time, int) {
	select {
	case <-s.stopc:
	default:
		close(s.stopc)
	}
	<-s.done
	return s.changed, s.n
}

// roleLog notes the first moment an engine was not active.
type roleLog struct {
	mu   sync.Mutex
	left time.Time
}

func watchRole(t *testing.T, e *Engine) *roleLog {
	r := &roleLog{}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if e.Role() != v1alpha1.HAStatusActive {
				r.mu.Lock()
				if r.left.IsZero() {
					r.left = time.Now()
				}
				r.mu.Unlock()
			}
		}
	}()
	return r
}

func (r *roleLog) leftActive() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.left, !r.left.IsZero()
}

// apiProxy forwards TCP to an API server until cut: then its open
// connections are closed and new ones are accepted but never answered
// (their TLS handshakes hang) until healed — one client partitioned from
// its API server while the others still reach it.
type apiProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	isCut  bool
	conns  map[net.Conn]struct{}
	held   []net.Conn
}

func newAPIProxy(t *testing.T, server string) *apiProxy {
	u, err := url.Parse(server)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.heal()
	})
	return p
}

func (p *apiProxy) addr() string { return p.ln.Addr().String() }

func (p *apiProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.isCut {
			p.held = append(p.held, c)
			p.mu.Unlock()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *apiProxy) forward(c net.Conn) {
	u, err := net.Dial("tcp4", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[c]; !ok { // cut while dialling
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[u] = struct{}{}
	p.mu.Unlock()
	go func() {
		io.Copy(u, c)
		u.Close()
		c.Close()
	}()
	io.Copy(c, u)
	c.Close()
	u.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

func (p *apiProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *apiProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = false
	for _, c := range p.held {
		c.Close()
	}
	p.held = nil
}
