// Package e2e runs end-to-end tests on a real lab (`causewayctl lab`):
// real control planes, namespaces as nodes and pods, the real binaries.
// They need root and the Kubernetes binaries, and run only when
// CAUSEWAY_E2E=1 (`make test` sets it).
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

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/kube"
)

// Lab is a lab brought up for a test.
type Lab struct {
	t      *testing.T
	ctl    string // causewayctl binary
	labBin string // causeway-lab binary
	Dir    string
	Prefix string
}

// StartLab builds the binaries and brings a lab up with a unique prefix and
// state directory; it is taken down when the test ends.
func StartLab(t *testing.T, args ...string) *Lab {
	t.Helper()
	return startLab(t, nil, args...)
}

// startLab is StartLab with beforeUp run on the directory of the built
// binaries before `lab up` (e.g. to put Causeway's image there).
func startLab(t *testing.T, beforeUp func(bin string), args ...string) *Lab {
	t.Helper()
	if os.Getenv("CAUSEWAY_E2E") != "1" {
		t.Skip("end-to-end lab test: set CAUSEWAY_E2E=1 (make test does)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("CAUSEWAY_E2E=1 but not root: the lab needs root")
	}
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", bin+"/", "../../cmd/...").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if beforeUp != nil {
		beforeUp(bin)
	}
	l := &Lab{t: t, ctl: filepath.Join(bin, "causewayctl"), labBin: filepath.Join(bin, "causeway-lab"), Dir: filepath.Join(t.TempDir(), "lab"),
		Prefix: fmt.Sprintf("cwe%04x-", time.Now().UnixNano()&0xffff)}
	t.Cleanup(func() {
		if t.Failed() {
			l.dumpLogs()
		}
		out, err := l.lab("down", "--prefix", l.Prefix)
		if err != nil {
			t.Errorf("lab down: %v\n%s", err, out)
		}
	})
	start := time.Now()
	out, err := l.lab(append([]string{"up", "--prefix", l.Prefix, "--k8s-bin", controlplane.DefaultBinDir()}, args...)...)
	if err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	t.Logf("lab up in %.1fs:\n%s", time.Since(start).Seconds(), out)
	return l
}

