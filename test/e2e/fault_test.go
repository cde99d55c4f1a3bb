package e2e

import (
	"context"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/netlab"
	globalnetcontroller "github.com/causeway-net/causeway/pkg/globalnet/controller"
	"github.com/causeway-net/causeway/pkg/kube"
)

// Fault bounds of TestFaults. A fault that needs no failover costs no
// traffic by design, but a stream's longest silence on the shared 2-core
// machines the tests run on reaches a few hundred ms without any fault
// (the no-fault row measures it), so such a fault must stay below
// quietBound: well above that noise, far below the 10 s a frozen API
// server or etcd cost before fail static. failoverBound is the
// product's promise for a dead active gateway with a passive candidate.
// restartBound is for a dead active without one: the lab kubelet
// restarts it after its crash backoff (1 s), it starts and adopts its
// own term (the path back 1.5 s after the kill); TCP then waits for its
// next retransmission (≈ 2 s after the loss, or ≈ 4 s when the path
// came later than that one). A restart that waited for anything more
// (another term, the broker) exceeds it.
//
// The bounds are the path's: the UDP probe's longest silence is the
// outage. A TCP stream resumes at its first retransmission after the
// path is back, and its retransmission timeout doubles with every loss
// (200 ms, 400 ms, 800 ms, … after the first RTO), so after an outage
// of d it may stay silent up to about 2d + the first RTO: TCP's own
// backoff, not the dataplane's (a 3.8 s outage read 6.7 s on TCP). TCP
// is bounded by tcpSilenceBound.
// nodeDeaths is how many times TestFaults runs its node-death rows
// (death, revival, failback) at its end: once in make test, more by hand
// (go test ./test/e2e -run TestFaults -args -node-deaths 10).
var nodeDeaths = flag.Int("node-deaths", 1, "TestFaults: how many rounds of node death, revival and failback")

// upgrades is how many times TestFaults upgrades c1 and c3 (each time
// with another image tag): once in make test, more by hand.
var upgrades = flag.Int("upgrades", 1, "TestFaults: how many upgrades of c1 and c3 under the streams")

const (
	quietBound    = 2 * time.Second
	failoverBound = 2 * time.Second
	// upgradeBound is issue 23's for a gateway handing over to its
	// passive candidate in a rolling upgrade: a clean stop, which
	// tears down and releases the Lease to a candidate already probing
	// it, needs no failure detection.
	upgradeBound = time.Second
	restartBound = 5 * time.Second
	faultHold    = 10 * time.Second // how long a process stays frozen or dead
)

