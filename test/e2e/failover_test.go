package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/kube"
)

// TestGatewayFailover runs a lab with two gateway candidates per cluster
// and kills c1's active gateway (SIGKILL: no lease release, its embedded
// WireGuard device dies with it) under a running transfer: one TCP
// connection from c3's client pod to a c1 pod (pod IP, through the
// tunnel) carrying a 16-byte message every 10 ms, echoed back, plus a UDP
// echo probe at the same rate. The c1 pod sits on the killed gateway's
// node, so its replies also depend on that node's route agent re-pointing
// to the new gateway.
//
// Checked: the passive candidate takes over, the SAME TCP connection
// carries data (in order, nothing lost) after the takeover, and when the
// killed gateway restarts it reports itself passive and the connection
// keeps carrying data. The gap (longest silence of each stream) and a timeline
// from the daemons' logs are reported, not asserted (shared machines).
func TestGatewayFailover(t *testing.T) {
	// Flat networks (no globalnet): the streams run pod to pod, and the
	// lab's flat-network promises are checked here too.
	l := StartLab(t, "--gateways", "2", "--no-globalnet")
	ctx := context.Background()
	c1, c3 := l.Client("c1"), l.Client("c3")
	l.checkCrossCluster(ctx)

	old := l.activeGateway(ctx, "c1")
	pods := &corev1.PodList{}
	if err := c1.List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "whereami"}); err != nil || len(pods.Items) == 0 {
		t.Fatalf("c1 whereami pods: %v (%d)", err, len(pods.Items))
	}
	target := pods.Items[0]
	for _, p := range pods.Items {
		if p.Spec.NodeName == old {
			target = p
		}
	}
	if target.Spec.NodeName != old {
		t.Logf("no c1 whereami pod on the active gateway's node %s; using %s on %s", old, target.Name, target.Spec.NodeName)
	}
	cl := &corev1.Pod{}
	if err := c3.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "client"}, cl); err != nil {
		t.Fatalf("c3 client pod: %v", err)
	}
	// The tunnel is up before the streams start.
	l.curlWhereami("c3/demo/client", "http://"+target.Status.PodIP+":8080", []string{target.Name}, 60)

	names := netlab.Names{Prefix: l.Prefix}
	serverNS := filepath.Join("/run/netns", names.Pod("c1", target.Spec.NodeName, "demo", target.Name))
	clientNS := filepath.Join("/run/netns", names.Pod("c3", cl.Spec.NodeName, "demo", cl.Name))
	const interval = 10 * time.Millisecond
	tcp, udp := startStreams(t, serverNS, clientNS, streamEnds{"7070", net.JoinHostPort(target.Status.PodIP, "7070")},
		streamEnds{"7071", net.JoinHostPort(target.Status.PodIP, "7071")}, interval)

	// Hold off the kubelet's restart of the killed gateway (its Pod's
	// cgroup frozen): a restarted candidate holding the same identity
	// may renew its own unexpired lease before the passive acquires it,
	// and this test is about the passive taking over.
	// Another candidate runs steadily and stands by: one still starting
	// (or backing off) could not take over meanwhile.
	l.waitStandby(ctx, "c1", old)
	gw := daemon("c1", old, "gateway")
	pid := l.pid(ctx, gw)
	resume := l.holdRestarts(ctx, gw)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (pid %d): %v", gw, pid, err)
	}
	now := l.waitNewActive(ctx, "c1", old)
	takenOver := time.Now()
	// The correctness check: the same connection carries new data.
	waitForWithin(t, time.Minute, "the TCP connection carrying data through "+now, bothFlowing(tcp, udp, takenOver, 100))

	tg, ug := tcp.Gap(killed), udp.Gap(killed)
	t.Logf("failover c1 %s → %s (SIGKILL), streams c3 pod → c1 pod %s on %s, a message every %v:", old, now, target.Name, target.Spec.NodeName, interval)
	t.Logf("FIGURE gateway failover, TCP (same connection): longest silence %v (began %v after the kill); first echo of a message sent after the kill %v after it",
		tg.Longest.Round(time.Millisecond), tg.LongestAt.Round(time.Millisecond), tg.FirstNew.Round(time.Millisecond))
	t.Logf("FIGURE gateway failover, UDP probe: longest silence %v (began %v after the kill), %d of %d probes lost; first answer to a probe sent after the kill %v after it",
		ug.Longest.Round(time.Millisecond), ug.LongestAt.Round(time.Millisecond), ug.Lost, ug.Sent, ug.FirstNew.Round(time.Millisecond))
	l.logTimeline(killed, killed.Add(tg.FirstNew+tg.Longest+time.Second))

	// The killed candidate restarts, finds the lease held by the new
	// active and stays passive; the connection is not disturbed.
	resume()
	l.waitRestarted(ctx, gw, pid)
	// Exactly one active again: the restarted candidate reported itself
	// passive. (It cannot adopt its old term, the Lease names the new
	// active; a different active here would be a later, separate
	// failover, e.g. a renewal too slow on an overloaded API server.)
	if got := l.activeGateway(ctx, "c1"); got != now {
		t.Logf("after %s restarted, c1's active gateway is %s (was %s): another failover happened meanwhile", old, got, now)
	}
	restarted := time.Now()
	waitForWithin(t, time.Minute, "the TCP connection still carrying data after "+old+" came back", bothFlowing(tcp, udp, restarted, 100))
	if g := tcp.Gap(restarted); g.Longest > 0 {
		t.Logf("after %s came back as passive: longest TCP silence %v", old, g.Longest.Round(time.Millisecond))
	}
}