// lab runs a causeway-lab subcommand on this lab.
func (l *Lab) lab(args ...string) (string, error) {
	// --dir goes first: everything after "--" belongs to the command
	// run in a pod.
	cmd := exec.Command(l.labBin, append([]string{"--dir", l.Dir}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Exec runs a command inside a pod and returns its output.
func (l *Lab) Exec(pod string, command ...string) (string, error) {
	return l.lab(append([]string{"exec", pod, "--"}, command...)...)
}

// Client is an admin client of a cluster of the lab.
func (l *Lab) Client(cluster string) client.Client {
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	c, err := st.Client(cluster)
	if err != nil {
		l.t.Fatal(err)
	}
	return c
}

func (l *Lab) dumpLogs() {
	out, _ := l.lab("status")
	l.t.Logf("lab status:\n%s", out)
	st, err := lab.Load(l.Dir)
	if err != nil {
		return
	}
	files, _ := st.LogFiles()
	for _, f := range files {
		l.t.Logf("--- %s (last 1500 bytes)\n%s", f.Unit, controlplane.LogTail(f.Path, 1500))
	}
}

// curlWhereami curls url from pod until an answer came and every wanted
// pod name answered (bounded by attempts) and returns the replies by pod
// name.
func (l *Lab) curlWhereami(pod, url string, want []string, attempts int) map[string]apps.Identity {
	l.t.Helper()
	seen := map[string]apps.Identity{}
	var errs []string
	done := func() bool { return len(seen) > 0 && hasAll(seen, want) }
	for i := 0; i < attempts && !done(); i++ {
		id, err := l.whereami(pod, url)
		if err != nil {
			errs = append(errs, err.Error())
			time.Sleep(200 * time.Millisecond)
			continue
		}
		seen[id.Pod] = id
	}
	if !done() {
		l.t.Errorf("curl %s from %s: answers from %v after %d attempts, want all of %v; errors: %v", url, pod, keys(seen), attempts, want, errs)
	}
	return seen
}

func hasAll(seen map[string]apps.Identity, want []string) bool {
	for _, w := range want {
		if _, ok := seen[w]; !ok {
			return false
		}
	}
	return true
}

func keys(m map[string]apps.Identity) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// cableArgs are the `lab up` flags for CAUSEWAY_E2E_CABLE=vxlan|ipsec,
// which runs TestLab and TestLabDualStack over another cable driver
// (unset: none, the default WireGuard).
func cableArgs() []string {
	if c := os.Getenv("CAUSEWAY_E2E_CABLE"); c != "" {
		return []string{"--cable", c}
	}
	return nil
}

// TestLab brings the default lab up and checks what issue 3 promises:
// nodes and pods become Ready, a pod reaches a ClusterIP Service of its
// cluster by IP and by name and gets answers from both replicas, a
// second `up` changes nothing, and `down` leaves nothing behind.
//
// CAUSEWAY_E2E_CABLE=vxlan|ipsec runs it over another cable driver.
func TestLab(t *testing.T) {
	l := StartLab(t, cableArgs()...)
	ctx := context.Background()

	for _, cluster := range []string{"c1", "c2", "c3"} {
		nodes := &corev1.NodeList{}
		if err := l.Client(cluster).List(ctx, nodes); err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != 2 {
			t.Errorf("%s: %d nodes, want 2", cluster, len(nodes.Items))
		}
		for _, n := range nodes.Items {
			if !isReady(n.Status.Conditions) {
				t.Errorf("%s: node %s not Ready", cluster, n.Name)
			}
		}
		// The About API names the cluster, as kubectl shows it.
		out, err := l.lab("kubectl", cluster, "--", "get", "clusterproperties", "cluster.clusterset.k8s.io", "-o", "jsonpath={.spec.value}")
		if err != nil || strings.TrimSpace(out) != cluster {
			t.Errorf("%s: kubectl get clusterproperties cluster.clusterset.k8s.io: %q, %v", cluster, out, err)
		}
	}

	for _, cluster := range []string{"c1", "c2"} {
		c := l.Client(cluster)
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "whereami"}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		if len(names) != 2 {
			t.Fatalf("%s: whereami pods %v, want 2", cluster, names)
		}
		svc := &corev1.Service{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, svc); err != nil {
			t.Fatal(err)
		}
		client := cluster + "/demo/client"
		byIP := l.curlWhereami(client, "http://"+svc.Spec.ClusterIP, names, 40)
		for _, id := range byIP {
			if id.Cluster != cluster {
				t.Errorf("%s: ClusterIP answered from cluster %q", cluster, id.Cluster)
			}
			if !strings.HasPrefix(id.Client, "10.244.") {
				t.Errorf("%s: server saw client %q, want a pod address (no SNAT inside the cluster)", cluster, id.Client)
			}
		}
		l.curlWhereami(client, "http://whereami.demo.svc.cluster.local", names, 40)
	}

	// c3 has no whereami: the name does not resolve there.
	if out, err := l.Exec("c3/demo/client", "curl", "-s", "-m", "3", "http://whereami.demo.svc.cluster.local"); err == nil {
		t.Errorf("c3 resolved whereami.demo.svc.cluster.local: %s", out)
	}

	// Globalnet: c1 and c2 overlap, yet every pair of clusters has a
	// tunnel (each reached through its global CIDR).
	waitFor(t, "diagnose reporting every tunnel healthy", func() error {
		out, err := l.causewayctl("diagnose")
		for _, want := range []string{"ok   c1: tunnel n0 → c2", "ok   c2: tunnel n0 → c1", "ok   c1: tunnel n0 → c3",
			"ok   c3: tunnel n0 → c1", "ok   c2: tunnel n0 → c3", "ok   c3: tunnel n0 → c2", "ok   c3/n1: chain CAUSEWAY-MSS",
			"ok   c1/n0: globalnet table ip causeway-globalnet"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("diagnose lacks %q (%v):\n%s", want, err, out)
			}
		}
		if strings.Contains(out, "refused") {
			return fmt.Errorf("diagnose reports a refused remote:\n%s", out)
		}
		return nil
	})
	l.checkKubectlLogsExec(ctx)
	l.checkNodeViews(ctx)
	l.checkMCS(ctx)
	l.checkKubectlDNS(ctx)
	l.checkPropagation(ctx)
	l.checkPairBenchmarks(ctx)
	l.checkScale(ctx)
	l.checkBrokerOutage(ctx)
	l.checkConflictAndHeadless(ctx)
	l.checkHeadlessHostnames(ctx)
	l.checkGlobalUnexport(ctx)

	// The Causeway daemons are the chart's Pods: a crashed one is
	// restarted by its kubelet, a deleted one replaced by its DaemonSet.
	l.checkDaemonRestart(ctx, daemon("c3", "n0", "gateway"))
	l.checkGatewayPodReplaced(ctx, "c1")
	// Everything above ran with each daemon's own least-privilege
	// ServiceAccount (the chart's templates/rbac), none refused.
	l.checkLeastPrivilege(ctx)

	// A second up repairs or reports; it never duplicates.
	before := podCount(t, l, "c1")
	if out, err := l.lab(append([]string{"up", "--prefix", l.Prefix, "--k8s-bin", controlplane.DefaultBinDir()}, cableArgs()...)...); err != nil || !strings.Contains(out, "already up") {
		t.Errorf("second lab up: %v\n%s", err, out)
	}
	if after := podCount(t, l, "c1"); after != before {
		t.Errorf("second up changed c1's pod count: %d → %d", before, after)
	}

	if out, err := l.lab("status"); err != nil || !strings.Contains(out, "whereami") {
		t.Errorf("lab status: %v\n%s", err, out)
	}
	l.checkMergedKubeconfig()

	// Down removes everything; checked here rather than only in cleanup.
	if out, err := l.lab("down", "--prefix", l.Prefix); err != nil || !strings.Contains(out, "nothing left") {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
	h, err := netlab.NewHost(netlab.Config{Prefix: l.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	left, err := h.Leftovers()
	if err != nil {
		t.Fatal(err)
	}
	if !left.Empty() {
		t.Errorf("left behind after down: %s", left)
	}
	if _, err := os.Stat(l.Dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s still exists (err=%v)", l.Dir, err)
	}
	if out, _ := exec.Command("pgrep", "-f", l.Dir).Output(); len(out) > 0 {
		t.Errorf("processes of the lab still running: %s", out)
	}
}

// checkLeastPrivilege checks that every Causeway daemon's Pod runs as
// its own ServiceAccount, that the token the kubelet put in the Pod (the
// one the daemon uses) may not read Secrets, and that no daemon log
// shows a request the API server refused for lack of rights.
func (l *Lab) checkLeastPrivilege(ctx context.Context) {
	l.t.Helper()
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	for _, cluster := range st.Members() {
		admin, err := st.RESTConfig(cluster)
		if err != nil {
			l.t.Fatal(err)
		}
		for _, d := range kube.Daemons {
			p, err := l.pod(ctx, daemon(cluster, "n0", d)) // n0 is a gateway node
			if err != nil {
				l.t.Fatalf("%s %s: %v", cluster, d, err)
			}
			if p.Spec.ServiceAccountName != kube.ServiceAccountName(d) {
				l.t.Errorf("%s %s: Pod %s runs as ServiceAccount %q, want %s", cluster, d, p.Name, p.Spec.ServiceAccountName, kube.ServiceAccountName(d))
			}
			tokens, _ := filepath.Glob(filepath.Join(st.NodeStateDir(cluster, p.Spec.NodeName), "pods", p.Namespace+"_"+p.Name, "volumes", "kube-api-access-*", "token"))
			if len(tokens) != 1 {
				l.t.Fatalf("%s %s: token files %v in Pod %s", cluster, d, tokens, p.Name)
			}
			tok, err := os.ReadFile(tokens[0])
			if err != nil {
				l.t.Fatal(err)
			}
			cfg := rest.AnonymousClientConfig(admin)
			cfg.BearerToken = string(tok)
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				l.t.Fatal(err)
			}
			_, err = cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			if !apierrors.IsForbidden(err) {
				l.t.Errorf("%s %s: list Secrets: %v, want Forbidden", cluster, d, err)
			}
		}
	}
	files, err := st.LogFiles()
	if err != nil {
		l.t.Fatal(err)
	}
	daemons := 0
	for _, f := range files {
		if !slices.ContainsFunc(kube.Daemons, func(d string) bool { return strings.HasSuffix(f.Unit, "/"+d) }) {
			continue
		}
		daemons++
		b, err := os.ReadFile(f.Path)
		if err != nil {
			l.t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				l.t.Errorf("%s: %s", f.Unit, line)
			}
		}
	}
	if daemons == 0 {
		l.t.Errorf("no daemon log among %d log files", len(files))
	}
}

// checkCrossCluster checks issue 4's lab promise: c1 ↔ c3 pod-to-pod and
// pod-to-ClusterIP traffic works in both directions through the gateways'
// tunnel, and the server sees the client's pod address.
func (l *Lab) checkCrossCluster(ctx context.Context) {
	l.t.Helper()
	c1 := l.Client("c1")
	pods := &corev1.PodList{}
	if err := c1.List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "whereami"}); err != nil {
		l.t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	svc := &corev1.Service{}
	if err := c1.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, svc); err != nil {
		l.t.Fatal(err)
	}
	c3client := &corev1.Pod{}
	if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "client"}, c3client); err != nil {
		l.t.Fatal(err)
	}
	// c3 → c1: a pod IP, then the ClusterIP (both replicas answer).
	for _, p := range pods.Items {
		ids := l.curlWhereami("c3/demo/client", "http://"+p.Status.PodIP+":8080", []string{p.Name}, 60)
		if id, ok := ids[p.Name]; ok && !strings.HasPrefix(id.Client, c3client.Status.PodIP+":") {
			l.t.Errorf("c1's pod saw client %s, want c3's client pod %s (no NAT without globalnet)", id.Client, c3client.Status.PodIP)
		}
	}
	// Through the ClusterIP the backends see c3's pod address too (the
	// route agent exempts remote sources from kube-proxy's masquerade),
	// also a backend on a node other than the gateway.
	l.waitClientSeen("c3/demo/client", "http://"+svc.Spec.ClusterIP, names, c3client.Status.PodIP)

	// c1 → c3: a whereami started inside c3's client pod.
	srv := exec.Command(l.labBin, "--dir", l.Dir, "exec", "c3/demo/client", "--", l.labBin, "app", "whereami", "--port", "9000", "--cluster", "c3", "--pod", "client")
	if err := srv.Start(); err != nil {
		l.t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	ids := l.curlWhereami("c1/demo/client", "http://"+c3client.Status.PodIP+":9000", []string{"client"}, 60)
	if id, ok := ids["client"]; ok && id.Cluster != "c3" {
		l.t.Errorf("c1 → c3 answered from %q", id.Cluster)
	}
}

