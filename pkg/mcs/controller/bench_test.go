package controller_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/internal/procmem"
	"github.com/causeway-net/causeway/lab/bench"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
)

// firstSeen watches objects of list's type in a cluster and records when
// check first held for each name.
type firstSeen struct {
	mu     sync.Mutex
	at     map[string]time.Time
	notify chan struct{}
}

func watchFirst(b *testing.B, ctx context.Context, c client.WithWatch, list client.ObjectList, opts []client.ListOption, check func(obj runtime.Object) (string, bool)) *firstSeen {
	b.Helper()
	w, err := c.Watch(ctx, list, opts...)
	if err != nil {
		b.Fatal(err)
	}
	fs := &firstSeen{at: map[string]time.Time{}, notify: make(chan struct{}, 1)}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			now := time.Now()
			if name, ok := check(ev.Object); ok {
				fs.mu.Lock()
				if _, seen := fs.at[name]; !seen {
					fs.at[name] = now
				}
				fs.mu.Unlock()
				select {
				case fs.notify <- struct{}{}:
				default:
				}
			}
		}
	}()
	return fs
}

func (fs *firstSeen) wait(b *testing.B, name string) time.Time {
	deadline := time.After(60 * time.Second)
	for {
		fs.mu.Lock()
		t, ok := fs.at[name]
		fs.mu.Unlock()
		if ok {
			return t
		}
		select {
		case <-fs.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			b.Fatalf("%s never seen", name)
		}
	}
}

func (fs *firstSeen) reset(name string) {
	fs.mu.Lock()
	delete(fs.at, name)
	fs.mu.Unlock()
}

func withWatch(b *testing.B, e *env, id string) client.WithWatch {
	c, err := client.NewWithWatch(e.clusters[id].Config, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkExportToImport: ServiceExport created in c1 → ServiceImport with
// its VIP present in c1 and c2 (the later of the two), over 100 exports.
// Baseline: a ConfigMap written in c1 and seen through a watch of c1, the
// floor of any API-driven propagation on this machine.
func BenchmarkExportToImport(b *testing.B) {
	e := newEnv(b, "c1", "c2")
	for _, id := range []string{"c1", "c2"} {
		e.namespace(id, "bench")
		e.start(id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hasVIP := func(obj runtime.Object) (string, bool) {
		si, ok := obj.(*mcsv1beta1.ServiceImport)
		if !ok {
			return "", false
		}
		return si.Name, len(si.Spec.IPs) == 1
	}
	seen := map[string]*firstSeen{}
	for _, id := range []string{"c1", "c2"} {
		seen[id] = watchFirst(b, ctx, withWatch(b, e, id), &mcsv1beta1.ServiceImportList{}, []client.ListOption{client.InNamespace("bench")}, hasVIP)
	}
	cms := watchFirst(b, ctx, withWatch(b, e, "c1"), &corev1.ConfigMapList{}, []client.ListOption{client.InNamespace("bench")},
		func(obj runtime.Object) (string, bool) {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok {
				return "", false
			}
			return cm.Name, true
		})
	c1 := e.c("c1")
	const n = 100
	var lat, base []time.Duration
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		lat, base = lat[:0], base[:0]
		for i := range n {
			name := fmt.Sprintf("s%d-%d", it, i)
			svc := kubetest.Service(b, c1, "bench", name, false, map[string]int32{"http": 80})
			kubetest.LocalSlice(b, c1, svc, 80, kubetest.Pod{IP: "10.244.1.1", Ready: true})
			start := time.Now()
			kubetest.Export(b, c1, "bench", name)
			t1, t2 := seen["c1"].wait(b, name), seen["c2"].wait(b, name)
			lat = append(lat, later(t1, t2).Sub(start))

			start = time.Now()
			if err := c1.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name}}); err != nil {
				b.Fatal(err)
			}
			base = append(base, cms.wait(b, name).Sub(start))
		}
	}
	b.StopTimer()
	st, bst := bench.NewStats(lat), bench.NewStats(base)
	b.ReportMetric(st.P50MS, "p50-ms")
	b.ReportMetric(st.P99MS, "p99-ms")
	b.ReportMetric(bst.P50MS, "baseline-p50-ms")
	b.ReportMetric(st.P50MS/bst.P50MS, "p50/baseline")
	for i, l := range lat {
		if l > 500*time.Millisecond {
			b.Logf("slow export #%d: %s", i, l)
		}
	}
	b.Logf("export → ServiceImport with VIP in c1 and c2, %d exports: p50 %.1f ms, p99 %.1f ms; baseline (write+watch one object) p50 %.1f ms",
		n, st.P50MS, st.P99MS, bst.P50MS)
}

