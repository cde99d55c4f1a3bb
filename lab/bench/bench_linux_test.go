package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBaselineThroughput runs iperf3 over the baseline veth pair and
// checks the pair is gone afterwards.
func TestBaselineThroughput(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	iperf, err := exec.LookPath("iperf3")
	if err != nil {
		t.Fatalf("iperf3 is installed by .ci/run: %v", err)
	}
	prefix := fmt.Sprintf("cwbt%05d-", time.Now().UnixNano()%100000)
	b, err := NewBaseline(prefix)
	if err != nil {
		t.Fatal(err)
	}
	r := Runner{IPerf3: iperf, Duration: time.Second}
	got, err := r.MeasureThroughput(context.Background(), b.B, b.A, 1)
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got.Gbps <= 0 || got.Streams != 1 {
		t.Errorf("baseline throughput %+v, want a positive figure for 1 stream", got)
	}
	t.Logf("raw veth, 1 stream, 1 s: %.2f Gbit/s", got.Gbps)
	out, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(out), prefix) {
		t.Errorf("baseline namespaces left behind:\n%s", out)
	}
}