// waitClientSeen curls url from pod until every wanted whereami replica
// has answered and the latest answer of each shows clientIP as the
// client's address. It waits (up to 2 minutes, a bound and not a speed
// assertion) rather than checking one snapshot: the route agent's nat
// jump may sit behind kube-proxy's until its next sync when kube-proxy
// started after it.
func (l *Lab) waitClientSeen(pod, url string, want []string, clientIP string) {
	l.t.Helper()
	latest := map[string]apps.Identity{}
	var lastErr string
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		id, err := l.whereami(pod, url)
		if err != nil {
			lastErr = err.Error()
			time.Sleep(200 * time.Millisecond)
			continue
		}
		latest[id.Pod] = id
		ok := hasAll(latest, want)
		for _, w := range want {
			if got, seen := latest[w]; seen && !strings.HasPrefix(got.Client, clientIP+":") {
				ok = false
			}
		}
		if ok {
			for _, w := range want {
				l.t.Logf("%s via %s: backend %s on node %s saw client %s", pod, url, w, latest[w].Node, latest[w].Client)
			}
			return
		}
	}
	l.t.Errorf("curl %s from %s: latest answers %+v (last error %s), want every one of %v to see client %s",
		url, pod, latest, lastErr, want, clientIP)
}

// checkMCS exports whereami from c1 and c2 and checks issue 5's lab
// promise: one ServiceImport with one clusterset VIP in all three
// clusters, EndpointSlices from both sources, the name resolving to the
// VIP through stock CoreDNS; then unexports c2.
func (l *Lab) checkMCS(ctx context.Context) {
	l.t.Helper()
	for _, c := range []string{"c1", "c2"} {
		if out, err := l.causewayctl("export", "demo/whereami", "--cluster", c); err != nil {
			l.t.Fatalf("export from %s: %v\n%s", c, err, out)
		}
	}
	var vip string
	waitFor(l.t, "ServiceImport with one VIP and slices from c1 and c2 in every cluster", func() error {
		vips := map[string]bool{}
		for _, c := range []string{"c1", "c2", "c3"} {
			si := &mcsv1beta1.ServiceImport{}
			if err := l.Client(c).Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, si); err != nil {
				return fmt.Errorf("%s: %w", c, err)
			}
			if len(si.Spec.IPs) != 1 {
				return fmt.Errorf("%s: ServiceImport IPs %v", c, si.Spec.IPs)
			}
			vips[si.Spec.IPs[0]] = true
			vip = si.Spec.IPs[0]
			sources, err := sliceSources(ctx, l.Client(c))
			if err != nil {
				return err
			}
			if !sources["c1"] || !sources["c2"] {
				return fmt.Errorf("%s: multicluster slices from %v, want c1 and c2", c, sources)
			}
		}
		if len(vips) != 1 {
			return fmt.Errorf("VIPs differ between clusters: %v", vips)
		}
		return nil
	})
	waitFor(l.t, "whereami.demo.svc.clusterset.local resolving to the VIP in c3", func() error {
		out, err := l.Exec("c3/demo/client", "dig", "+short", "whereami.demo.svc.clusterset.local")
		if err != nil || strings.TrimSpace(out) != vip {
			return fmt.Errorf("dig: %v: %q, want %s", err, out, vip)
		}
		return nil
	})
	l.checkGlobalTraffic(ctx, vip)
	if out, err := l.causewayctl("unexport", "demo/whereami", "--cluster", "c2"); err != nil {
		l.t.Fatalf("unexport from c2: %v\n%s", err, out)
	}
	defer l.curlVIP(vip)
	waitFor(l.t, "c2's slices withdrawn everywhere, the VIP unchanged", func() error {
		for _, c := range []string{"c1", "c2", "c3"} {
			sources, err := sliceSources(ctx, l.Client(c))
			if err != nil {
				return err
			}
			if sources["c2"] || !sources["c1"] {
				return fmt.Errorf("%s: slices from %v, want c1 only", c, sources)
			}
			si := &mcsv1beta1.ServiceImport{}
			if err := l.Client(c).Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, si); err != nil {
				return err
			}
			if len(si.Spec.IPs) != 1 || si.Spec.IPs[0] != vip {
				return fmt.Errorf("%s: VIP %v, want %s", c, si.Spec.IPs, vip)
			}
		}
		return nil
	})
}