// TestFaults is issue 10's fault test. In the default lab (globalnet)
// with two gateway candidates per cluster, a TCP stream and a UDP probe
// (a message every 10 ms each, echoed) run from c3's client pod to an
// exported echo Service of c1 through its global IP:ports, served by a
// pod on c1's passive gateway node (so its replies take the route
// agent's overlay to the active gateway). Then, one at a time, each
// component is SIGKILLed (its restart held off for 10 s) or SIGSTOPped
// for 10 s, and restarted or resumed. For each fault the longest silence
// of each stream is measured and bounded — below quietBound where no
// failover is needed, below failoverBound for a dead active gateway with
// a passive candidate, below restartBound for a dead gateway without one
// — and, once it has recovered, the kernel state of every
// node (links, addresses, routes, rules, neighbours, FDB, iptables,
// nftables, cgroup BPF programs, processes; bpffs pins and WireGuard
// sockets) must equal the state before it: nothing duplicated or leaked.
// Then c1 and c3 are upgraded under the streams as `helm upgrade` with
// a new image tag does it (every Pod replaced; below upgradeBound), and
// last c1's active gateway node dies, is revived and takes over again
// (issue 23's node-death rows). The table of gaps is logged.
func TestFaults(t *testing.T) {
	l := StartLab(t, "--gateways", "2")
	ctx := context.Background()
	echo, cl, tcp, udp := l.echoStreams(ctx)

	// On a failure, every gateway and route agent log line of c1 and c3
	// since the streams started (the lab's log dump keeps only the
	// tails).
	streaming := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			l.logTimeline(streaming, time.Now())
		}
	})
	var rows []faultRow
	defer func() {
		t.Logf("FIGURE fault gaps (c3 pod → c1 pod via global IP:ports, a message every 10 ms):\n%s", gapTable(rows))
	}()
	// measure records the gaps of the streams since start (the fault's
	// beginning) and checks them against bound.
	measure := func(name string, start time.Time, bound time.Duration) {
		t.Helper()
		since := time.Now()
		flowing := bothFlowing(tcp, udp, since, 100)
		for deadline := time.Now().Add(time.Minute); flowing() != nil && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		if err := flowing(); err != nil {
			l.logTimeline(start, time.Now())
			t.Fatalf("both streams flowing after: %s: %v", name, err)
		}
		r := faultRow{name: name, tcp: tcp.Gap(start), udp: udp.Gap(start), bound: bound}
		rows = append(rows, r)
		t.Logf("%s: longest silence TCP %v, UDP %v (%d of %d lost)", name, r.tcp.Longest.Round(time.Millisecond),
			r.udp.Longest.Round(time.Millisecond), r.udp.Lost, r.udp.Sent)
		if tcpBound := tcpSilenceBound(bound, r.udp.Longest); r.tcp.Longest >= tcpBound || r.udp.Longest >= bound {
			l.logTimeline(start, time.Now())
			t.Errorf("%s: longest silence TCP %v, UDP %v; want UDP < %v, TCP < %v", name, r.tcp.Longest, r.udp.Longest, bound, tcpBound)
		}
	}
	// unchanged waits until the kernel state equals before.
	unchanged := func(name string, before kernelState) {
		t.Helper()
		var d string
		waitForWithin(t, time.Minute, "kernel state after "+name+" as before it", func() error {
			after, err := l.kernelState()
			if err != nil {
				return err
			}
			if d = before.diff(after); d != "" {
				return fmt.Errorf("differs (- before, + after):\n%s", d)
			}
			return nil
		})
	}
	state := func() kernelState {
		t.Helper()
		ks, err := l.kernelState()
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	// run injects one fault that needs no failover and checks it.
	run := func(name string, inject func()) {
		t.Helper()
		before := state()
		start := time.Now()
		inject()
		measure(name, start, quietBound)
		unchanged(name, before)
	}

	run("no fault (10 s of machine noise)", func() { time.Sleep(faultHold) })
	run("route agent, client node c3/"+cl.Spec.NodeName+": SIGKILL", func() {
		l.killHeld(ctx, daemon("c3", cl.Spec.NodeName, "route-agent"))
	})
	run("route agent, server node c1/"+echo.Spec.NodeName+": SIGKILL", func() {
		l.killHeld(ctx, daemon("c1", echo.Spec.NodeName, "route-agent"))
	})
	for _, c := range []string{"c1", "c3"} {
		run("MCS controller "+c+": SIGKILL", func() { l.killHeld(ctx, daemon(c, "n0", "mcs-controller")) })
	}
	// The globalnet controllers decide global addresses and program
	// nothing: while one is dead its GlobalIngress objects stay and the
	// active gateway keeps translating from them (fail static). The
	// restarted one takes its Lease over and keeps every pair it finds.
	for _, c := range []string{"c1", "c3"} {
		run("globalnet controller "+c+": SIGKILL", func() {
			held := l.globalIngresses(ctx, c)
			gn := daemon(c, "n0", "globalnet")
			holder := l.leaseHolder(ctx, c, globalnetcontroller.LeaderElectionID)
			l.killHeld(ctx, gn)
			waitForWithin(t, time.Minute, c+"'s restarted globalnet controller holding its Lease", func() error {
				if now := l.leaseHolder(ctx, c, globalnetcontroller.LeaderElectionID); now == "" || now == holder {
					return fmt.Errorf("holder %q, the killed one was %q", now, holder)
				}
				return nil
			})
			if got := l.globalIngresses(ctx, c); !reflect.DeepEqual(got, held) {
				t.Errorf("%s's GlobalIngress specs after its globalnet controller's restart:\n%v\nwant as before:\n%v", c, got, held)
			}
		})
	}
	run("c1 kube-apiserver: SIGSTOP", func() { l.freeze(ctx, controlPlane("c1", "kube-apiserver")) })
	run("c1 etcd: SIGSTOP", func() { l.freeze(ctx, controlPlane("c1", "etcd")) })
	run("broker kube-apiserver: SIGSTOP", func() { l.freeze(ctx, controlPlane("broker", "kube-apiserver")) })
	run("CoreDNS c3: SIGKILL (restarted by the lab kubelet)", func() {
		dns := coreDNS("c3")
		pid := l.pid(ctx, dns)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		l.waitRestarted(ctx, dns, pid)
		l.checkEchoName(ctx)
	})

	// The active gateway without a passive candidate: the other c1
	// candidate is frozen, so only the killed one's own restart (by the
	// lab kubelet) brings the tunnel back; it adopts its own term.
	active := l.activeGateway(ctx, "c1")
	passive := l.waitStandby(ctx, "c1", active)
	before := state()
	start := time.Now()
	resumePassive := l.signalUntil(l.pid(ctx, daemon("c1", passive, "gateway")), syscall.SIGSTOP, syscall.SIGCONT)
	gw := daemon("c1", active, "gateway")
	pid := l.pid(ctx, gw)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l.waitRestarted(ctx, gw, pid)
	measure("active gateway c1/"+active+", no passive candidate (frozen): SIGKILL, restarted", start, restartBound)
	resumePassive()
	if got := l.activeGateway(ctx, "c1"); got != active {
		t.Errorf("after its restart without a passive candidate, c1's active gateway is %s, want %s", got, active)
	}
	unchanged("the gateway restart", before)

	// The active gateway with a passive candidate, twice per cluster:
	// the passive takes over, then the first one again, so that the
	// kernel state is compared with the same roles. In c1 (the server's
	// side) one of the two moves the active onto the server pod's node,
	// in c3 (the client's) onto the client pod's: flows that node
	// forwarded while passive must be translated by it once active.
	for _, c := range []string{"c1", "c3"} {
		before = state()
		first := l.activeGateway(ctx, c)
		second := l.waitStandby(ctx, c, first)
		for _, dead := range []string{first, second} {
			start := time.Now()
			took := l.failover(ctx, c, dead)
			measure(fmt.Sprintf("active gateway %s/%s, passive candidate %s: SIGKILL", c, dead, took), start, failoverBound)
		}
		unchanged("two gateway failovers in "+c, before)
	}

	// An upgrade of every workload of c1 and c3 (helm upgrade with a
	// changed image tag: every Pod replaced, DaemonSets one node at a
	// time, each active gateway handing over to its passive candidate
	// by a clean stop). No kernel state comparison: the active roles may
	// end on other nodes. -upgrades repeats it with other tags.
	st, err := lab.Load(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range *upgrades {
		tag := upgradeTag
		if i > 0 {
			tag = fmt.Sprintf("%s-%d", upgradeTag, i)
		}
		clusters := []string{"c1", "c3"}
		old := map[types.UID]string{}
		for _, c := range clusters {
			for _, p := range l.causewayPods(ctx, c) {
				old[p.UID] = c + "/" + p.Name
			}
		}
		start := time.Now()
		for _, c := range clusters {
			l.upgrade(ctx, st, c, "image.tag="+tag)
		}
		for _, c := range clusters {
			for _, p := range l.causewayPods(ctx, c) {
				if name, ok := old[p.UID]; ok {
					t.Errorf("Pod %s survived the upgrade", name)
				}
				if img := p.Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+tag) {
					t.Errorf("%s/%s runs %s once the upgrade rolled out, want tag %s", c, p.Name, img, tag)
				}
			}
		}
		measure(fmt.Sprintf("helm upgrade of c1 and c3, image tag %s (every Pod replaced, in %s)", tag, time.Since(start).Round(time.Second)), start, upgradeBound)
	}

	// Node death, revival and failback: c1's active gateway node dies
	// (every process stopped, cables pulled; the echo pod lives on the
	// other node), the passive takes over; the dead node is revived (a
	// resume, with the state it had: it must step down without
	// disturbing the new active's path); then the new active's gateway
	// is killed and the revived node takes over again, as before the
	// death. -node-deaths repeats the three rows.
	for i := range *nodeDeaths {
		round := ""
		if *nodeDeaths > 1 {
			round = fmt.Sprintf(" [%d/%d]", i+1, *nodeDeaths)
		}
		if active := l.activeGateway(ctx, "c1"); active == echo.Spec.NodeName {
			// The upgrade left the active on the echo pod's node, which
			// must live: move it off first.
			start := time.Now()
			took := l.failover(ctx, "c1", active)
			measure(fmt.Sprintf("active gateway c1/%s, passive candidate %s: SIGKILL%s", active, took, round), start, failoverBound)
		}
		before = state()
		dead := l.activeGateway(ctx, "c1")
		other := l.waitStandby(ctx, "c1", dead)
		start = time.Now()
		_, revive := l.killNode("c1", dead)
		if got := l.waitNewActive(ctx, "c1", dead); got != other {
			t.Errorf("after node %s died, c1's active gateway is %s, want %s", dead, got, other)
		}
		time.Sleep(time.Until(start.Add(faultHold)))
		measure(fmt.Sprintf("node c1/%s of the active gateway: dead (stopped, unplugged), passive %s takes over%s", dead, other, round), start, failoverBound)
		start = time.Now()
		revive()
		l.waitStandby(ctx, "c1", other)
		measure(fmt.Sprintf("node c1/%s revived: steps down%s", dead, round), start, quietBound)
		start = time.Now()
		if took := l.failover(ctx, "c1", other); took != dead {
			t.Errorf("failback: %s took over from %s, want the revived %s", took, other, dead)
		}
		measure(fmt.Sprintf("failback: active gateway c1/%s SIGKILL, revived %s takes over%s", other, dead, round), start, failoverBound)
		unchanged("node death, revival and failback"+round, before)
	}
}

