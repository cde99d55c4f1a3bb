package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab"
)

// Segments measures the lab's cross-cluster path from a pod of Client to
// a pod of Server piece by piece, each piece added to the one before, in
// one run beside the raw veth baseline:
//
//   - node network: Server's non-gateway node → its gateway node, pod IP
//     to pod IP (the pod veths, the cluster's switch, routing);
//   - tunnel: Client's active gateway node → Server's, through the
//     clusterset VIP (the gateways, their cable and, in a globalnet lab,
//     globalnet; no overlay on either side);
//   - + overlay: the client on a non-gateway node of Client (its route
//     agent's VXLAN overlay to the gateway);
//   - full path: both pods on non-gateway nodes (the server's node reached
//     from the gateway over the cluster's switch after kube-proxy's DNAT).
//
// Each of these (the baseline too) is measured with every lab control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler:
// all on the same shared cores, which a real cluster's nodes do not
// share with their API servers) SIGSTOPped for the measurement, resumed
// between two; a last row measures the full path with them running.
// Every segment is measured once per round, and every figure is the
// median over the rounds.
//
// It creates one pod per node it needs (namespace default, named
// causeway-bench-<node>, labelled LabelBenchmark=segments) and exports
// the two server pods as ExposeTo does; Run removes them all.
type Segments struct {
	Lab    *lab.State
	Runner Runner
	// Client and Server are the two clusters (each needs a non-gateway
	// node).
	Client, Server string
	// Streams are the iperf3 stream counts, one measurement each.
	Streams []int
	// Rounds: every segment is measured once per round, the rounds one
	// after the other, and each figure is the median over the rounds.
	Rounds int
	// Timeout bounds each wait (pods ready, imports).
	Timeout time.Duration
}

// Segment is one measured piece of the path.
type Segment struct {
	Name string `json:"segment"`
	From string `json:"from"`
	To   string `json:"to"`
	// Throughput: one figure per stream count, with the busy CPU seconds
	// of the whole machine (every process, /proc/stat) per GB moved.
	Throughput []SegmentThroughput `json:"throughput"`
	// P50US and P99US are UDP request/response round trips.
	P50US float64 `json:"p50US"`
	P99US float64 `json:"p99US"`
}

// SegmentThroughput is one iperf3 figure of a segment.
type SegmentThroughput struct {
	Streams         int     `json:"streams"`
	Gbps            float64 `json:"gbps"`
	RatioToVeth     float64 `json:"ratioToVeth"`
	CPUSecondsPerGB float64 `json:"cpuSecondsPerGB"`
}

// SegmentsNamespace is where Segments creates its pods.
const SegmentsNamespace = "default"