// checkBrokerOutage freezes the broker's API server (SIGSTOP) for longer
// than the liveness timeout: traffic through the tunnel and the VIP keeps
// flowing, nothing is withdrawn during the outage nor when it ends, and
// an export made meanwhile converges once the broker is back (SIGCONT).
func (l *Lab) checkBrokerOutage(ctx context.Context) {
	l.t.Helper()
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	units, err := st.Status()
	if err != nil {
		l.t.Fatal(err)
	}
	pid := 0
	for _, u := range units {
		if u.Name == "broker/kube-apiserver" {
			pid = u.PID
		}
	}
	if pid == 0 {
		l.t.Fatal("no broker kube-apiserver in the supervisor's status")
	}
	// c1's MCS controller comes back from the outage 3 s after the
	// others (as after a real outage, each controller reconnects after
	// its own retries): it is frozen with the broker and thawed later.
	thawC1 := l.freezeCgroupOf(l.pid(ctx, daemon("c1", "", "mcs-controller")))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		l.t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()

	si := &mcsv1beta1.ServiceImport{}
	if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, si); err != nil || len(si.Spec.IPs) != 1 {
		l.t.Fatalf("c3's ServiceImport: %v %+v", err, si.Spec)
	}
	l.curlVIP(si.Spec.IPs[0]) // the dataplane does not need the broker
	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c2"); err != nil {
		l.t.Fatalf("export from c2 while the broker is down: %v\n%s", err, out)
	}
	// Longer than a liveness Lease plus the dead-cluster timeout (3 s +
	// 10 s by default): every Lease looks stale once the broker is back.
	time.Sleep(16 * time.Second)
	if sources, err := sliceSources(ctx, l.Client("c3")); err != nil || sources["c2"] || !sources["c1"] {
		l.t.Errorf("c3's slices while the broker was frozen: %v %v, want c1's and not c2's", sources, err)
	}
	resume()
	// The end of the outage withdraws nobody: c1's slices stay in c3
	// while c1's controller is still away and once it is back, and c2's
	// arrive.
	thawAt := time.Now().Add(3 * time.Second)
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(thawAt) {
			thawC1()
		}
		sources, err := sliceSources(ctx, l.Client("c3"))
		if err != nil {
			l.t.Fatal(err)
		}
		if !sources["c1"] {
			l.t.Fatalf("c3 lost c1's slices after the broker outage: %v", sources)
		}
	}
	waitFor(l.t, "c2's export reaching c3 after the broker is back", func() error {
		sources, err := sliceSources(ctx, l.Client("c3"))
		if err != nil {
			return err
		}
		if !sources["c1"] || !sources["c2"] {
			return fmt.Errorf("c3 has slices from %v, want c1 and c2", sources)
		}
		return nil
	})
}