// echoStreams starts TestFaults' streams in a lab with two gateway
// candidates per cluster: an echo Service of c1 exported, served by a
// pod on c1's passive candidate node (its replies take the route agent's
// overlay to the active gateway), and a TCP stream and a UDP probe (a
// message every 10 ms each, echoed) from c3's client pod to its global
// IP:ports. It returns the echo and client pods and the streams.
func (l *Lab) echoStreams(ctx context.Context) (echo, cl *corev1.Pod, tcp, udp *stream) {
	l.t.Helper()
	c1active := l.activeGateway(ctx, "c1")
	c1passive := l.waitStandby(ctx, "c1", c1active)
	echo, tcpAddr, udpAddr := l.exportEcho(ctx, "c1", c1passive)
	cl = &corev1.Pod{}
	if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "client"}, cl); err != nil {
		l.t.Fatalf("c3 client pod: %v", err)
	}
	names := netlab.Names{Prefix: l.Prefix}
	serverNS := filepath.Join("/run/netns", names.Pod("c1", echo.Spec.NodeName, "demo", echo.Name))
	clientNS := filepath.Join("/run/netns", names.Pod("c3", cl.Spec.NodeName, "demo", cl.Name))
	tcp, udp = startStreams(l.t, serverNS, clientNS, streamEnds{"7070", tcpAddr}, streamEnds{"7071", udpAddr}, 10*time.Millisecond)
	l.t.Logf("streams: c3 pod %s on %s → c1 pod %s on %s (c1's active gateway %s) via %s (TCP) and %s (UDP)",
		cl.Name, cl.Spec.NodeName, echo.Name, echo.Spec.NodeName, c1active, tcpAddr, udpAddr)
	return echo, cl, tcp, udp
}

