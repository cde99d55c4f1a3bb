package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/netlab"
)

// How long the whole cluster stays frozen, and the bound on the time
// requests to the VIP fail meanwhile (issue 23: every node stops
// choosing a dead cluster's backends within a second, from the active
// gateway's health checks, without any API server).
const (
	clusterFreeze     = 14 * time.Second
	clusterDeathBound = time.Second
)

// TestClusterDeath: whereami exported from c1 and c2, a request to its
// VIP from c3's client pod every 50 ms (each on its own connection, 2 s
// timeout). Every process of c1 — control plane, kubelets, kube-proxies,
// every Pod (gateway, route agents, controllers, servers) — is frozen at
// once for 14 s. The requests fail for less than a second, then c2
// answers all of them; once c1 thaws it answers again.
func TestClusterDeath(t *testing.T) {
	l := StartLab(t)
	ctx := context.Background()
	for _, c := range []string{"c1", "c2"} {
		if out, err := l.causewayctl("export", "demo/whereami", "--cluster", c); err != nil {
			t.Fatalf("export from %s: %v\n%s", c, err, out)
		}
	}
	vip := l.importVIP(ctx, "c3", "whereami")
	waitFor(t, "c3's client answered by c1 and c2 through "+vip, func() error {
		seen := map[string]bool{}
		for range 20 {
			if id, err := l.whereami("c3/demo/client", "http://"+vip); err == nil {
				seen[id.Cluster] = true
			}
		}
		if !seen["c1"] || !seen["c2"] {
			return fmt.Errorf("answered by %v", seen)
		}
		return nil
	})

	total := 5*time.Second + clusterFreeze + 20*time.Second
	reqs := l.startRequests("c3/demo/client", "http://"+vip, total)
	time.Sleep(5 * time.Second)

	frozeAt, thaw := l.freezeCluster("c1")
	time.Sleep(clusterFreeze)
	thawedAt := time.Now()
	thaw()
	results := reqs()

	var failed []time.Time
	var why []string
	byPhase := map[string]map[string]int{"before": {}, "frozen": {}, "thawed": {}}
	var c1Back time.Time
	for _, r := range results {
		phase := "frozen"
		switch {
		case r.at.Before(frozeAt):
			phase = "before"
		case r.at.After(thawedAt):
			phase = "thawed"
			if r.cluster == "c1" && c1Back.IsZero() {
				c1Back = r.at
			}
		}
		byPhase[phase][r.cluster]++
		if r.cluster == "FAIL" {
			failed = append(failed, r.at)
			why = append(why, fmt.Sprintf("%s: %s", since(frozeAt, []time.Time{r.at}, 0), r.err))
		}
	}
	var outage time.Duration
	if len(failed) > 0 {
		outage = failed[len(failed)-1].Sub(failed[0]) + 50*time.Millisecond
	}
	t.Logf("FIGURE whole-cluster death (c1 frozen %s; a request to the VIP from c3 every 50 ms): %d requests, by phase %v; %d failed over %s (first %s, last %s after the freeze); c1 answered again %s after the thaw",
		clusterFreeze, len(results), byPhase, len(failed), outage.Round(time.Millisecond),
		since(frozeAt, failed, 0), since(frozeAt, failed, len(failed)-1), sinceOrNever(thawedAt, c1Back))
	if len(results) < int(total/(60*time.Millisecond)) {
		t.Errorf("only %d requests ran in %s", len(results), total)
	}
	if byPhase["before"]["c1"] == 0 || byPhase["before"]["c2"] == 0 {
		t.Errorf("before the freeze: answers %v, want c1 and c2", byPhase["before"])
	}
	for _, at := range failed {
		if at.Before(frozeAt.Add(-2*time.Second)) || at.After(thawedAt) {
			t.Errorf("a request failed at %s, outside the freeze", since(frozeAt, []time.Time{at}, 0))
		}
	}
	if outage >= clusterDeathBound {
		t.Errorf("requests failed for %s, want < %s; the failures (after the freeze):\n%s", outage, clusterDeathBound, strings.Join(why, "\n"))
		l.logTimeline(frozeAt.Add(-time.Second), thawedAt)
	}
	if c1Back.IsZero() {
		t.Errorf("c1 never answered in the %s after its thaw: %v", total-5*time.Second-clusterFreeze, byPhase["thawed"])
	}
}

// request is one request of startRequests: when it started and which
// cluster answered ("FAIL": none, err says why).
type request struct {
	at           time.Time
	cluster, err string
}