// checkConflictAndHeadless: two clusters exporting the same service with
// clashing ports get Conflict=True (PortConflict) on both exports; and a
// headless service of c1 resolves in c3 to c1's ready pod addresses
// (demo step 8) through stock CoreDNS.
func (l *Lab) checkConflictAndHeadless(ctx context.Context) {
	l.t.Helper()
	for cluster, port := range map[string]int32{"c1": 80, "c3": 81} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "clash"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "nothing"},
				Ports: []corev1.ServicePort{{Name: "http", Port: port, Protocol: corev1.ProtocolTCP}}},
		}
		if err := l.Client(cluster).Create(ctx, svc); err != nil {
			l.t.Fatalf("%s: %v", cluster, err)
		}
		if out, err := l.causewayctl("export", "demo/clash", "--cluster", cluster); err != nil {
			l.t.Fatalf("export clash from %s: %v\n%s", cluster, err, out)
		}
	}
	waitFor(l.t, "Conflict=True PortConflict on both exports of demo/clash", func() error {
		for _, cluster := range []string{"c1", "c3"} {
			se := &mcsv1beta1.ServiceExport{}
			if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "demo", Name: "clash"}, se); err != nil {
				return err
			}
			c := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Reason, string(mcsv1beta1.ServiceExportReasonPortConflict)) {
				return fmt.Errorf("%s: Conflict condition %+v", cluster, c)
			}
		}
		return nil
	})

	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "whereami-headless"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "whereami"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}}},
	}
	if err := l.Client("c1").Create(ctx, headless); err != nil {
		l.t.Fatal(err)
	}
	if out, err := l.causewayctl("export", "demo/whereami-headless", "--cluster", "c1"); err != nil {
		l.t.Fatalf("export headless: %v\n%s", err, out)
	}
	pods := &corev1.PodList{}
	if err := l.Client("c1").List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "whereami"}); err != nil {
		l.t.Fatal(err)
	}
	var podIPs []string
	for _, p := range pods.Items {
		podIPs = append(podIPs, p.Status.PodIP)
	}
	// Under globalnet each ready pod has a global IP of its own (1:1).
	want := l.globalPodIPs(ctx, "c1", "demo", "whereami-headless", podIPs)
	slices.Sort(want)
	waitFor(l.t, "whereami-headless.demo.svc.clusterset.local resolving in c3 to c1's pods' global IPs", func() error {
		out, err := l.Exec("c3/demo/client", "dig", "+short", "whereami-headless.demo.svc.clusterset.local")
		got := strings.Fields(out)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			return fmt.Errorf("dig: %v: %q, want %v", err, out, want)
		}
		return nil
	})
}