// BenchmarkEndpointChange: a backend of c1 turns not ready (or ready again)
// in c1's own EndpointSlice → the multi-cluster slices of c1 and c2 show
// it (the later of the two), over 100 changes.
func BenchmarkEndpointChange(b *testing.B) {
	e := newEnv(b, "c1", "c2")
	for _, id := range []string{"c1", "c2"} {
		e.namespace(id, "bench")
		e.start(id)
	}
	c1 := e.c("c1")
	svc := kubetest.Service(b, c1, "bench", "db", true, map[string]int32{"sql": 5432})
	kubetest.LocalSlice(b, c1, svc, 5432, kubetest.Pod{IP: "10.244.1.1", Ready: true}, kubetest.Pod{IP: "10.244.1.2", Ready: true})
	kubetest.Export(b, c1, "bench", "db")
	for _, id := range []string{"c1", "c2"} {
		kubetest.Eventually(b, "imported", wantEndpoints(e.c(id), "bench", "db", "c1/10.244.1.1/true", "c1/10.244.1.2/true"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	state := func(obj runtime.Object) (string, bool) {
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return "", false
		}
		for _, ep := range s.Endpoints {
			if ep.Addresses[0] == "10.244.1.2" {
				return strconv.FormatBool(*ep.Conditions.Ready), true
			}
		}
		return "", false
	}
	seen := map[string]*firstSeen{}
	for _, id := range []string{"c1", "c2"} {
		seen[id] = watchFirst(b, ctx, withWatch(b, e, id), &discoveryv1.EndpointSliceList{},
			[]client.ListOption{client.InNamespace("bench"), client.MatchingLabels{mcsv1beta1.LabelServiceName: "db"}}, state)
	}
	const n = 100
	var lat []time.Duration
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		lat = lat[:0]
		for i := range n {
			ready := i%2 == 1
			want := strconv.FormatBool(ready)
			for _, id := range []string{"c1", "c2"} {
				seen[id].reset(want)
			}
			start := time.Now()
			kubetest.LocalSlice(b, c1, svc, 5432, kubetest.Pod{IP: "10.244.1.1", Ready: true}, kubetest.Pod{IP: "10.244.1.2", Ready: ready})
			t1, t2 := seen["c1"].wait(b, want), seen["c2"].wait(b, want)
			lat = append(lat, later(t1, t2).Sub(start))
		}
	}
	b.StopTimer()
	st := bench.NewStats(lat)
	b.ReportMetric(st.P50MS, "p50-ms")
	b.ReportMetric(st.P99MS, "p99-ms")
	b.Logf("endpoint change → multi-cluster slices in c1 and c2, %d changes: p50 %.1f ms, p99 %.1f ms", n, st.P50MS, st.P99MS)
}

// BenchmarkScale runs the real mcs-controller binary for c1 and c2 with
// $MCS_BENCH_SERVICES (default 1000) Services exported from c1: time to
// converge from nothing (records, VIPs, imports and slices in both
// clusters), time of a full resync after a restart (nothing to change),
// and each controller's RSS, Go heap in use and CPU time up to
// convergence. Baselines: the time to
// write the ServiceExports themselves, and the memory of the same binary
// idle (started for c1 before any Service exists). With
// $MCS_BENCH_PROFILE_DIR set, heap profiles of both controllers are saved
// there after convergence; $BENCH_GOMEMLIMIT and $BENCH_GOGC are passed to
// the controllers as GOMEMLIMIT (Go's soft memory limit) and GOGC.
func BenchmarkScale(b *testing.B) {
	n := 1000
	if s := os.Getenv("MCS_BENCH_SERVICES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	bin := filepath.Join(b.TempDir(), "mcs-controller")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/causeway-net/causeway/cmd/mcs-controller").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	e := newEnv(b, "c1", "c2")
	for _, id := range []string{"c1", "c2"} {
		e.namespace(id, "bench")
	}
	dir := b.TempDir()
	idle := startDaemon(b, bin, dir, e, "c1")
	idle.waitReady(b)
	idleMem := idle.memory(b)
	idle.stop(b)

	c1 := e.c("c1")
	ctx := context.Background()
	setup := time.Now()
	createServices(b, e.clusters["c1"].Config, n)
	b.Logf("creating %d Services and their EndpointSlices in c1 took %.1fs", n, time.Since(setup).Seconds())
	start := time.Now()
	bench.InParallel(8, n, func(i int) {
		if err := c1.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("s%d", i)}}); err != nil {
			b.Error(err)
		}
	})
	baseline := time.Since(start)

	procs := map[string]*daemonProc{}
	b.ResetTimer()
	start = time.Now()
	for _, id := range []string{"c1", "c2"} {
		procs[id] = startDaemon(b, bin, dir, e, id)
	}
	for _, id := range []string{"c1", "c2"} {
		procs[id].waitMetric(b, "causeway_mcs_imports", float64(n))
	}
	converge := time.Since(start)
	mem := map[string]procmem.Memory{}
	cpu := map[string]float64{} // CPU seconds of each controller up to convergence
	for _, id := range []string{"c1", "c2"} {
		mem[id] = procs[id].memory(b)
		var ok bool
		if cpu[id], ok = procs[id].metric("process_cpu_seconds_total"); !ok {
			b.Fatalf("%s's controller reports no process_cpu_seconds_total", id)
		}
		if pd := os.Getenv("MCS_BENCH_PROFILE_DIR"); pd != "" {
			if err := procmem.SaveHeapProfile(http.DefaultClient, procs[id].metrics, filepath.Join(pd, fmt.Sprintf("mcs-%s-%d.heap", id, n)), false); err != nil {
				b.Fatal(err)
			}
		}
	}
	procs["c2"].stop(b)
	start = time.Now()
	procs["c2"] = startDaemon(b, bin, dir, e, "c2")
	procs["c2"].waitMetric(b, "causeway_mcs_imports", float64(n))
	resync := time.Since(start)
	after := procs["c2"].memory(b)
	// A full resync of an unchanged ClusterSet writes nothing.
	var resyncWrites float64
	for _, kind := range []string{"ServiceImport", "EndpointSlice"} {
		for _, op := range []string{"create", "update", "status", "delete"} {
			if v, ok := procs["c2"].metric(fmt.Sprintf("causeway_mcs_api_writes_total{kind=%q,op=%q}", kind, op)); ok {
				resyncWrites += v
			}
		}
	}
	b.StopTimer()
	for _, p := range procs {
		p.stop(b)
	}
	b.ReportMetric(converge.Seconds(), "converge-s")
	b.ReportMetric(resync.Seconds(), "resync-s")
	b.ReportMetric(mem["c1"].RSSMiB(), "c1-RSS-MiB")
	b.ReportMetric(mem["c2"].RSSMiB(), "c2-RSS-MiB")
	b.ReportMetric(mem["c1"].PeakMiB(), "c1-peak-RSS-MiB")
	b.ReportMetric(mem["c1"].HeapMiB(), "c1-heap-MiB")
	b.ReportMetric(mem["c2"].HeapMiB(), "c2-heap-MiB")
	b.ReportMetric(idleMem.RSSMiB(), "idle-RSS-MiB")
	b.ReportMetric(mem["c1"].RSSMiB()/idleMem.RSSMiB(), "c1-RSS/idle")
	b.ReportMetric(converge.Seconds()/baseline.Seconds(), "converge/baseline")
	b.ReportMetric(resyncWrites, "resync-writes")
	b.ReportMetric(cpu["c1"], "c1-CPU-s")
	b.ReportMetric(cpu["c2"], "c2-CPU-s")
	b.Logf("%d services exported from c1: writing the ServiceExports %.2fs (baseline); converge in c1+c2 from nothing %.2fs (%.1f× baseline); "+
		"full resync after restarting c2's controller %.2fs (%.0f writes)",
		n, baseline.Seconds(), converge.Seconds(), converge.Seconds()/baseline.Seconds(), resync.Seconds(), resyncWrites)
	b.Logf("memory: idle controller %s; c1 (exporter+importer) %s (RSS %.1f× idle); c2 (importer) %s; c2 after restart %s",
		idleMem, mem["c1"], mem["c1"].RSSMiB()/idleMem.RSSMiB(), mem["c2"], after)
}