// Run measures every segment and returns them, the baseline first.
func (s Segments) Run(ctx context.Context) (_ []Segment, err error) {
	pods := map[string]*LabPod{} // "<cluster>/gateway" and "<cluster>/node"
	var cleanups []func()
	defer func() {
		for _, c := range slices.Backward(cleanups) {
			c()
		}
	}()
	for _, cluster := range []string{s.Client, s.Server} {
		gw, node, err := s.nodes(ctx, cluster)
		if err != nil {
			return nil, err
		}
		for role, n := range map[string]string{"gateway": gw, "node": node} {
			p, cleanup, err := s.pod(ctx, cluster, n)
			if cleanup != nil {
				cleanups = append(cleanups, cleanup)
			}
			if err != nil {
				return nil, err
			}
			pods[cluster+"/"+role] = p
		}
	}
	// The same-cluster segment runs between copies taken before ExposeTo
	// makes the server pods answer to clusterset VIPs: pod IP to pod IP.
	local, localClient := *pods[s.Server+"/gateway"], *pods[s.Server+"/node"]
	for _, role := range []string{"gateway", "node"} {
		unexpose, err := pods[s.Server+"/"+role].ExposeTo(ctx, pods[s.Client+"/gateway"], s.Timeout)
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, unexpose)
	}
	base, err := NewBaseline(fmt.Sprintf("cws%d-", os.Getpid()%100000))
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, base.Close)

	type piece struct {
		name           string
		client, server Endpoint
		running        bool // the control planes run during the measurement
	}
	pieces := []piece{
		{"veth (baseline)", base.B, base.A, false},
		{"node network", &localClient, &local, false},
		{"tunnel", pods[s.Client+"/gateway"], pods[s.Server+"/gateway"], false},
		{"+ overlay", pods[s.Client+"/node"], pods[s.Server+"/gateway"], false},
		{"full path", pods[s.Client+"/node"], pods[s.Server+"/node"], false},
		{"full path, control planes running", pods[s.Client+"/node"], pods[s.Server+"/node"], true},
	}
	// samples[piece][round]
	samples := make([][]Segment, len(pieces))
	for range max(s.Rounds, 1) {
		for i, p := range pieces {
			seg, err := s.measure(ctx, p.name, p.client, p.server, !p.running)
			if err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], seg)
		}
	}
	out := make([]Segment, len(pieces))
	for i := range pieces {
		out[i] = medianSegment(samples[i])
	}
	for i := range out {
		for j := range out[i].Throughput {
			out[i].Throughput[j].RatioToVeth = out[i].Throughput[j].Gbps / out[0].Throughput[j].Gbps
		}
	}
	return out, nil
}

// measure is one round of one segment: throughput at every stream count,
// then latency, with the control planes stopped throughout when stop.
func (s Segments) measure(ctx context.Context, name string, client, server Endpoint, stop bool) (Segment, error) {
	seg := Segment{Name: name, From: client.Name(), To: server.Name()}
	if stop {
		resume, err := s.stopControlPlanes()
		if err != nil {
			return seg, err
		}
		defer func() {
			resume()
			time.Sleep(controlPlaneSettle)
		}()
	}
	for _, n := range s.Streams {
		t, err := s.throughput(ctx, server, client, n)
		if err != nil {
			return seg, fmt.Errorf("%s: %w", name, err)
		}
		seg.Throughput = append(seg.Throughput, t)
	}
	rr, err := s.Runner.MeasureLatency(ctx, server, client)
	if err != nil {
		return seg, fmt.Errorf("%s: %w", name, err)
	}
	seg.P50US, seg.P99US = rr.P50US, rr.P99US
	return seg, nil
}

// controlPlaneSettle is how long the control planes run between two
// measurements that stop them, so that leases are renewed.
const controlPlaneSettle = 3 * time.Second

