package controller_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

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

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

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
			svc := service(b, c1, "bench", name, false, map[string]int32{"http": 80})
			localSlice(b, c1, svc, 80, pod{ip: "10.244.1.1", ready: true})
			start := time.Now()
			export(b, c1, "bench", name)
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
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(percentile(base, 0.5)), "baseline-p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.5))/float64(percentile(base, 0.5)), "p50/baseline")
	for i, l := range lat {
		if l > 500*time.Millisecond {
			b.Logf("slow export #%d: %s", i, l)
		}
	}
	b.Logf("export → ServiceImport with VIP in c1 and c2, %d exports: p50 %.1f ms, p99 %.1f ms; baseline (write+watch one object) p50 %.1f ms",
		n, ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(percentile(base, 0.5)))
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
	svc := service(b, c1, "bench", "db", true, map[string]int32{"sql": 5432})
	localSlice(b, c1, svc, 5432, pod{ip: "10.244.1.1", ready: true}, pod{ip: "10.244.1.2", ready: true})
	export(b, c1, "bench", "db")
	for _, id := range []string{"c1", "c2"} {
		eventually(b, "imported", wantEndpoints(e.c(id), "bench", "db", "c1/10.244.1.1/true", "c1/10.244.1.2/true"))
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
			localSlice(b, c1, svc, 5432, pod{ip: "10.244.1.1", ready: true}, pod{ip: "10.244.1.2", ready: ready})
			t1, t2 := seen["c1"].wait(b, want), seen["c2"].wait(b, want)
			lat = append(lat, later(t1, t2).Sub(start))
		}
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(lat, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 0.99)), "p99-ms")
	b.Logf("endpoint change → multi-cluster slices in c1 and c2, %d changes: p50 %.1f ms, p99 %.1f ms", n, ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)))
}

// BenchmarkScale runs the real mcs-controller binary for c1 and c2 with
// $MCS_BENCH_SERVICES (default 1000) Services exported from c1: time to
// converge from nothing (records, VIPs, imports and slices in both
// clusters), time of a full resync after a restart (nothing to change),
// and each controller's RSS. Baseline: the time to write the
// ServiceExports themselves.
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
	c1 := e.c("c1")
	ctx := context.Background()
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				name := fmt.Sprintf("s%d", i)
				svc := service(b, c1, "bench", name, false, map[string]int32{"http": 80})
				localSlice(b, c1, svc, 8080, pod{ip: fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), ready: true})
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	start := time.Now()
	work = make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := c1.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("s%d", i)}}); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	baseline := time.Since(start)

	dir := b.TempDir()
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
	rss := map[string]int{}
	for _, id := range []string{"c1", "c2"} {
		rss[id] = procs[id].rssKiB(b)
	}
	procs["c2"].stop(b)
	start = time.Now()
	procs["c2"] = startDaemon(b, bin, dir, e, "c2")
	procs["c2"].waitMetric(b, "causeway_mcs_imports", float64(n))
	resync := time.Since(start)
	rssAfter := procs["c2"].rssKiB(b)
	b.StopTimer()
	for _, p := range procs {
		p.stop(b)
	}
	b.ReportMetric(converge.Seconds(), "converge-s")
	b.ReportMetric(resync.Seconds(), "resync-s")
	b.ReportMetric(float64(rss["c1"])/1024, "c1-RSS-MiB")
	b.ReportMetric(float64(rss["c2"])/1024, "c2-RSS-MiB")
	b.ReportMetric(converge.Seconds()/baseline.Seconds(), "converge/baseline")
	b.Logf("%d services exported from c1: writing the ServiceExports %.2fs (baseline); converge in c1+c2 from nothing %.2fs (%.1f× baseline); "+
		"full resync after restarting c2's controller %.2fs; RSS c1 %.1f MiB (exporter+importer), c2 %.1f MiB (importer), c2 after restart %.1f MiB",
		n, baseline.Seconds(), converge.Seconds(), converge.Seconds()/baseline.Seconds(), resync.Seconds(),
		float64(rss["c1"])/1024, float64(rss["c2"])/1024, float64(rssAfter)/1024)
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
		"--metrics-addr", addr, "--log-level", "warn", "--node-name", "bench")
	cmd.Stderr = os.Stderr
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
	resp, err := http.Get(p.metrics)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func (p *daemonProc) waitMetric(b *testing.B, name string, want float64) {
	deadline := time.Now().Add(30 * time.Minute)
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

func (p *daemonProc) rssKiB(b *testing.B) int {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	return 0
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
