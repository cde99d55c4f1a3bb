package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/cable/ipsec"
	"github.com/causeway-net/causeway/pkg/ctl"
)

// TestLabIPsec runs the smallest lab that shows the IPsec cable end to
// end: two clusters of two nodes (c2 with c3's non-overlapping CIDRs, so
// one control plane less than the default lab), gateways running
// strongSwan charon with kernel-libipsec. It checks that `show
// connections` reports both directions connected, that pod ↔ pod and
// pod → ClusterIP traffic flows both ways with the client's pod address
// seen by the server, that it crossed charon's ipsec0, and that `lab
// down` leaves no charon behind.
func TestLabIPsec(t *testing.T) {
	if _, err := os.Stat(ipsec.Charon); err != nil {
		t.Skipf("strongSwan charon is not installed (%v): install strongswan-charon and libcharon-extra-plugins", err)
	}
	l := StartLab(t, "--cable", "ipsec", "--clusters", "2", "--nodes", "2", "--no-globalnet",
		"--pod-cidr", "c2=10.245.0.0/16", "--service-cidr", "c2=10.97.0.0/16")
	ctx := context.Background()
	st, err := lab.Load(l.Dir)
	if err != nil {
		t.Fatal(err)
	}

	waitForWithin(t, 2*time.Minute, "show connections: c1 ↔ c2 connected over ipsec", func() error {
		out, err := l.causewayctl("show", "connections", "-o", "json")
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		var rows []ctl.ConnectionRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			return fmt.Errorf("parse %q: %w", out, err)
		}
		connected := map[string]bool{}
		for _, r := range rows {
			if r.Status == v1alpha1.Connected && r.Endpoint.CableDriver == v1alpha1.CableIPsec {
				connected[r.Cluster+"→"+r.ClusterID] = true
			}
		}
		if !connected["c1→c2"] || !connected["c2→c1"] {
			return fmt.Errorf("connected ipsec tunnels %v in %s", connected, out)
		}
		return nil
	})

	rx := func(cluster string) uint64 {
		out, err := exec.Command("ip", "netns", "exec", st.Prefix+cluster+".n0", "cat", "/sys/class/net/ipsec0/statistics/rx_packets").Output()
		if err != nil {
			t.Fatalf("%s: ipsec0 counters: %v", cluster, err)
		}
		n, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := map[string]uint64{"c1": rx("c1"), "c2": rx("c2")}

	for _, dir := range []struct{ from, to string }{{"c2", "c1"}, {"c1", "c2"}} {
		cl := &corev1.Pod{}
		if err := l.Client(dir.from).Get(ctx, client.ObjectKey{Namespace: "demo", Name: "client"}, cl); err != nil {
			t.Fatal(err)
		}
		pods := &corev1.PodList{}
		if err := l.Client(dir.to).List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "whereami"}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
			ids := l.curlWhereami(dir.from+"/demo/client", "http://"+p.Status.PodIP+":8080", []string{p.Name}, 60)
			if id, ok := ids[p.Name]; ok && !strings.HasPrefix(id.Client, cl.Status.PodIP+":") {
				t.Errorf("%s's pod %s saw client %s, want %s's client pod %s", dir.to, p.Name, id.Client, dir.from, cl.Status.PodIP)
			}
		}
		svc := &corev1.Service{}
		if err := l.Client(dir.to).Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, svc); err != nil {
			t.Fatal(err)
		}
		l.waitClientSeen(dir.from+"/demo/client", "http://"+svc.Spec.ClusterIP, names, cl.Status.PodIP)
	}
	for _, c := range []string{"c1", "c2"} {
		if after := rx(c); after <= before[c] {
			t.Errorf("%s: charon's ipsec0 received %d packets before the traffic and %d after: the traffic did not cross IPsec", c, before[c], after)
		}
	}
	// No WireGuard device: the gateways run only the ipsec cable.
	for _, c := range []string{"c1", "c2"} {
		if out, _ := exec.Command("ip", "netns", "exec", st.Prefix+c+".n0", "ip", "-o", "link", "show", "type", "tun").Output(); strings.Contains(string(out), st.Prefix) {
			t.Errorf("%s: a tunnel device of the lab prefix exists besides ipsec0:\n%s", c, out)
		}
	}

	// lab down stops every charon (they run in the gateways' namespaces).
	var pids []int
	for _, c := range []string{"c1", "c2"} {
		b, err := os.ReadFile(filepath.Join(st.NodeStateDir(c, "n0"), "gateway", "ipsec", "run", "charon.pid"))
		if err != nil {
			t.Fatalf("%s: charon pid file: %v", c, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if out, err := l.lab("down", "--prefix", l.Prefix); err != nil || !strings.Contains(out, "nothing left") {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	// SIGKILLed processes take a moment to exit (and may stay zombies
	// until their reaper gets to them): wait for them to stop running.
	for _, pid := range pids {
		waitFor(t, fmt.Sprintf("charon %d gone after lab down", pid), func() error {
			if runningAs(pid, "charon") {
				return fmt.Errorf("charon %d still runs", pid)
			}
			return nil
		})
	}
	h, err := netlab.NewHost(netlab.Config{Prefix: l.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	if left, err := h.Leftovers(); err != nil || !left.Empty() {
		t.Errorf("left behind after down: %v %v", left, err)
	}
}

// runningAs tells whether process pid exists, is not a zombie, and has
// the command name comm.
func runningAs(pid int, comm string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the name may contain spaces, the state follows
	// the last ')'.
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || len(s) < end+3 {
		return false
	}
	return s[open+1:end] == comm && s[end+2] != 'Z'
}