// faultRow is one line of TestFaults' table.
// tcpSilenceBound bounds a TCP stream's longest silence after a fault
// whose path bound is bound and whose measured outage (the UDP probe's
// longest silence) is udp: within bound, or within TCP's backoff over
// that outage (twice it plus a second for the first RTO and the echo).
func tcpSilenceBound(bound, udp time.Duration) time.Duration {
	return max(bound, 2*udp+time.Second)
}

type faultRow struct {
	name     string
	tcp, udp gapStats
	bound    time.Duration
}

// gapTable renders rows as a Markdown table.
func gapTable(rows []faultRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| fault (each held %v) | TCP longest silence | UDP longest silence | UDP lost/sent | bound |\n|---|---|---|---|---|\n", faultHold)
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %v | %v | %d/%d | < %v |\n", r.name, r.tcp.Longest.Round(time.Millisecond),
			r.udp.Longest.Round(time.Millisecond), r.udp.Lost, r.udp.Sent, r.bound)
	}
	return b.String()
}

// exportEcho creates, in cluster's namespace demo, a pod "echo" on node
// (the lab's client program: the test serves the echo in its namespace)
// and a Service with TCP port 7070 and UDP port 7071, exports it, and
// returns the pod and the Service's global IP:ports.
func (l *Lab) exportEcho(ctx context.Context, cluster, node string) (*corev1.Pod, string, string) {
	l.t.Helper()
	c := l.Client(cluster)
	labels := map[string]string{"app": "echo"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo", Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			Containers:                    []corev1.Container{{Name: "echo", Image: apps.ImageClient}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{
			{Name: "tcp", Port: 7070, Protocol: corev1.ProtocolTCP},
			{Name: "udp", Port: 7071, Protocol: corev1.ProtocolUDP},
		}},
	}
	for _, o := range []client.Object{pod, svc} {
		if err := c.Create(ctx, o); err != nil {
			l.t.Fatalf("%s: create %T: %v", cluster, o, err)
		}
	}
	if out, err := l.causewayctl("export", "demo/echo", "--cluster", cluster); err != nil {
		l.t.Fatalf("export demo/echo from %s: %v\n%s", cluster, err, out)
	}
	waitForWithin(l.t, time.Minute, "echo pod running", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
			return fmt.Errorf("phase %s, IP %q", pod.Status.Phase, pod.Status.PodIP)
		}
		return nil
	})
	addrs := map[string]string{}
	waitForWithin(l.t, time.Minute, cluster+"'s global IP:ports of demo/echo", func() error {
		gi := &v1alpha1.GlobalIngress{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "echo"}, gi); err != nil {
			return err
		}
		for _, p := range gi.Spec.Ports {
			addrs[p.Protocol] = net.JoinHostPort(gi.Spec.IP, strconv.Itoa(int(p.GlobalPort)))
		}
		if addrs["TCP"] == "" || addrs["UDP"] == "" {
			return fmt.Errorf("spec %+v", gi.Spec)
		}
		return nil
	})
	return pod, addrs["TCP"], addrs["UDP"]
}

