package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/lab/bench"
)

// TestSoak runs `causeway-lab benchmark soak` for a few minutes in the
// default lab with two gateway candidates per cluster: rounds of export/unexport, scaling, gateway failovers and
// restarts of an API server, an MCS controller and a route agent, with a
// client requesting the clusterset VIP of whereami (c1 and c2) from c3
// every 100 ms. No request fails outside the fault windows, a gateway
// failover's requests fail for less than failoverBound, and every
// daemon's RSS and goroutines and every node's routes, nftables
// elements, VIP entries and conntrack entries are back within the
// soak's tolerance at the end (30 min by hand: --duration 30m).
func TestSoak(t *testing.T) {
	l := StartLab(t, "--gateways", "2")
	const duration = 3 * time.Minute
	cmd := exec.Command(l.labBin, "benchmark", "soak", "--duration", duration.String(), "--settle", "20s", "-o", "json")
	cmd.Env = append(os.Environ(), "CAUSEWAY_LAB_DIR="+l.Dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	t.Logf("benchmark soak:\n%s%s", stderr.String(), stdout.String())
	var res bench.SoakResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("benchmark soak: %v; output is not its JSON result: %v", runErr, err)
	}
	if runErr != nil {
		t.Errorf("benchmark soak: %v", runErr)
	}
	if res.Rounds < 2 {
		t.Errorf("%d rounds of churn in %s, want at least 2", res.Rounds, duration)
	}
	if want := int(duration / (200 * time.Millisecond)); res.Requests < want {
		t.Errorf("%d requests, want at least %d (one every 100 ms for %s)", res.Requests, want, duration)
	}
	if res.Export.N != 2*(res.Rounds+1) {
		t.Errorf("%d export samples in %d rounds and the warm-up round, want 2 each", res.Export.N, res.Rounds)
	}
	if res.FailedOutside > 0 {
		t.Errorf("%d requests failed outside the fault windows", res.FailedOutside)
	}
	failovers := 0
	for _, w := range res.Windows {
		if strings.HasPrefix(w.Fault, "gateway failover") {
			failovers++
			if w.FailedSeconds >= failoverBound.Seconds() {
				t.Errorf("%s: requests failed for %.2f s, want < %s", w.Fault, w.FailedSeconds, failoverBound)
			}
		}
	}
	if failovers < res.Rounds {
		t.Errorf("%d gateway failovers in %d rounds", failovers, res.Rounds)
	}
	for _, g := range res.Growth {
		t.Errorf("grew: %s", g)
	}
	if len(res.Before.Daemons) == 0 || len(res.Before.Nodes) != len(res.After.Nodes) {
		t.Errorf("snapshots: %d daemons; %d nodes before, %d after", len(res.Before.Daemons), len(res.Before.Nodes), len(res.After.Nodes))
	}
}
