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
