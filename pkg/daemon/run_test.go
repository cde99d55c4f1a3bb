package daemon

import (
	"context"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// get returns the status of GET url (0 when it fails). It runs inside a
// daemon's work function, where t.Fatal would leave Run waiting.
func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestListeners: metrics and pprof on the metrics listener only; the
// health listener answers the kubelet's probes and nothing else; the
// default metrics address is loopback.
func TestListeners(t *testing.T) {
	if d := DefaultOptions(9531, 9541); !strings.HasPrefix(d.MetricsAddr, "127.0.0.1:") || d.HealthAddr != ":9541" {
		t.Errorf("defaults: metrics %q, health %q", d.MetricsAddr, d.HealthAddr)
	}
	opts := DefaultOptions(0, 0)
	opts.ClusterID, opts.NodeName = "c1", "n1"
	opts.MetricsAddr, opts.HealthAddr, opts.Profiling = "127.0.0.1:0", "localhost:0", true
	err := RunContext(context.Background(), "test", &opts, func(_ context.Context, rt *Runtime) error {
		m, h := "http://"+rt.Addr, "http://"+rt.HealthAddr
		if rt.HealthAddr == "" || rt.HealthAddr == rt.Addr {
			t.Errorf("no separate health listener: %q", rt.HealthAddr)
			return nil
		}
		if c := get(t, h+"/readyz"); c != http.StatusServiceUnavailable {
			t.Errorf("health /readyz before startup: %d", c)
		}
		rt.SetReady("startup", nil)
		for url, want := range map[string]int{
			h + "/healthz": 200, h + "/readyz": 200, h + "/metrics": 404, h + "/debug/pprof/": 404,
			m + "/metrics": 200, m + "/debug/pprof/": 200, m + "/readyz": 200,
		} {
			if c := get(t, url); c != want {
				t.Errorf("GET %s: %d, want %d", url, c, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestGCPercent: a daemon runs with its GCPercent unless the environment
// sets GOGC, which wins.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	gcPercent := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }
	run := func() int {
		t.Helper()
		opts := DefaultOptions(0, 0)
		opts.ClusterID, opts.NodeName, opts.MetricsAddr, opts.HealthAddr = "c1", "n1", "0", "0"
		opts.GCPercent = 25
		var got int
		if err := RunContext(context.Background(), "test", &opts, func(context.Context, *Runtime) error {
			got = gcPercent()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		debug.SetGCPercent(100)
		return got
	}
	t.Setenv("GOGC", "") // restored at the end
	os.Unsetenv("GOGC")
	if got := run(); got != 25 {
		t.Errorf("without GOGC the daemon runs with GC percent %d, want its GCPercent 25", got)
	}
	t.Setenv("GOGC", "100")
	if got := run(); got != 100 {
		t.Errorf("with GOGC=100 the daemon runs with GC percent %d, want 100", got)
	}
}