// startRequests requests url from pod every 50 ms for d, each request on
// its own connection (2 s timeout), without waiting for the previous one
// (causeway-lab app requests, run in the pod). The returned function
// waits for the end and returns the requests in start order.
func (l *Lab) startRequests(pod, url string, d time.Duration) func() []request {
	l.t.Helper()
	cmd := exec.Command(l.labBin, "--dir", l.Dir, "exec", pod, "--",
		l.labBin, "app", "requests", "--url", url, "--interval", "50ms", "--timeout", "2s", "--duration", d.String())
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	return func() []request {
		if err := cmd.Wait(); err != nil {
			l.t.Fatalf("requests from %s: %v\n%s", pod, err, stderr.String())
		}
		var rs []request
		for _, line := range strings.Split(out.String(), "\n") {
			r, ok := apps.ParseRequest(line)
			if !ok {
				continue
			}
			if r.Cluster == "" {
				r.Cluster = "FAIL"
			}
			rs = append(rs, request{at: r.At, cluster: r.Cluster, err: r.Err})
		}
		slices.SortFunc(rs, func(a, b request) int { return a.at.Compare(b.at) })
		return rs
	}
}

// freezeCluster stops every process of a lab cluster at once: its Pods
// and node processes by freezing the cluster's cgroup, its control
// plane, kubelets and kube-proxies (supervisor units) by SIGSTOP. It
// returns when the freeze began and the function that resumes them all
// (also called at the end of the test).
func (l *Lab) freezeCluster(cluster string) (time.Time, func()) {
	l.t.Helper()
	var units []string
	for _, u := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		units = append(units, cluster+"/"+u)
	}
	for _, n := range []string{"n0", "n1"} {
		units = append(units, cluster+"/"+n+"/kubelet", cluster+"/"+n+"/kube-proxy")
	}
	h, err := netlab.NewHost(netlab.Config{Prefix: l.Prefix})
	if err != nil {
		l.t.Fatal(err)
	}
	return l.stopAll(h.Cgroups().Cluster(cluster), units, nil)
}

// killNode makes a lab node dead as a powered-off machine looks to the
// rest of the lab, until the returned function revives it (also called
// at the end of the test): every process of the node stopped at once
// (its cgroup frozen: Pods, Causeway daemons; its kubelet and
// kube-proxy units SIGSTOPped) and its cables pulled (its ports on the
// cluster's switch and on the WAN set down). The node's own kernel
// state stays: the revival is a resume, not a reboot. It returns when
// the node died.
func (l *Lab) killNode(cluster, node string) (time.Time, func()) {
	l.t.Helper()
	h, err := netlab.NewHost(netlab.Config{Prefix: l.Prefix})
	if err != nil {
		l.t.Fatal(err)
	}
	names := netlab.Names{Prefix: l.Prefix}
	ports := [][2]string{{names.Switch(cluster), netlab.SwitchPort(node)}, {names.WAN(), netlab.WANPort(cluster, node)}}
	return l.stopAll(h.Cgroups().Node(cluster, node), []string{cluster + "/" + node + "/kubelet", cluster + "/" + node + "/kube-proxy"}, ports)
}

// stopAll freezes cgroup, SIGSTOPs the supervisor units and sets the
// links down (each a namespace and a link name), all at once, and
// returns when and the function that undoes it all in the reverse
// order (also called at the end of the test).
func (l *Lab) stopAll(cgroup string, units []string, links [][2]string) (time.Time, func()) {
	l.t.Helper()
	var pids []int
	for _, u := range units {
		pids = append(pids, l.unitPID(u))
	}
	setLinks := func(state string) error {
		for _, nl := range links {
			if out, err := exec.Command("ip", "-n", nl[0], "link", "set", nl[1], state).CombinedOutput(); err != nil {
				return fmt.Errorf("ip -n %s link set %s %s: %w: %s", nl[0], nl[1], state, err, out)
			}
		}
		return nil
	}
	freeze := filepath.Join(cgroup, "cgroup.freeze")
	at := time.Now()
	if err := os.WriteFile(freeze, []byte("1"), 0); err != nil {
		l.t.Fatalf("freeze %s: %v", freeze, err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			l.t.Errorf("SIGSTOP %d: %v", pid, err)
		}
	}
	if err := setLinks("down"); err != nil {
		l.t.Error(err)
	}
	done := false
	undo := func() {
		if done {
			return
		}
		done = true
		if err := setLinks("up"); err != nil {
			l.t.Error(err)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
		_ = os.WriteFile(freeze, []byte("0"), 0)
	}
	l.t.Cleanup(undo)
	return at, undo
}

// since formats how long after t0 the i-th of ts was ("-" without one).
func since(t0 time.Time, ts []time.Time, i int) string {
	if i < 0 || i >= len(ts) {
		return "-"
	}
	return ts[i].Sub(t0).Round(time.Millisecond).String()
}

func sinceOrNever(t0, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Sub(t0).Round(time.Millisecond).String()
}
