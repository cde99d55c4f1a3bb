// Package bench measures the dataplane between two lab pods the way users
// compare tunnels: TCP throughput with iperf3 (1 and N streams) and UDP
// request/response latency, each also measured over a raw veth pair
// between two fresh network namespaces in the same run, so every figure
// comes with its ratio to that baseline (the machines are shared and
// noisy; absolute numbers alone mean little). Segments measures the
// cross-cluster path piece by piece in the same way.
//
// Propagation measures the control plane and the datapath together: how
// long after a ServiceExport a pod of another cluster connects through the
// clusterset VIP, and how long after a cluster's last backend pod is
// deleted its backend is gone from the VIP map of every node (p50/p90/
// p99/max of sequential samples).
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/causeway-net/causeway/lab/apps"
)

// Endpoint is somewhere a benchmark program runs: a lab pod, or one side
// of the baseline veth pair.
type Endpoint interface {
	// Name describes the endpoint in reports.
	Name() string
	// IP is the address the other side connects to.
	IP() string
	// Start starts a program there, output to out.
	Start(ctx context.Context, path string, args []string, out io.Writer) (*exec.Cmd, error)
}

// Runner runs the measurements.
type Runner struct {
	// Self is the causeway-lab binary (its `app whereami|rr` serve the
	// latency test).
	Self string
	// IPerf3 is the iperf3 binary.
	IPerf3 string
	// Duration of one throughput measurement.
	Duration time.Duration
	// Count of latency round trips.
	Count int
}

// LabelBenchmark labels every object a benchmark creates with the
// benchmark's name (and the server pod of an exposed pair with its
// Service's name).
const LabelBenchmark = "causeway.dev/benchmark"

const (
	iperfPort = 5201
	rrPort    = 5301
)

// Throughput is one TCP throughput figure.
type Throughput struct {
	Streams int     `json:"streams"`
	Gbps    float64 `json:"gbps"`
}

// MeasureThroughput runs iperf3 from client to server with the given
// number of parallel streams.
func (r Runner) MeasureThroughput(ctx context.Context, server, client Endpoint, streams int) (Throughput, error) {
	var srvOut bytes.Buffer
	srv, err := server.Start(ctx, r.IPerf3, []string{"-s", "-1", "-p", strconv.Itoa(iperfPort)}, &srvOut)
	if err != nil {
		return Throughput{}, fmt.Errorf("iperf3 server in %s: %w", server.Name(), err)
	}
	defer stop(srv)
	var out bytes.Buffer
	var res iperfResult
	var last error
	for attempt := 0; attempt < 20; attempt++ { // the server needs a moment to listen
		out.Reset()
		c, err := client.Start(ctx, r.IPerf3, []string{"-c", server.IP(), "-p", strconv.Itoa(iperfPort), "-J",
			"-t", strconv.Itoa(int(r.Duration.Seconds())), "-P", strconv.Itoa(streams)}, &out)
		if err != nil {
			return Throughput{}, err
		}
		last = c.Wait()
		res = iperfResult{}
		if err := json.Unmarshal(out.Bytes(), &res); err != nil && last == nil {
			last = fmt.Errorf("parse iperf3 output: %w", err)
		}
		if last == nil && res.Error != "" {
			last = errors.New(res.Error)
		}
		// iperf3 -J may exit 0 with "unable to connect" in its JSON.
		if last == nil || !strings.Contains(last.Error()+out.String(), "unable to connect") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		return Throughput{}, fmt.Errorf("iperf3 %s → %s: %v: %s", client.Name(), server.Name(), last, tail(out.String()))
	}
	if res.End.SumReceived.BitsPerSecond <= 0 {
		return Throughput{}, fmt.Errorf("iperf3 %s → %s measured nothing: %s", client.Name(), server.Name(), tail(out.String()))
	}
	return Throughput{Streams: streams, Gbps: res.End.SumReceived.BitsPerSecond / 1e9}, nil
}

type iperfResult struct {
	Error string `json:"error"`
	End   struct {
		SumReceived struct {
			BitsPerSecond float64 `json:"bits_per_second"`
		} `json:"sum_received"`
	} `json:"end"`
}

// MeasureLatency runs sequential UDP round trips from client to a
// whereami echo started on server.
func (r Runner) MeasureLatency(ctx context.Context, server, client Endpoint) (apps.RRResult, error) {
	srv, err := server.Start(ctx, r.Self, []string{"app", "whereami", "--port", strconv.Itoa(rrPort), "--pod", "bench"}, io.Discard)
	if err != nil {
		return apps.RRResult{}, fmt.Errorf("echo server in %s: %w", server.Name(), err)
	}
	defer stop(srv)
	time.Sleep(300 * time.Millisecond) // let it bind
	var out bytes.Buffer
	c, err := client.Start(ctx, r.Self, []string{"app", "rr", "--addr", fmt.Sprintf("%s:%d", server.IP(), rrPort),
		"--count", strconv.Itoa(r.Count)}, &out)
	if err != nil {
		return apps.RRResult{}, err
	}
	if err := c.Wait(); err != nil {
		return apps.RRResult{}, fmt.Errorf("rr %s → %s: %v: %s", client.Name(), server.Name(), err, tail(out.String()))
	}
	var res apps.RRResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return res, fmt.Errorf("parse rr output: %w: %s", err, tail(out.String()))
	}
	if res.Count == 0 {
		return res, fmt.Errorf("rr %s → %s: every round trip lost", client.Name(), server.Name())
	}
	return res, nil
}

func stop(c *exec.Cmd) {
	_ = c.Process.Kill()
	_ = c.Wait()
}

func tail(s string) string {
	if len(s) > 400 {
		return "…" + s[len(s)-400:]
	}
	return s
}