// medianSegment is the median of every figure over the rounds.
func medianSegment(rounds []Segment) Segment {
	med := func(f func(Segment) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	seg := rounds[0]
	seg.Throughput = slices.Clone(seg.Throughput)
	for j := range seg.Throughput {
		seg.Throughput[j].Gbps = med(func(r Segment) float64 { return r.Throughput[j].Gbps })
		seg.Throughput[j].CPUSecondsPerGB = med(func(r Segment) float64 { return r.Throughput[j].CPUSecondsPerGB })
	}
	seg.P50US = med(func(r Segment) float64 { return r.P50US })
	seg.P99US = med(func(r Segment) float64 { return r.P99US })
	return seg
}

// throughput is one iperf3 measurement with the machine's busy CPU time
// over it.
func (s Segments) throughput(ctx context.Context, server, client Endpoint, streams int) (SegmentThroughput, error) {
	before, err := busyCPU()
	if err != nil {
		return SegmentThroughput{}, err
	}
	t, err := s.Runner.MeasureThroughput(ctx, server, client, streams)
	if err != nil {
		return SegmentThroughput{}, err
	}
	after, err := busyCPU()
	if err != nil {
		return SegmentThroughput{}, err
	}
	gb := t.Gbps / 8 * s.Runner.Duration.Seconds()
	return SegmentThroughput{Streams: streams, Gbps: t.Gbps, CPUSecondsPerGB: (after - before).Seconds() / gb}, nil
}

// nodes returns cluster's node whose gateway is active and one of its
// nodes that is no gateway candidate.
func (s Segments) nodes(ctx context.Context, cluster string) (gateway, node string, err error) {
	c, ok := s.Lab.Topology.Cluster(cluster)
	if !ok {
		return "", "", fmt.Errorf("no cluster %q in the lab", cluster)
	}
	for _, n := range c.Nodes {
		if !n.WANAddress.IsValid() {
			node = n.Name
			break
		}
	}
	if node == "" {
		return "", "", fmt.Errorf("%s: every node is a gateway candidate; the segments need a node that is not", cluster)
	}
	cl, err := s.Lab.Client(cluster)
	if err != nil {
		return "", "", err
	}
	err = poll(ctx, s.Timeout, 200*time.Millisecond, cluster+": one active gateway", func() (bool, error) {
		active, err := activeGateways(ctx, cl, "")
		if err != nil {
			return false, err
		}
		if len(active) != 1 {
			return false, fmt.Errorf("active: %v", active)
		}
		gateway = active[0]
		return true, nil
	})
	return gateway, node, err
}

// pod creates the benchmark's pod on node of cluster and waits until it
// runs; cleanup (set once it was created) deletes it.
func (s Segments) pod(ctx context.Context, cluster, node string) (_ *LabPod, cleanup func(), err error) {
	cl, err := s.Lab.Client(cluster)
	if err != nil {
		return nil, nil, err
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: SegmentsNamespace, Name: "causeway-bench-" + node,
			Labels: map[string]string{LabelBenchmark: "segments"}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "bench", Image: "causeway.dev/lab/client"}}},
	}
	if err := cl.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, nil, fmt.Errorf("%s: create pod %s: %w", cluster, p.Name, err)
	}
	cleanup = func() { // deletes the pod and waits until it is gone
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = cl.Delete(dctx, p)
		_ = poll(dctx, 30*time.Second, 200*time.Millisecond, "pod "+p.Name+" gone", func() (bool, error) {
			err := cl.Get(dctx, client.ObjectKeyFromObject(p), &corev1.Pod{})
			return apierrors.IsNotFound(err), nil
		})
	}
	ref := cluster + "/" + p.Namespace + "/" + p.Name
	var lp *LabPod
	err = poll(ctx, s.Timeout, 200*time.Millisecond, ref+" running", func() (bool, error) {
		if err := cl.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, err
		}
		if p.Status.Phase != corev1.PodRunning {
			return false, fmt.Errorf("phase %s", p.Status.Phase)
		}
		lp, err = NewLabPod(ctx, s.Lab, ref)
		return err == nil, err
	})
	return lp, cleanup, err
}

// controlPlaneUnits are the supervisor units stopControlPlanes stops.
var controlPlaneUnits = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// stopControlPlanes SIGSTOPs every control plane unit of the lab (the
// broker's and every cluster's) and returns the function that resumes
// them.
func (s Segments) stopControlPlanes() (resume func(), err error) {
	units, err := s.Lab.Status()
	if err != nil {
		return nil, err
	}
	var stopped []int
	resume = func() {
		for _, pid := range stopped {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	for _, u := range units {
		if !u.Running || u.PID == 0 || !slices.Contains(controlPlaneUnits, path.Base(u.Name)) {
			continue
		}
		if err := syscall.Kill(u.PID, syscall.SIGSTOP); err != nil {
			resume()
			return nil, fmt.Errorf("stop %s: %w", u.Name, err)
		}
		stopped = append(stopped, u.PID)
	}
	if len(stopped) == 0 {
		return nil, errors.New("no control plane unit is running")
	}
	return resume, nil
}

// busyCPU is the machine's CPU time not idle (every CPU, /proc/stat).
func busyCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i != 3 && i != 4 && i < 8 { // idle, iowait; guest times are in user already
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / 100, nil // USER_HZ
}