// curlVIP checks demo step 5 from c3: the clusterset VIP and the
// clusterset name answer from c1's replicas (eBPF connect4 translation,
// then the tunnel).
func (l *Lab) curlVIP(vip string) {
	l.t.Helper()
	for _, url := range []string{"http://" + vip, "http://whereami.demo.svc.clusterset.local"} {
		for _, id := range l.curlWhereami("c3/demo/client", url, nil, 60) {
			if id.Cluster != "c1" {
				l.t.Errorf("%s from c3 answered from %q, want c1", url, id.Cluster)
			}
		}
	}
}

// sliceSources lists the source clusters of whereami's multicluster
// EndpointSlices.
func sliceSources(ctx context.Context, c client.Client) (map[string]bool, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.InNamespace("demo"), client.MatchingLabels{"multicluster.kubernetes.io/service-name": "whereami"}); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range slices.Items {
		out[s.Labels["multicluster.kubernetes.io/source-cluster"]] = true
	}
	return out, nil
}

// waitFor polls check for up to 30 s (a bound, not a speed assertion).
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	waitForWithin(t, 30*time.Second, what, check)
}

// waitForWithin polls check until it succeeds, fails with stopWaiting,
// or timeout passes (a bound for a loaded machine, not a speed assertion).
func waitForWithin(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = check(); err == nil {
			return
		}
		if _, ok := err.(stopWaiting); ok {
			break
		}
	}
	t.Fatalf("%s: %v", what, err)
}