// createServices creates Services s0…s<n-1> in namespace bench, each
// with one ready endpoint, as fast as the API server takes them: a
// clientset speaking protobuf, no client-side rate limit, 16 writers.
func createServices(b *testing.B, cfg *rest.Config, n int) {
	b.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.QPS = -1
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	bench.InParallel(16, n, func(i int) {
		svc := kubetest.ServiceObject("bench", fmt.Sprintf("s%d", i), false, map[string]int32{"http": 80})
		if _, err := kc.CoreV1().Services("bench").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			b.Error(err)
			return
		}
		slice := kubetest.LocalSliceObject(svc, 8080, kubetest.Pod{IP: fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), Ready: true})
		if _, err := kc.DiscoveryV1().EndpointSlices("bench").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			b.Error(err)
		}
	})
	if b.Failed() {
		b.FailNow()
	}
}

type daemonProc struct {
	cmd     *exec.Cmd
	metrics string
}

func startDaemon(b *testing.B, bin, dir string, e *env, id string) *daemonProc {
	b.Helper()
	bk := filepath.Join(dir, id+"-broker.kubeconfig")
	if _, err := os.Stat(bk); err != nil {
		kc, err := brokerKubeconfig(e, id)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(bk, kc, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--kubeconfig", e.clusters[id].AdminKubeconfig, "--broker-kubeconfig", bk, "--cluster-id", id,
		"--metrics-addr", addr, "--health-addr", "0", "--log-level", "warn", "--node-name", "bench", "--profiling",
		// No separate health listener: its fixed default port would
		// clash between the two controllers (the metrics address serves
		// /readyz). One replica: a leader election lost while the API
		// servers are saturated would end the run; it is not what is
		// measured.
		"--leader-elect=false")
	cmd.Stderr = os.Stderr
	// The Go runtime's soft memory limit and GC target of the controllers
	// only (the API servers are Go programs too).
	cmd.Env = os.Environ()
	for _, v := range []string{"GOMEMLIMIT", "GOGC"} {
		if s := os.Getenv("BENCH_" + v); s != "" {
			cmd.Env = append(cmd.Env, v+"="+s)
		}
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &daemonProc{cmd: cmd, metrics: "http://" + addr + "/metrics"}
	b.Cleanup(func() { p.stop(b) })
	return p
}

func (p *daemonProc) stop(b *testing.B) {
	if p.cmd.ProcessState != nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
}

func (p *daemonProc) metric(name string) (float64, bool) {
	return procmem.Metric(http.DefaultClient, p.metrics, name)
}

func (p *daemonProc) waitMetric(b *testing.B, name string, want float64) {
	deadline := time.Now().Add(90 * time.Minute) // 50 000 Services converge in about 40 minutes here
	for {
		if v, ok := p.metric(name); ok && v >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never reached %v", name, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits until the daemon answers /readyz with 200.
func (p *daemonProc) waitReady(b *testing.B) {
	url := strings.TrimSuffix(p.metrics, "/metrics") + "/readyz"
	deadline := time.Now().Add(5 * time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s never ready", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memory reads the daemon's RSS, and its Go heap in use from /metrics.
func (p *daemonProc) memory(b *testing.B) procmem.Memory {
	b.Helper()
	m, err := procmem.Read(http.DefaultClient, p.cmd.Process.Pid, p.metrics)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func brokerKubeconfig(e *env, id string) ([]byte, error) {
	return broker.EnsureClusterIdentity(context.Background(), e.broker.Config, id)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
