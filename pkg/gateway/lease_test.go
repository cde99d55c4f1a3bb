package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/kube"
)

// Generous timings: the API server shares a loaded machine, and a
// renewal slower than the deadline would be a (correct) step-down that
// the checks below do not expect.
const (
	testLease    = 4 * time.Second
	testDeadline = 3 * time.Second
	testRetry    = 250 * time.Millisecond
)

// candidate runs one elector: acquire, renew until stopped or lost.
type candidate struct {
	el       *elector
	stop     context.CancelFunc // ends the run without releasing (a crash)
	mu       sync.Mutex
	leading  bool
	acquired time.Time // when it last acquired
	renewed  time.Time // send time of its last successful write while leading
	terms    int
	done     chan struct{}
}

func startCandidate(t *testing.T, kc kubernetes.Interface, ns, id string, release bool) *candidate {
	return startCandidateWith(t, kc, ns, id, release, testLease, testDeadline, testRetry)
}

func startCandidateWith(t *testing.T, kc kubernetes.Interface, ns, id string, release bool, lease, deadline, retry time.Duration) *candidate {
	t.Helper()
	return startCandidateClients(t, kc, kc, ns, id, release, lease, deadline, retry, nil)
}

// startCandidateClients watches with kc and reads and writes with writes
// (the engine gives the latter a request timeout); configure, when set,
// changes the elector before it starts.
func startCandidateClients(t *testing.T, kc, writes kubernetes.Interface, ns, id string, release bool, lease, deadline, retry time.Duration, configure func(*elector)) *candidate {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{stop: cancel, done: make(chan struct{})}
	c.el = newElector(kc.CoordinationV1(), writes.CoordinationV1(), ns, kube.GatewayLease, id, lease, deadline, retry,
		slog.New(slog.DiscardHandler), nil)
	if configure != nil {
		configure(c.el)
	}
	go c.el.watch(ctx)
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			l, sent := c.el.acquire(ctx)
			if l == nil {
				return
			}
			c.mu.Lock()
			c.leading, c.acquired, c.renewed = true, time.Now(), sent
			c.terms++
			c.mu.Unlock()
			last := c.el.renew(ctx, l, sent)
			c.mu.Lock()
			c.leading = false
			c.renewed = last.Spec.RenewTime.Time
			c.mu.Unlock()
			if ctx.Err() != nil && release {
				rctx, rc := context.WithTimeout(context.Background(), 10*time.Second)
				if err := c.el.release(rctx, last); err != nil {
					t.Errorf("%s: release: %v", id, err)
				}
				rc()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func (c *candidate) state() (leading bool, acquired time.Time, terms int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading, c.acquired, c.terms
}

func within(t *testing.T, what string, check func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if check() {
			return
		}
	}
	t.Fatalf("%s: not within 60 s", what)
}

func holder(t *testing.T, kc kubernetes.Interface, ns string) *coordinationv1.Lease {
	t.Helper()
	l, err := kc.CoordinationV1().Leases(ns).Get(context.Background(), kube.GatewayLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestElector(t *testing.T) {
	ctrllog.SetLogger(logr.Discard()) // kubetest's client; the elector logs to slog
	cl := kubetest.Start(t, "lease")
	kc := cl.Kube

	t.Run("one leader, release hands over", func(t *testing.T) {
		ns := "default"
		a := startCandidate(t, kc, ns, "a", true)
		b := startCandidate(t, kc, ns, "b", true)
		var first, second *candidate
		within(t, "a leader", func() bool {
			la, _, _ := a.state()
			lb, _, _ := b.state()
			switch {
			case la && lb:
				t.Fatal("a and b lead at once")
			case la:
				first, second = a, b
			case lb:
				first, second = b, a
			}
			return first != nil
		})
		l := holder(t, kc, ns)
		if want := first.el.identity; ptr.Deref(l.Spec.HolderIdentity, "") != want {
			t.Fatalf("lease holder %q, want %q", ptr.Deref(l.Spec.HolderIdentity, ""), want)
		}
		// While the leader renews, the other candidate waits (one lease
		// duration and more).
		for end := time.Now().Add(testLease + time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if lead, _, _ := second.state(); lead {
				t.Fatalf("%s took over a lease %s was renewing", second.el.identity, first.el.identity)
			}
		}
		if lead, _, terms := first.state(); !lead || terms != 1 {
			t.Fatalf("%s: leading %v after %d terms, want one uninterrupted term", first.el.identity, lead, terms)
		}
		before := ptr.Deref(holder(t, kc, ns).Spec.LeaseTransitions, 0)
		first.stop() // releases the lease
		<-first.done
		within(t, second.el.identity+" leading after the release", func() bool { lead, _, _ := second.state(); return lead })
		l = holder(t, kc, ns)
		if ptr.Deref(l.Spec.HolderIdentity, "") != second.el.identity || ptr.Deref(l.Spec.LeaseTransitions, 0) != before+1 {
			t.Errorf("after the hand-over: holder %q transitions %d, want %q and %d",
				ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0), second.el.identity, before+1)
		}
	})

	t.Run("crash: takeover only after expiry, restart adopts its own term", func(t *testing.T) {
		ns := "kube-public"
		a := startCandidate(t, kc, ns, "a", false)
		within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
		b := startCandidate(t, kc, ns, "b", false)
		// A restarted a (same identity) adopts its unexpired term: no
		// transition, same acquire time.
		before := holder(t, kc, ns)
		a.stop()
		<-a.done
		a2 := startCandidate(t, kc, ns, "a", false)
		within(t, "restarted a leading", func() bool { lead, _, _ := a2.state(); return lead })
		if lb, _, _ := b.state(); lb {
			t.Fatal("b took over while a restarted")
		}
		after := holder(t, kc, ns)
		if ptr.Deref(after.Spec.LeaseTransitions, 0) != ptr.Deref(before.Spec.LeaseTransitions, 0) ||
			!after.Spec.AcquireTime.Equal(before.Spec.AcquireTime) {
			t.Errorf("restart adopted with transitions %d→%d, acquire time %v→%v; want unchanged",
				ptr.Deref(before.Spec.LeaseTransitions, 0), ptr.Deref(after.Spec.LeaseTransitions, 0), before.Spec.AcquireTime, after.Spec.AcquireTime)
		}
		// Crash (no release): b takes over, never before a lease
		// duration has passed since a's last renewal was sent.
		a2.stop()
		<-a2.done
		a2.mu.Lock()
		lastRenewal := a2.renewed
		a2.mu.Unlock()
		within(t, "b leading after a's crash", func() bool { lead, _, _ := b.state(); return lead })
		_, acquired, _ := b.state()
		if gap := acquired.Sub(lastRenewal); gap < testLease {
			t.Errorf("b acquired %v after a's last renewal, before the lease duration %v", gap, testLease)
		}
		if h := ptr.Deref(holder(t, kc, ns).Spec.HolderIdentity, ""); h != "b" {
			t.Errorf("holder %q, want b", h)
		}
	})

	// With the defaults (1 s lease, renewals every 0.1 s) every renewal
	// must count as one: an election that notices changes of the renew
	// time only at whole seconds (as client-go's, which compares records
	// serialised with second precision) takes a live holder's lease over
	// up to a second early.
	t.Run("default timings: crash takeover only after a full lease duration", func(t *testing.T) {
		ns := "crash-defaults"
		if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			a := startCandidateWith(t, kc, ns, fmt.Sprintf("a%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod)
			within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
			b := startCandidateWith(t, kc, ns, fmt.Sprintf("b%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod)
			time.Sleep(1500 * time.Millisecond) // b sees several renewals
			a.stop()
			<-a.done
			a.mu.Lock()
			lastRenewal, lead := a.renewed, a.terms
			a.mu.Unlock()
			within(t, "b leading after a's crash", func() bool { lead, _, _ := b.state(); return lead })
			_, acquired, _ := b.state()
			if gap := acquired.Sub(lastRenewal); gap < DefaultLeaseDuration {
				t.Errorf("round %d: b acquired %v after a's last renewal (a had %d terms), before the lease duration %v", i, gap, lead, DefaultLeaseDuration)
			} else {
				t.Logf("round %d: b acquired %v after a's last renewal", i, gap.Round(time.Millisecond))
			}
			b.stop()
			<-b.done
			if err := kc.CoordinationV1().Leases(ns).Delete(context.Background(), kube.GatewayLease, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("release after a renewal it did not see", func(t *testing.T) {
		ns := "kube-system"
		el := newElector(kc.CoordinationV1(), kc.CoordinationV1(), ns, kube.GatewayLease, "a", testLease, testDeadline, testRetry,
			slog.New(slog.DiscardHandler), nil)
		ctx := context.Background()
		l, _, err := el.tryAcquire(ctx, nil, time.Now())
		if err != nil || l == nil {
			t.Fatalf("acquire: %v", err)
		}
		if _, err := el.renewOnce(ctx, l); err != nil { // the renewal in flight at the stop
			t.Fatal(err)
		}
		if err := el.release(ctx, l); err != nil { // with the version before it
			t.Fatal(err)
		}
		if h := holder(t, kc, ns).Spec.HolderIdentity; h != nil {
			t.Errorf("holder %q after the release, want none", *h)
		}
	})

	// Fail static: with the API server frozen for longer than the lease,
	// the holder keeps its term (renewals failing) and the passive
	// candidate, whose takeover writes failed too, restarts its expiry
	// clock when it reads the unchanged Lease again.
	t.Run("frozen API server: the holder keeps its term", func(t *testing.T) {
		ns := "freeze"
		if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		writes := leaseClient(t, cl.Config, nil)
		apiserver := cl.Process("kube-apiserver")
		for i := range 3 {
			a := startCandidateClients(t, kc, writes, ns, fmt.Sprintf("a%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, nil)
			within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
			b := startCandidateClients(t, kc, writes, ns, fmt.Sprintf("b%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, nil)
			time.Sleep(time.Second) // b sees renewals
			freezeRound(t, kc, ns, apiserver, 3*DefaultLeaseDuration, i, a, b)
		}
	})

	// Candidate probes: a holder that answers no probes is taken over once
	// no new version has come for quiet — long before its lease expires —
	// but never while it keeps renewing.
	t.Run("candidate probes: a dead holder is taken over before expiry", func(t *testing.T) {
		ns := "probes"
		if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		const lease, quiet = 30 * time.Second, time.Second
		pa, pb := &fakeProber{}, &fakeProber{}
		a := startCandidateClients(t, kc, kc, ns, "a", false, lease, testDeadline, testRetry, probed("192.0.2.1", pa, quiet))
		within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
		b := startCandidateClients(t, kc, kc, ns, "b", false, lease, testDeadline, testRetry, probed("192.0.2.2", pb, quiet))
		within(t, "b probing a at its probe IP", func() bool {
			return pb.target("a") == netip.MustParseAddr("192.0.2.1") && len(pb.targetsNow()) == 1
		})
		if got := holder(t, kc, ns).Annotations[ProbeIPAnnotation]; got != "192.0.2.1" {
			t.Errorf("lease %s %q, want a's 192.0.2.1", ProbeIPAnnotation, got)
		}
		if got := pb.payloadNow(); got != "token-192.0.2.1" {
			t.Errorf("b's probes carry %q, want a's token from the Lease", got)
		}
		if n := len(pa.targetsNow()); n != 0 {
			t.Errorf("the holder a probes %d candidates, want none", n)
		}
		// a answers no probes but renews: b must wait (renewals every
		// testRetry, well within quiet).
		pb.setDown("a", true)
		b.el.notify()
		for end := time.Now().Add(3 * quiet); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if lead, _, _ := b.state(); lead {
				t.Fatal("b took over from a renewing holder because of probes")
			}
		}
		// a dies: b takes over after quiet, not after the lease's 30 s.
		a.stop()
		<-a.done
		a.mu.Lock()
		lastRenewal := a.renewed
		a.mu.Unlock()
		within(t, "b leading after a's crash", func() bool { lead, _, _ := b.state(); return lead })
		_, acquired, _ := b.state()
		gap := acquired.Sub(lastRenewal)
		t.Logf("b acquired %v after a's last renewal (quiet %v, lease %v)", gap.Round(time.Millisecond), quiet, lease)
		if gap < quiet || gap >= lease {
			t.Errorf("b acquired %v after a's last renewal, want between quiet %v and the lease duration %v", gap, quiet, lease)
		}
		if got := holder(t, kc, ns).Annotations[ProbeIPAnnotation]; got != "192.0.2.2" {
			t.Errorf("lease %s %q after b's takeover, want b's 192.0.2.2", ProbeIPAnnotation, got)
		}
		within(t, "b probing nobody", func() bool { return len(pb.targetsNow()) == 0 })
	})

	// A holder whose probe port is closed (its process gone, its node
	// up: the kernel refuses the echoes) is taken over at once, without
	// waiting for quiet. Lease and quiet are an hour: only the refusal
	// can hand the Lease over within the test, however slow the API
	// server.
	t.Run("candidate probes: a holder whose probe port is closed is taken over at once", func(t *testing.T) {
		ns := "probes-refused"
		if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		const lease, quiet = time.Hour, time.Hour
		pa, pb := &fakeProber{}, &fakeProber{}
		a := startCandidateClients(t, kc, kc, ns, "a", false, lease, testDeadline, testRetry, probed("192.0.2.1", pa, quiet))
		within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
		b := startCandidateClients(t, kc, kc, ns, "b", false, lease, testDeadline, testRetry, probed("192.0.2.2", pb, quiet))
		within(t, "b probing a", func() bool { return pb.target("a").IsValid() })
		a.stop()
		<-a.done
		a.mu.Lock()
		lastRenewal := a.renewed
		a.mu.Unlock()
		pb.setRefused("a")
		b.el.notify() // the real prober calls onDown with the refusal
		within(t, "b leading after a's port closed", func() bool { lead, _, _ := b.state(); return lead })
		_, acquired, _ := b.state()
		t.Logf("b acquired %v after a's last renewal (quiet %v, lease %v)", acquired.Sub(lastRenewal).Round(time.Millisecond), quiet, lease)
	})

	// A stalled holder (CPU starvation on a loaded node): for longer than
	// the half lease duration of the former rule it neither renews nor
	// answers probes, then runs again. Shorter than quiet, so it keeps
	// its term: a stall is not a crash.
	t.Run("candidate probes: a holder stalled for less than quiet keeps its term", func(t *testing.T) {
		ns := "probes-stall"
		if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		quiet := candidateQuiet(DefaultLeaseDuration, DefaultCandidateProbeMisses, DefaultCandidateProbeInterval)
		// Longer than the half lease duration the former rule waited,
		// 2 renewal periods shorter than quiet.
		const stall = 550 * time.Millisecond
		gate := &writeGate{}
		writesA := leaseClient(t, cl.Config, gated(gate))
		for i := range 3 {
			pa, pb := &fakeProber{}, &fakeProber{}
			a := startCandidateClients(t, kc, writesA, ns, fmt.Sprintf("a%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, probed("192.0.2.1", pa, quiet))
			within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
			b := startCandidateClients(t, kc, kc, ns, fmt.Sprintf("b%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, probed("192.0.2.2", pb, quiet))
			within(t, "b probing a", func() bool { return pb.target(a.el.identity).IsValid() })
			time.Sleep(time.Second) // b sees renewals and answers
			gate.close()
			pb.setDown(a.el.identity, true)
			b.el.notify()
			time.Sleep(stall)
			pb.setDown(a.el.identity, false)
			gate.open()
			oneTerm(t, kc, ns, fmt.Sprintf("round %d: after a %v stall (quiet %v)", i, stall, quiet), a, b)
		}
	})

	// The defer rule: a passive candidate leaves an expired Lease to a
	// holder that answers its probes, whatever keeps the holder from
	// renewing, and takes it over once the holder answers none, or at
	// once when it is released.
	t.Run("candidate probes: an expired lease whose holder answers is left to it", func(t *testing.T) {
		ns := "probes-defer"
		if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		quiet := candidateQuiet(DefaultLeaseDuration, DefaultCandidateProbeMisses, DefaultCandidateProbeInterval)
		start := func(id, ip string, p *fakeProber, release bool) *candidate {
			return startCandidateClients(t, kc, kc, ns, id, release, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, probed(ip, p, quiet))
		}
		pa, pb, pc := &fakeProber{}, &fakeProber{}, &fakeProber{}
		a := start("a", "192.0.2.1", pa, false)
		within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
		b := start("b", "192.0.2.2", pb, true)
		within(t, "b probing a", func() bool { return pb.target("a").IsValid() })
		// a stops renewing without a release (as if cut off from the API
		// server) while b's probes find it answering.
		a.stop()
		<-a.done
		for end := time.Now().Add(5 * DefaultLeaseDuration); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if lead, _, _ := b.state(); lead {
				t.Fatal("b took over an expired lease whose holder answers its probes")
			}
		}
		if h := ptr.Deref(holder(t, kc, ns).Spec.HolderIdentity, ""); h != "a" {
			t.Fatalf("holder %q after 5 lease durations without renewal, want a", h)
		}
		pb.setDown("a", true)
		b.el.notify() // the real prober calls onDown with each echo lost
		within(t, "b leading once a answers no probes", func() bool { lead, _, _ := b.state(); return lead })
		// A released Lease is taken at once, although b answers.
		c := start("c", "192.0.2.3", pc, false)
		within(t, "c probing b", func() bool { return pc.target("b").IsValid() })
		b.stop() // releases
		<-b.done
		within(t, "c leading after b's release", func() bool { lead, _, _ := c.state(); return lead })
	})

	// Fail static through an etcd freeze with candidate probes (the lab's
	// c1 etcd fault, where the passive once won the expired Lease at the
	// thaw: a takeover write it sent during the freeze, queued, executed
	// before the holder's renewals): the holder answers, so the passive
	// sends no write at all, and the holder's renewals after the thaw
	// keep its one term.
	t.Run("frozen etcd, the holder answering probes: it keeps its term", func(t *testing.T) {
		ns := "freeze-etcd"
		if _, err := kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var passiveWrites atomic.Int32
		writesA, writesB := leaseClient(t, cl.Config, nil), leaseClient(t, cl.Config, counting(&passiveWrites))
		etcd := cl.Process("etcd")
		quiet := candidateQuiet(DefaultLeaseDuration, DefaultCandidateProbeMisses, DefaultCandidateProbeInterval)
		for i := range 3 {
			pa, pb := &fakeProber{}, &fakeProber{}
			a := startCandidateClients(t, kc, writesA, ns, fmt.Sprintf("a%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, probed("192.0.2.1", pa, quiet))
			within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
			b := startCandidateClients(t, kc, writesB, ns, fmt.Sprintf("b%d", i), false, DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod, probed("192.0.2.2", pb, quiet))
			within(t, "b probing a", func() bool { return pb.target(a.el.identity).IsValid() })
			time.Sleep(time.Second) // b sees renewals
			passiveWrites.Store(0)
			freezeRound(t, kc, ns, etcd, 5*DefaultLeaseDuration, i, a, b)
			if n := passiveWrites.Load(); n != 0 {
				t.Errorf("round %d: the passive b sent %d lease writes while the holder answered its probes, want none", i, n)
			}
		}
	})

	t.Run("a leader whose lease is taken steps down", func(t *testing.T) {
		ns := "kube-node-lease"
		a := startCandidate(t, kc, ns, "a", false)
		within(t, "a leading", func() bool { lead, _, _ := a.state(); return lead })
		within(t, "an intruder writing the lease", func() bool {
			l := holder(t, kc, ns)
			l.Spec.HolderIdentity = ptr.To("intruder")
			_, err := kc.CoordinationV1().Leases(ns).Update(context.Background(), l, metav1.UpdateOptions{})
			return err == nil // a conflict with a renewal: read again
		})
		within(t, "a stepping down", func() bool { lead, _, _ := a.state(); return !lead })
		a.stop()
		<-a.done
		if h := ptr.Deref(holder(t, kc, ns).Spec.HolderIdentity, ""); h != "intruder" {
			t.Errorf("holder %q after a stepped down, want intruder (a must not overwrite it)", h)
		}
	})
}

// freezeRound SIGSTOPs proc for freeze while a leads and b watches, lets
// it run again and checks that a kept its one term (oneTerm).
func freezeRound(t *testing.T, kc kubernetes.Interface, ns string, proc interface{ PID() int }, freeze time.Duration, round int, a, b *candidate) {
	t.Helper()
	if err := syscall.Kill(proc.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(freeze)
	if err := syscall.Kill(proc.PID(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	oneTerm(t, kc, ns, fmt.Sprintf("round %d: after the freeze", round), a, b)
}

// oneTerm lets a and b run for 3 lease durations (b would have taken an
// expired Lease by then), checks that a kept its one term and b had
// none, then stops both and deletes the Lease.
func oneTerm(t *testing.T, kc kubernetes.Interface, ns, when string, a, b *candidate) {
	t.Helper()
	time.Sleep(3 * DefaultLeaseDuration)
	la, _, ta := a.state()
	lb, _, tb := b.state()
	t.Logf("%s a leading %v (%d terms), b leading %v (%d terms)", when, la, ta, lb, tb)
	if !la || ta != 1 || tb != 0 {
		t.Errorf("%s a leading %v after %d terms, b had %d terms; want a's one term only", when, la, ta, tb)
	}
	a.stop()
	b.stop()
	<-a.done
	<-b.done
	if err := kc.CoordinationV1().Leases(ns).Delete(context.Background(), kube.GatewayLease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// leaseClient is a client for an elector's reads and writes, with the
// engine's request timeout (the renew deadline), its transport wrapped
// by wrap when set.
func leaseClient(t *testing.T, cfg *rest.Config, wrap func(http.RoundTripper) http.RoundTripper) kubernetes.Interface {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Timeout = DefaultRenewDeadline
	if wrap != nil {
		c.Wrap(wrap)
	}
	kc, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// counting counts the writes (create, update) into n.
func counting(n *atomic.Int32) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return &countingWrites{rt: rt, n: n} }
}

// countingWrites counts the create and update requests through rt.
type countingWrites struct {
	rt http.RoundTripper
	n  *atomic.Int32
}

func (c *countingWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// WrappedRoundTripper lets client-go cancel requests through rt.
func (c *countingWrites) WrappedRoundTripper() http.RoundTripper { return c.rt }

// writeGate holds every create and update request while closed, as a
// stalled holder sends none.
type writeGate struct {
	mu     sync.Mutex
	closed chan struct{} // nil: open
}

func (g *writeGate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed == nil {
		g.closed = make(chan struct{})
	}
}

func (g *writeGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed != nil {
		close(g.closed)
		g.closed = nil
	}
}

func (g *writeGate) wait() {
	g.mu.Lock()
	c := g.closed
	g.mu.Unlock()
	if c != nil {
		<-c
	}
}

// gated holds the writes (create, update) at gate.
func gated(gate *writeGate) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper { return &gatedWrites{rt: rt, gate: gate} }
}

// gatedWrites holds create and update requests through rt at gate.
type gatedWrites struct {
	rt   http.RoundTripper
	gate *writeGate
}

func (g *gatedWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		g.gate.wait()
	}
	return g.rt.RoundTrip(r)
}

// WrappedRoundTripper lets client-go cancel requests through rt.
func (g *gatedWrites) WrappedRoundTripper() http.RoundTripper { return g.rt }

// probed gives an elector candidate probes through p, its probe IP ip.
func probed(ip string, p *fakeProber, quiet time.Duration) func(*elector) {
	return func(el *elector) {
		el.probeIP, el.probeToken, el.quiet = netip.MustParseAddr(ip), "token-"+ip, quiet
		el.holders = &holderProbe{p: p, misses: DefaultCandidateProbeMisses, onDown: el.notify}
	}
}

// fakeProber is a prober whose answers the test decides: a target set
// down has lost probeWindow echoes in a row, the others answered the
// last one just now.
type fakeProber struct {
	mu      sync.Mutex
	payload string
	targets map[string]netip.Addr
	down    map[string]bool
	refused map[string]bool
}

func (f *fakeProber) SetTargets(t map[string]netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets = t
}

func (f *fakeProber) SetPayload(data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.payload = string(data)
}

func (f *fakeProber) payloadNow() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.payload
}

func (f *fakeProber) Stats() map[string]probeStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]probeStats{}
	for id := range f.targets {
		switch {
		case f.refused[id]:
			out[id] = probeStats{Sent: probeWindow, Lost: 1, LostInARow: 1, LastReply: time.Now(), Refused: true}
		case f.down[id]:
			out[id] = probeStats{Sent: probeWindow, Lost: probeWindow, LostInARow: probeWindow}
		default:
			out[id] = probeStats{Sent: probeWindow, LastReply: time.Now()}
		}
	}
	return out
}

func (f *fakeProber) Close() error { return nil }

func (f *fakeProber) setDown(id string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down == nil {
		f.down = map[string]bool{}
	}
	f.down[id] = down
}

// setRefused makes id's probes refused (its port closed).
func (f *fakeProber) setRefused(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused == nil {
		f.refused = map[string]bool{}
	}
	f.refused[id] = true
}

func (f *fakeProber) target(id string) netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.targets[id]
}

func (f *fakeProber) targetsNow() map[string]netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.targets
}

// TestAnswerProbeNotesAStandby: a holder answers a candidate's probe and
// notes it when it carries the holder's token (a passive candidate is
// watching: a stop tears down before it releases the Lease); a probe
// without the token is answered but noted as nobody's; a candidate that
// holds nothing neither answers nor counts as probed.
func TestAnswerProbeNotesAStandby(t *testing.T) {
	el := &elector{probeToken: "secret"}
	if el.answerProbe([]byte("secret")) || el.probedWithin(time.Hour) {
		t.Fatal("a candidate without the Lease answered a probe or counts as probed")
	}
	el.renewed = time.Now()
	for _, data := range []string{"", "causeway-health", "secre", "secret2"} {
		if !el.answerProbe([]byte(data)) {
			t.Errorf("the holder did not answer a probe carrying %q", data)
		}
		if el.probedWithin(time.Hour) {
			t.Fatalf("a probe carrying %q, not the token, counts as a passive candidate's", data)
		}
	}
	if !el.answerProbe([]byte("secret")) || !el.probedWithin(time.Second) {
		t.Fatal("the holder did not answer a probe with its token, or did not note it")
	}
	el.probedAt.Store(time.Now().Add(-time.Second).UnixNano())
	if el.probedWithin(300 * time.Millisecond) {
		t.Error("a probe a second old counts within 300 ms")
	}
}