// stopWaiting wraps an error that makes waitForWithin give up at once.
type stopWaiting struct{ error }

// causewayctl runs a causewayctl command on the lab's clusters.
func (l *Lab) causewayctl(args ...string) (string, error) {
	// As a user of the lab does: KUBECONFIG=$(causeway-lab kubeconfig).
	kubeconfig, err := l.lab("kubeconfig")
	if err != nil {
		return kubeconfig, fmt.Errorf("causeway-lab kubeconfig: %w", err)
	}
	cmd := exec.Command(l.ctl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+strings.TrimSpace(kubeconfig))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// unitPID waits until a supervised unit has been running for a moment
// (status.json is rewritten every 2 s, and a daemon may restart once
// while `lab up` finishes) and returns its live PID.
func (l *Lab) unitPID(unit string) int {
	l.t.Helper()
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	var last lab.UnitStatus
	for i := 0; i < 100; i++ {
		units, _ := st.Status()
		for _, u := range units {
			if u.Name == unit {
				last = u
			}
		}
		if last.Running && time.Since(last.Since) > 3*time.Second && syscall.Kill(last.PID, 0) == nil {
			return last.PID
		}
		time.Sleep(200 * time.Millisecond)
	}
	l.t.Fatalf("unit %s not running steadily: %+v", unit, last)
	return 0
}

// checkDaemonRestart kills a daemon (SIGKILL) and waits until its
// kubelet has started its container again.
func (l *Lab) checkDaemonRestart(ctx context.Context, c component) {
	l.t.Helper()
	pid := l.pid(ctx, c)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		l.t.Fatal(err)
	}
	l.waitRestarted(ctx, c, pid)
}

// checkGatewayPodReplaced deletes cluster's gateway Pod: the DaemonSet
// controller (kube-controller-manager) makes a new one, the kubelet runs
// it, and c3 reaches cluster's whereami through the clusterset name
// again (issue 9).
func (l *Lab) checkGatewayPodReplaced(ctx context.Context, cluster string) {
	l.t.Helper()
	gw := daemon(cluster, "n0", "gateway")
	old, err := l.pod(ctx, gw)
	if err != nil {
		l.t.Fatal(err)
	}
	if err := l.Client(cluster).Delete(ctx, &old); err != nil {
		l.t.Fatal(err)
	}
	waitForWithin(l.t, 2*time.Minute, "a new "+cluster+" gateway Pod Ready", func() error {
		p, err := l.pod(ctx, gw)
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("still Pod %s", old.Name)
		}
		_, err = l.podPID(ctx, gw)
		return err
	})
	waitForWithin(l.t, time.Minute, "the old "+cluster+" gateway Pod gone", func() error {
		if err := l.Client(cluster).Get(ctx, client.ObjectKeyFromObject(&old), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("Pod %s: %v", old.Name, err)
		}
		return nil
	})
	waitForWithin(l.t, time.Minute, "c3 answered by "+cluster+" after its gateway Pod was replaced", func() error {
		for range 12 {
			if id, err := l.whereami("c3/demo/client", "http://whereami.demo.svc.clusterset.local"); err == nil && id.Cluster == cluster {
				return nil
			}
		}
		return fmt.Errorf("no answer from %s", cluster)
	})
}

