package bench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestSumMetrics(t *testing.T) {
	text := `# TYPE apiserver_longrunning_requests gauge
apiserver_longrunning_requests{group="causeway.dev",resource="serviceexportrecords",verb="WATCH"} 4
apiserver_longrunning_requests{group="coordination.k8s.io",resource="leases",verb="WATCH"} 3
apiserver_longrunning_requests{group="",resource="pods",verb="WATCH"} 2
apiserver_longrunning_requests{group="",resource="pods",verb="CONNECT"} 7
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 1.5
go_memstats_heap_alloc_bytes 1234
`
	m, err := parseMetrics(strings.NewReader(text), "test")
	if err != nil {
		t.Fatal(err)
	}
	watch := func(l map[string]string) bool { return l["verb"] == "WATCH" }
	ours := func(l map[string]string) bool { return watch(l) && l["group"] != "" }
	for _, tc := range []struct {
		name   string
		match  func(map[string]string) bool
		want   float64
		wantOK bool
	}{
		{"apiserver_longrunning_requests", nil, 16, true},
		{"apiserver_longrunning_requests", watch, 9, true},
		{"apiserver_longrunning_requests", ours, 7, true},
		{"process_cpu_seconds_total", nil, 1.5, true},
		{"go_memstats_heap_alloc_bytes", nil, 1234, true},
		{"causeway_mcs_imports", nil, 0, false},
	} {
		if got, ok := sum(m, tc.name, tc.match); got != tc.want || ok != tc.wantOK {
			t.Errorf("sum(%s) = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

// TestProcessStart: this test's own process started before now, on the
// boot clock, and not long before (go test starts it).
func TestProcessStart(t *testing.T) {
	started, err := processStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	now, err := sinceBoot()
	if err != nil {
		t.Fatal(err)
	}
	if started <= 0 || started > now || now-started > 10*time.Minute {
		t.Errorf("process started at %v since boot, now is %v: want shortly before", started, now)
	}
}

// TestWithCPU: each daemon's CPU seconds in the benchmark and steady
// windows, by process; a process not measured at the start or middle
// is marked restarted and counts its own CPU only.
func TestWithCPU(t *testing.T) {
	d := func(name string, pid int, total float64) DaemonStats {
		return DaemonStats{Name: name, PID: pid, TotalCPUSeconds: total}
	}
	before := []DaemonStats{d("a", 1, 10), d("b", 2, 10), d("c", 3, 10)}
	mid := []DaemonStats{d("a", 1, 15), d("b", 20, 4), d("c", 3, 12)}
	end := []DaemonStats{d("a", 1, 16), d("b", 20, 5), d("c", 30, 1)}
	type cpu struct {
		bench, steady float64
		restarted     bool
	}
	want := map[string]cpu{
		"a": {5, 1, false}, // the same process throughout
		"b": {4, 1, true},  // restarted before mid: its new process's 4 s
		"c": {0, 1, true},  // restarted after mid: all of it steady
	}
	got := withCPU(before, mid, end)
	if len(got) != len(end) {
		t.Fatalf("%d daemons, want %d", len(got), len(end))
	}
	for _, g := range got {
		if w := want[g.Name]; (cpu{g.CPUSeconds, g.SteadyCPUSeconds, g.Restarted}) != w {
			t.Errorf("%s: benchmark %v s, steady %v s, restarted %v; want %+v", g.Name, g.CPUSeconds, g.SteadyCPUSeconds, g.Restarted, w)
		}
	}
}