// logTimeline logs the gateway and route-agent log lines of c1 and c3
// written between from and to, in time order, relative to from.
func (l *Lab) logTimeline(from, to time.Time) {
	l.t.Helper()
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Logf("timeline: %v", err)
		return
	}
	files, err := st.LogFiles()
	if err != nil {
		l.t.Logf("timeline: %v", err)
		return
	}
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, f := range files {
		// Pod logs: <cluster>/causeway-system/<pod>/<container>.
		parts := strings.Split(f.Unit, "/")
		if len(parts) != 4 || (parts[0] != "c1" && parts[0] != "c3") || parts[1] != kube.Namespace || (parts[3] != "gateway" && parts[3] != "route-agent") {
			continue
		}
		fh, err := os.Open(f.Path)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			at, rest, ok := logTime(sc.Text())
			if !ok || at.Before(from.Add(-time.Second)) || at.After(to) || strings.Contains(rest, "level=DEBUG") {
				continue
			}
			if len(rest) > 240 {
				rest = rest[:240] + "…"
			}
			lines = append(lines, line{at, fmt.Sprintf("%+8.3fs %-32s %s", at.Sub(from).Seconds(), parts[0]+"/"+parts[2], rest)})
		}
		fh.Close()
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	var b strings.Builder
	for _, ln := range lines {
		b.WriteString(ln.text + "\n")
	}
	l.t.Logf("timeline (log lines of c1's and c3's gateways and route agents, seconds after the kill at %s):\n%s", from.Format(time.StampMilli), b.String())
}

// logTime splits a slog text line into its time and the rest.
func logTime(s string) (time.Time, string, bool) {
	first, rest, ok := strings.Cut(s, " ")
	v, isTime := strings.CutPrefix(first, "time=")
	if !ok || !isTime {
		return time.Time{}, "", false
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, "", false
	}
	return at, rest, true
}

// activeGateway waits for exactly one active gateway candidate in cluster
// and returns its node.
func (l *Lab) activeGateway(ctx context.Context, cluster string) string {
	l.t.Helper()
	var node string
	waitFor(l.t, "one active gateway in "+cluster, func() error {
		gws := &v1alpha1.GatewayList{}
		if err := l.Client(cluster).List(ctx, gws, client.InNamespace("causeway-system")); err != nil {
			return err
		}
		var active []string
		for _, g := range gws.Items {
			if g.Status.HAStatus == v1alpha1.HAStatusActive {
				active = append(active, g.Name)
			}
		}
		if len(active) != 1 {
			return fmt.Errorf("active candidates %v of %d", active, len(gws.Items))
		}
		node = active[0]
		return nil
	})
	return node
}