func podCount(t *testing.T, l *Lab, cluster string) int {
	pods := &corev1.PodList{}
	if err := l.Client(cluster).List(context.Background(), pods); err != nil {
		t.Fatal(err)
	}
	return len(pods.Items)
}

func isReady(conds []corev1.NodeCondition) bool {
	for _, c := range conds {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkKubectlLogsExec: `kubectl logs` and `kubectl exec` reach the lab
// kubelets through the API server (its egress proxy into the node
// network), on a demo pod of every cluster that has one.
func (l *Lab) checkKubectlLogsExec(ctx context.Context) {
	l.t.Helper()
	for _, cluster := range []string{"c1", "c2"} {
		pods := &corev1.PodList{}
		if err := l.Client(cluster).List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "whereami"}); err != nil || len(pods.Items) == 0 {
			l.t.Fatalf("%s: whereami pods: %v", cluster, err)
		}
		p := pods.Items[0]
		out, err := l.lab("kubectl", cluster, "--", "logs", "-n", "demo", p.Name)
		if err != nil || !strings.Contains(out, "serving") || !strings.Contains(out, "pod=demo/"+p.Name) {
			l.t.Errorf("%s: kubectl logs %s: %v\n%s", cluster, p.Name, err, out)
		}
		out, err = l.lab("kubectl", cluster, "--", "exec", "-n", "demo", p.Name, "--", "ip", "-o", "-4", "addr", "show", "dev", "eth0")
		// /32 from the lab kubelet, the node's /24 from CNI's host-local.
		if err != nil || !strings.Contains(out, " "+p.Status.PodIP+"/") {
			l.t.Errorf("%s: kubectl exec %s -- ip addr: %v, want the pod's address %s\n%s", cluster, p.Name, err, p.Status.PodIP, out)
		}
	}
}

// checkMergedKubeconfig: `lab kubeconfig` without an argument writes one
// kubeconfig with a context per cluster and the broker, like kind's.
func (l *Lab) checkMergedKubeconfig() {
	l.t.Helper()
	out, err := l.lab("kubeconfig")
	if err != nil {
		l.t.Fatalf("lab kubeconfig: %v\n%s", err, out)
	}
	path := strings.TrimSpace(out)
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		l.t.Fatal(err)
	}
	if cfg.CurrentContext != "c1" {
		l.t.Errorf("current context %q, want c1", cfg.CurrentContext)
	}
	for _, name := range []string{"c1", "c2", "c3", "broker"} {
		if _, ok := cfg.Contexts[name]; !ok {
			l.t.Errorf("merged kubeconfig has no context %q", name)
			continue
		}
		kubectl := filepath.Join(controlplane.DefaultBinDir(), "kubectl")
		got, err := exec.Command(kubectl, "--kubeconfig", path, "--context", name, "get", "namespace", "kube-system", "-o", "name").CombinedOutput()
		if err != nil || strings.TrimSpace(string(got)) != "namespace/kube-system" {
			l.t.Errorf("kubectl --context %s: %v: %s", name, err, got)
		}
	}
	// The chart's workloads, as a user lists them (issue 9).
	kubectl := filepath.Join(controlplane.DefaultBinDir(), "kubectl")
	got, err := exec.Command(kubectl, "--kubeconfig", path, "--context", "c1", "-n", "causeway-system", "get", "ds,deploy,pods", "-o", "wide").CombinedOutput()
	if err != nil {
		l.t.Fatalf("kubectl get ds,deploy,pods: %v\n%s", err, got)
	}
	l.t.Logf("kubectl --context c1 -n causeway-system get ds,deploy,pods:\n%s", got)
	for _, want := range []string{"daemonset.apps/causeway-gateway", "daemonset.apps/causeway-route-agent", "deployment.apps/causeway-mcs-controller",
		"deployment.apps/causeway-globalnet"} {
		if !strings.Contains(string(got), want) {
			l.t.Errorf("kubectl get ds,deploy,pods lacks %s", want)
		}
	}
	if n := strings.Count(string(got), " Running "); n != 5 { // 2 route agents, 1 gateway, 1 MCS controller, 1 globalnet controller
		l.t.Errorf("%d Pods Running, want 5", n)
	}
}