// checkEchoName checks that echo.demo.svc.clusterset.local resolves to
// c3's clusterset VIP of the echo Service (CoreDNS answers).
func (l *Lab) checkEchoName(ctx context.Context) {
	l.t.Helper()
	si := &mcsv1beta1.ServiceImport{}
	waitFor(l.t, "c3's ServiceImport demo/echo with a VIP", func() error {
		if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "echo"}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) != 1 {
			return fmt.Errorf("IPs %v", si.Spec.IPs)
		}
		return nil
	})
	waitFor(l.t, "echo.demo.svc.clusterset.local resolving in c3", func() error {
		out, err := l.Exec("c3/demo/client", "dig", "+short", "echo.demo.svc.clusterset.local")
		if err != nil || strings.TrimSpace(out) != si.Spec.IPs[0] {
			return fmt.Errorf("dig: %v: %q, want %s", err, out, si.Spec.IPs[0])
		}
		return nil
	})
}

// killHeld SIGKILLs c, keeps it from being restarted for faultHold, then
// lets it restart and waits until it runs.
func (l *Lab) killHeld(ctx context.Context, c component) {
	l.t.Helper()
	pid := l.pid(ctx, c)
	resume := l.holdRestarts(ctx, c)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		l.t.Fatalf("kill %s (pid %d): %v", c, pid, err)
	}
	time.Sleep(faultHold)
	resume()
	l.waitRestarted(ctx, c, pid)
}

// globalIngresses returns the specs of cluster's GlobalIngress objects
// by namespace/name.
func (l *Lab) globalIngresses(ctx context.Context, cluster string) map[string]v1alpha1.GlobalIngressSpec {
	l.t.Helper()
	list := &v1alpha1.GlobalIngressList{}
	if err := l.Client(cluster).List(ctx, list); err != nil {
		l.t.Fatalf("%s: list GlobalIngresses: %v", cluster, err)
	}
	specs := map[string]v1alpha1.GlobalIngressSpec{}
	for _, gi := range list.Items {
		specs[gi.Namespace+"/"+gi.Name] = gi.Spec
	}
	return specs
}

// leaseHolder returns the holder of cluster's Lease name in Causeway's
// namespace ("" when none).
func (l *Lab) leaseHolder(ctx context.Context, cluster, name string) string {
	l.t.Helper()
	lease := &coordinationv1.Lease{}
	if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: name}, lease); err != nil {
		l.t.Fatalf("%s: Lease %s: %v", cluster, name, err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// freeze SIGSTOPs c for faultHold, then SIGCONTs it.
func (l *Lab) freeze(ctx context.Context, c component) {
	l.t.Helper()
	resume := l.signalUntil(l.pid(ctx, c), syscall.SIGSTOP, syscall.SIGCONT)
	time.Sleep(faultHold)
	resume()
}

// failover SIGKILLs cluster's active gateway candidate dead (its restart
// held off for faultHold), waits until another candidate has taken over,
// lets dead restart and waits until it is back as the passive candidate.
// It returns the new active's node.
func (l *Lab) failover(ctx context.Context, cluster, dead string) string {
	l.t.Helper()
	l.waitStandby(ctx, cluster, dead)
	gw := daemon(cluster, dead, "gateway")
	pid := l.pid(ctx, gw)
	resume := l.holdRestarts(ctx, gw)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		l.t.Fatalf("kill %s (pid %d): %v", gw, pid, err)
	}
	now := l.waitNewActive(ctx, cluster, dead)
	time.Sleep(time.Until(killed.Add(faultHold)))
	resume()
	l.waitRestarted(ctx, gw, pid)
	if got := l.activeGateway(ctx, cluster); got != now {
		l.t.Errorf("after %s restarted, %s's active gateway is %s, want %s (who took over)", dead, cluster, got, now)
	}
	l.waitStandby(ctx, cluster, now)
	return now
}
