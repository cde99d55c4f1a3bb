package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/lab/bench"
)

// checkPropagation runs `causewayctl benchmark propagation` with a few
// samples: every export becomes reachable through its VIP from c3, every
// removed backend leaves every node's VIP map (each sample is awaited
// with a bound, so a count short of the request is a failure), the
// figures are logged (not asserted: the machine is shared), and nothing
// the benchmark created is left in any cluster.
func (l *Lab) checkPropagation(ctx context.Context) {
	l.t.Helper()
	const n = 3
	var res struct {
		Export   *bench.ExportResult   `json:"export"`
		Withdraw *bench.WithdrawResult `json:"withdraw"`
	}
	l.benchmark(&res, "propagation", "--services", "3", "--removals", "3", "--timeout", "90s")
	if res.Export == nil || res.Withdraw == nil {
		l.t.Fatalf("benchmark reported export %v, withdraw %v: want both", res.Export, res.Withdraw)
	}
	for name, s := range map[string]bench.Stats{"imported": res.Export.Imported, "programmed": res.Export.Programmed,
		"reachable": res.Export.Reachable, "withdrawn everywhere": res.Withdraw.All} {
		if s.N != n || s.P50MS <= 0 || s.MaxMS < s.P50MS {
			l.t.Errorf("%s: %+v, want %d positive samples", name, s, n)
		}
	}
	clusters := map[string]bool{}
	for _, c := range res.Withdraw.Clusters {
		clusters[c.Cluster] = true
		if c.N != n || c.Nodes != 2 {
			l.t.Errorf("withdrawal in %s: %+v, want %d samples over 2 nodes", c.Cluster, c, n)
		}
	}
	if len(clusters) != 3 {
		l.t.Errorf("withdrawal measured in clusters %v, want c1, c2 and c3", clusters)
	}

	for _, cluster := range []string{"c1", "c2", "c3"} {
		c := l.Client(cluster)
		mine := []client.ListOption{client.InNamespace("demo"), client.MatchingLabels{bench.LabelBenchmark: "propagation"}}
		for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.ServiceList{}, &mcsv1beta1.ServiceExportList{}} {
			if err := c.List(ctx, list, mine...); err != nil {
				l.t.Fatal(err)
			}
			if n := meta.LenList(list); n > 0 {
				l.t.Errorf("%s: %d benchmark objects left behind (%T)", cluster, n, list)
			}
		}
		imports := &mcsv1beta1.ServiceImportList{}
		if err := c.List(ctx, imports, client.InNamespace("demo")); err != nil {
			l.t.Fatal(err)
		}
		for _, si := range imports.Items {
			if strings.HasPrefix(si.Name, "propbench-") {
				l.t.Errorf("%s: ServiceImport %s left behind", cluster, si.Name)
			}
		}
	}
}

// checkPairBenchmarks runs `causewayctl benchmark throughput` and
// `latency` between c1's and c3's client pods (the README's commands,
// shortened) in this lab's shape: each reports the veth baseline and the
// pair's figure with a positive ratio, and removes the Service and
// ServiceExport it created to reach the server pod.
func (l *Lab) checkPairBenchmarks(ctx context.Context) {
	l.t.Helper()
	for _, args := range [][]string{
		{"throughput", "--streams", "1", "--duration", "2s"},
		{"latency", "--count", "200"},
	} {
		var rows []struct {
			Path  string  `json:"path"`
			Ratio float64 `json:"ratioToVeth"`
		}
		l.benchmark(&rows, args...)
		if len(rows) != 2 || rows[1].Ratio <= 0 || !strings.Contains(rows[1].Path, "clusterset VIP") {
			l.t.Errorf("%v: rows %+v, want the baseline and c1 → c3 through a clusterset VIP with a positive ratio", args, rows)
		}
	}
	l.checkSegmentsBenchmark()
	for _, cluster := range []string{"c1", "c3"} {
		for _, ns := range []string{"demo", bench.SegmentsNamespace} {
			for _, list := range []client.ObjectList{&corev1.ServiceList{}, &mcsv1beta1.ServiceExportList{}, &corev1.PodList{}} {
				if err := l.Client(cluster).List(ctx, list, client.InNamespace(ns), client.HasLabels{bench.LabelBenchmark}); err != nil {
					l.t.Fatal(err)
				}
				if n := meta.LenList(list); n > 0 {
					l.t.Errorf("%s/%s: %d benchmark objects left behind (%T)", cluster, ns, n, list)
				}
			}
		}
	}
}

// checkSegmentsBenchmark runs `benchmark throughput --segments` from c3
// to c1, one short round: every segment in order, each with a positive
// throughput, ratio, CPU per GB and round trip.
func (l *Lab) checkSegmentsBenchmark() {
	l.t.Helper()
	var segs []bench.Segment
	l.benchmark(&segs, "throughput", "--segments", "--from", "c3/demo/client", "--to", "c1/demo/client",
		"--rounds", "1", "--streams", "1", "--duration", "1s", "--count", "100")
	want := []string{"veth (baseline)", "node network", "tunnel", "+ overlay", "full path", "full path, control planes running"}
	var got []string
	for _, s := range segs {
		got = append(got, s.Name)
		if len(s.Throughput) != 1 || s.Throughput[0].Gbps <= 0 || s.Throughput[0].RatioToVeth <= 0 || s.Throughput[0].CPUSecondsPerGB <= 0 || s.P50US <= 0 {
			l.t.Errorf("segment %q: %+v, want one positive throughput figure and round trip", s.Name, s)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		l.t.Errorf("segments %q, want %q", got, want)
	}
}

// benchmark runs `causeway-lab benchmark <args> -o json` on this lab,
// logs what it printed and decodes its output into v; a failure or
// output that is not JSON fails the test.
func (l *Lab) benchmark(v any, args ...string) {
	l.t.Helper()
	args = append(append([]string{"benchmark"}, args...), "-o", "json")
	cmd := exec.Command(l.labBin, args...)
	cmd.Env = append(os.Environ(), "CAUSEWAY_LAB_DIR="+l.Dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		l.t.Fatalf("%v: %v\n%s%s", args, err, stderr.String(), stdout.String())
	}
	l.t.Logf("%v:\n%s%s", args, stderr.String(), stdout.String())
	if err := json.Unmarshal(stdout.Bytes(), v); err != nil {
		l.t.Fatalf("%v: output is not JSON: %v\n%s", args, err, stdout.String())
	}
}
