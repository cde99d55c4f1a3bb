package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/internal/procmem"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
	mcscontroller "github.com/causeway-net/causeway/pkg/mcs/controller"
)

// Names of what Scale adds to the lab. Simulated members are the broker
// identities SimulatedPrefix<NNN>; their Services live in ScaleNamespace,
// which Scale creates in every real member (the MCS API imports a
// Service only where its namespace exists).
const (
	SimulatedPrefix = "scalesim-"
	ScaleNamespace  = "causeway-scale"
	scaleBenchmark  = "scale"
	// causewayNamespace is where the chart runs the daemons.
	causewayNamespace = "causeway-system"
	// livenessDuration is the MCS controller's default liveness Lease
	// duration (--liveness-lease-duration); it renews every third of it.
	livenessDuration = 3 * time.Second
)

// Scale measures a lab's real members (their gateways, route agents, MCS
// and globalnet controllers, as the chart runs them) while the lab's
// broker holds Members more member identities, each created as
// `causewayctl deploy-broker` creates one (broker.EnsureClusterIdentity),
// each exporting the same Services export.Services with its own broker
// credentials the way its MCS controller would: its liveness Lease
// renewed every second, one ServiceExportRecord per Service built by the
// product's record code (mcs.NewExportRecord, RecordEndpointsFromSlices,
// Aggregate, SplitRecord) from a Service with one ready endpoint, and the
// Service's clusterset VIP allocated by the product's allocator
// (mcs.FamilyVIPAllocator over the broker). Simulated members run no
// gateway: they publish no gateway Endpoint, so the real members import
// their Services with their backends not ready ("no tunnel to
// cluster …") and build no tunnel to them.
type Scale struct {
	// Lab is the lab, up.
	Lab *lab.State
	// Members is the number of simulated members; Services the Services
	// each exports (the same names in every member).
	Members, Services int
	// Writers bounds the simulated members' concurrent API requests.
	Writers int
	// Export measures export → reachable in the real members while the
	// simulated members are steady; Exports is its number of samples.
	Export  *Propagation
	Exports int
	// Steady is how long the daemons' CPU time is measured once
	// everything is imported and the export samples are taken, while
	// nothing changes but the simulated members' Lease renewals.
	Steady time.Duration
	// ResyncCluster is the real member whose MCS controller is restarted
	// to time its full resync.
	ResyncCluster string
	// Timeout bounds each wait (convergence, resync, cleanup).
	Timeout time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// ScaleResult is what Scale measured.
type ScaleResult struct {
	Members  int `json:"members"`
	Services int `json:"services"`
	// RealMembers are the lab's clusters, whose daemons are measured.
	RealMembers []string `json:"realMembers"`
	// WriteSeconds: the simulated members' identities, Leases, records
	// and VIPs written; ConvergeSeconds: from the first write until every
	// real member holds a ServiceImport with a VIP of every Service.
	WriteSeconds    float64 `json:"writeSeconds"`
	ConvergeSeconds float64 `json:"convergeSeconds"`
	// SettledSeconds: from the first write until, after convergence,
	// every real member's MCS controller had an empty work queue
	// (causeway_mcs_queue_depth 0) at three scrapes in a row, a second
	// apart; the export samples start then.
	SettledSeconds float64 `json:"settledSeconds"`
	// LeaseRenewalFailures counts the simulated members' liveness Lease
	// renewals that failed (timed out under load, say) while they ran.
	LeaseRenewalFailures int64 `json:"leaseRenewalFailures"`
	// Daemons are the real members' daemons, measured at the end of
	// the steady window (when a later step fails: after the export
	// samples, without the steady CPU seconds).
	Daemons []DaemonStats `json:"daemons"`
	// ExportReachableP50Ms and ExportReachableP99Ms: from a new
	// ServiceExport in Export.Exporter until a TCP connect from
	// Export.Client to its VIP succeeds (Export.Reachable's p50 and p99).
	ExportReachableP50Ms float64       `json:"exportReachableP50Ms"`
	ExportReachableP99Ms float64       `json:"exportReachableP99Ms"`
	Export               *ExportResult `json:"export"`
	// SteadySeconds is the steady window Daemons' SteadyCPUSeconds
	// cover.
	SteadySeconds float64      `json:"steadySeconds"`
	Resync        ResyncResult `json:"resync"`
	Broker        BrokerStats  `json:"broker"`
}

// DaemonStats is one real daemon's process, measured from /proc (RSS)
// and from its own Prometheus metrics (heap, CPU), read inside its
// network namespace.
type DaemonStats struct {
	// Name is <cluster>/<node>/<daemon>.
	Name    string `json:"name"`
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	Daemon  string `json:"daemon"`
	PID     int    `json:"pid"`
	// RSSBytes and PeakRSSBytes: VmRSS and VmHWM.
	RSSBytes     int64 `json:"rssBytes"`
	PeakRSSBytes int64 `json:"peakRssBytes"`
	// HeapBytes: go_memstats_heap_alloc_bytes (live heap plus garbage
	// not yet collected).
	HeapBytes int64 `json:"heapBytes"`
	// Goroutines: go_goroutines.
	Goroutines int `json:"goroutines"`
	// CPUSeconds: process_cpu_seconds_total spent during the benchmark,
	// from before the simulated members were written until the export
	// samples were taken; SteadyCPUSeconds: during the steady window
	// after that (ScaleResult.SteadySeconds); TotalCPUSeconds: since the
	// process started, at the end of the steady window.
	CPUSeconds       float64 `json:"cpuSeconds"`
	SteadyCPUSeconds float64 `json:"steadyCpuSeconds"`
	TotalCPUSeconds  float64 `json:"totalCpuSeconds"`
	// Restarted: the process measured last is not the one measured
	// before the writes (a liveness probe or a crash restarted it):
	// its CPU seconds count the new process only, none of the old one.
	Restarted bool `json:"restarted"`
}

// ResyncResult times a full resync: ResyncCluster's MCS controller Pod
// is deleted, and Seconds runs from the start of the new controller
// process until its causeway_mcs_imports gauge is back at Imports, its
// value before; FromDeleteSeconds from the Pod's deletion (the new Pod
// scheduled and started by the lab's kubelet included).
type ResyncResult struct {
	Cluster           string  `json:"cluster"`
	Imports           float64 `json:"imports"`
	Seconds           float64 `json:"seconds"`
	FromDeleteSeconds float64 `json:"fromDeleteSeconds"`
}

// BrokerStats describes the broker once the simulated members are
// steady. Objects is etcd's key count (every stored object is one key),
// DBBytes etcd's database size; the record, VIP and Lease counts are
// listed from the API server. Watches is the number of WATCH requests
// the broker's API server serves (apiserver_longrunning_requests),
// CausewayWatches those of causeway.dev resources and Leases;
// WatchEventsPerSecond the watch events it sent
// (apiserver_watch_events_total) per second while the export samples
// were taken.
type BrokerStats struct {
	Objects              int64   `json:"objects"`
	DBBytes              int64   `json:"etcdDbBytes"`
	Records              int     `json:"serviceExportRecords"`
	VIPAllocations       int     `json:"vipAllocations"`
	Leases               int     `json:"leases"`
	Watches              int64   `json:"watches"`
	CausewayWatches      int64   `json:"causewayWatches"`
	WatchEventsPerSecond float64 `json:"watchEventsPerSecond"`
}

func (s *Scale) progress(format string, args ...any) {
	if s.Progress != nil {
		fmt.Fprintf(s.Progress, format+"\n", args...)
	}
}

// SimulatedID is the cluster ID of simulated member i (0-based).
func SimulatedID(i int) string { return fmt.Sprintf("%s%03d", SimulatedPrefix, i+1) }

func serviceName(i int) string { return fmt.Sprintf("svc-%d", i) }

// Run adds the simulated members, measures, and leaves them in place:
// Cleanup removes them.
func (s *Scale) Run(ctx context.Context) (ScaleResult, error) {
	res := ScaleResult{Members: s.Members, Services: s.Services, RealMembers: s.Lab.Members()}
	switch {
	case s.Members < 1 || s.Members > 999:
		return res, fmt.Errorf("--members %d: want 1 to 999", s.Members)
	case s.Services < 1 || s.Services > 60000:
		return res, fmt.Errorf("--services %d: want 1 to 60000", s.Services)
	case !slices.Contains(s.Lab.Members(), s.ResyncCluster):
		return res, fmt.Errorf("--resync-cluster %s is no cluster of the lab (%v)", s.ResyncCluster, s.Lab.Members())
	}
	before, err := measureDaemons(ctx, s.Lab)
	if err != nil {
		return res, err
	}
	for _, cl := range s.Lab.Members() {
		c, err := s.Lab.Client(cl)
		if err != nil {
			return res, err
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ScaleNamespace, Labels: map[string]string{LabelBenchmark: scaleBenchmark}}}
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return res, fmt.Errorf("%s: create namespace %s: %w", cl, ScaleNamespace, err)
		}
	}
	start := time.Now()
	sims, err := s.startMembers(ctx)
	defer sims.stop()
	if err != nil {
		return res, err
	}
	if err := sims.writeRecords(ctx); err != nil {
		return res, err
	}
	res.WriteSeconds = time.Since(start).Seconds()
	s.progress("%d simulated members × %d Services written to the broker in %.1fs", s.Members, s.Services, res.WriteSeconds)
	if err := s.waitImported(ctx); err != nil {
		return res, err
	}
	res.ConvergeSeconds = time.Since(start).Seconds()
	s.progress("every real member imports the %d Services with a VIP, %.1fs after the first write", s.Services, res.ConvergeSeconds)
	if err := s.waitSettled(ctx); err != nil {
		return res, err
	}
	res.SettledSeconds = time.Since(start).Seconds()
	s.progress("every real member's MCS controller has an empty work queue, %.1fs after the first write", res.SettledSeconds)

	brokerBefore, err := s.brokerMetrics(ctx)
	if err != nil {
		return res, err
	}
	window := time.Now()
	exp, expErr := s.Export.MeasureExport(ctx, s.Exports)
	if expErr == nil {
		res.Export = &exp
		res.ExportReachableP50Ms, res.ExportReachableP99Ms = exp.Reachable.P50MS, exp.Reachable.P99MS
	}
	after, err := measureDaemons(ctx, s.Lab)
	if err != nil {
		return res, errors.Join(expErr, err)
	}
	res.Daemons = withCPU(before, after, after)
	if expErr != nil {
		return res, fmt.Errorf("export → reachable: %w", expErr)
	}
	brokerAfter, err := s.brokerMetrics(ctx)
	if err != nil {
		return res, err
	}
	if res.Broker, err = s.brokerStats(ctx, brokerBefore, brokerAfter, time.Since(window)); err != nil {
		return res, err
	}
	s.progress("steady for %s: the daemons' CPU time while nothing changes but the simulated members' Lease renewals", s.Steady)
	steady := time.Now()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(s.Steady):
	}
	steadyAfter, err := measureDaemons(ctx, s.Lab)
	if err != nil {
		return res, err
	}
	res.SteadySeconds = time.Since(steady).Seconds()
	res.Daemons = withCPU(before, after, steadyAfter)
	for _, d := range res.Daemons {
		if d.Restarted {
			s.progress("%s restarted during the benchmark (now pid %d): its CPU seconds count its new process only", d.Name, d.PID)
		}
	}
	res.LeaseRenewalFailures = sims.failed.Load()
	if res.Resync, err = s.resync(ctx); err != nil {
		return res, err
	}
	s.progress("%s's MCS controller resynced %v imports %.2fs after its new process started (%.2fs after its Pod was deleted)",
		res.Resync.Cluster, res.Resync.Imports, res.Resync.Seconds, res.Resync.FromDeleteSeconds)
	return res, nil
}

// withCPU returns the daemons as measured at end, with the CPU seconds
// each spent from before to mid (CPUSeconds) and from mid to end
// (SteadyCPUSeconds). A daemon whose process at end was not measured
// before, or mid, was restarted in between (Restarted): its figures
// count its new process only (from its start to mid, or all of it as
// steady when it started after mid).
func withCPU(before, mid, end []DaemonStats) []DaemonStats {
	total := func(in []DaemonStats, d DaemonStats) (float64, bool) {
		i := slices.IndexFunc(in, func(b DaemonStats) bool { return b.Name == d.Name && b.PID == d.PID })
		if i < 0 {
			return 0, false
		}
		return in[i].TotalCPUSeconds, true
	}
	out := make([]DaemonStats, 0, len(end))
	for _, d := range end {
		start, sameStart := total(before, d)
		m, sameMid := total(mid, d)
		if sameMid {
			d.CPUSeconds = m - start
		}
		d.SteadyCPUSeconds = d.TotalCPUSeconds - m
		d.Restarted = !sameStart || !sameMid
		out = append(out, d)
	}
	return out
}

// waitSettled waits until every real member's MCS controller has had an
// empty work queue (causeway_mcs_queue_depth 0) at three rounds of
// scrapes in a row, a second apart: every ServiceImport may be complete
// (waitImported) while syncs the writes queued are still to come, and
// an export sample taken then waits behind them.
func (s *Scale) waitSettled(ctx context.Context) error {
	empty := 0
	return poll(ctx, s.Timeout, time.Second, "every real member's MCS controller with an empty work queue", func() (bool, error) {
		for _, cl := range s.Lab.Members() {
			depth, err := s.queueDepth(ctx, cl)
			if err != nil {
				empty = 0
				return false, err
			}
			if depth > 0 {
				empty = 0
				return false, fmt.Errorf("%s: %v Services queued", cl, depth)
			}
		}
		empty++
		return empty >= 3, nil
	})
}

// queueDepth reads causeway_mcs_queue_depth of cluster's MCS controller.
func (s *Scale) queueDepth(ctx context.Context, cluster string) (float64, error) {
	p, err := readyMCSController(ctx, s.Lab, cluster)
	if err != nil {
		return 0, err
	}
	depth, _, err := daemonGauge(ctx, p, "causeway_mcs_queue_depth")
	return depth, err
}

// daemonGauge reads the metric name (summed over its series) of daemon
// Pod p's process, one scrape, and returns it with the process's PID.
func daemonGauge(ctx context.Context, p *corev1.Pod, name string) (float64, int, error) {
	if len(p.Status.ContainerStatuses) == 0 {
		return 0, 0, fmt.Errorf("pod %s has no container status", p.Name)
	}
	pid, ok := kubelet.ContainerPID(p.Status.ContainerStatuses[0].ContainerID)
	if !ok {
		return 0, 0, fmt.Errorf("container ID %q of pod %s is not the lab kubelet's", p.Status.ContainerStatuses[0].ContainerID, p.Name)
	}
	m, err := scrapeDaemon(ctx, pid, p)
	if err != nil {
		return 0, 0, err
	}
	v, ok := sum(m, name, nil)
	if !ok {
		return 0, 0, fmt.Errorf("pod %s: no %s in its metrics (yet)", p.Name, name)
	}
	return v, pid, nil
}

// readyMCSController is cluster's ready MCS controller Pod.
func readyMCSController(ctx context.Context, st *lab.State, cluster string) (*corev1.Pod, error) {
	pods, err := daemonPods(ctx, st, cluster)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Spec.Containers[0].Name == "mcs-controller" && kube.PodReady(&pods[i]) {
			return &pods[i], nil
		}
	}
	return nil, fmt.Errorf("%s: no ready MCS controller Pod", cluster)
}

// simulated are the simulated members while Run goes: their broker
// clients and the goroutines renewing their Leases.
type simulated struct {
	s       *Scale
	members []simMember
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// failed counts the Lease renewals that failed (each bounded by
	// livenessDuration, as the controller's): under load a renewal may
	// time out, which a real controller logs and retries as well.
	failed atomic.Int64
}

type simMember struct {
	id    string
	index int
	c     client.Client
	alloc *mcs.FamilyVIPAllocator
}

// startMembers creates the simulated members' broker identities and
// starts renewing their liveness Leases.
func (s *Scale) startMembers(ctx context.Context) (*simulated, error) {
	sims := &simulated{s: s}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sims.cancel = cancel
	admin, err := s.Lab.RESTConfig("broker")
	if err != nil {
		return sims, err
	}
	ac, err := client.New(admin, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return sims, err
	}
	policy, err := clusterset.Read(ctx, ac)
	if err != nil {
		return sims, fmt.Errorf("read the ClusterSet policy: %w", err)
	}
	v4, err := mcs.ParseVIPRange(policy.VIPRange.String())
	if err != nil {
		return sims, err
	}
	sims.members = make([]simMember, s.Members)
	errs := make([]error, s.Members)
	InParallel(s.Writers, s.Members, func(i int) {
		id := SimulatedID(i)
		kc, err := broker.EnsureClusterIdentity(ctx, admin, id)
		if err != nil {
			errs[i] = fmt.Errorf("broker identity of %s: %w", id, err)
			return
		}
		rc, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			errs[i] = fmt.Errorf("kubeconfig of %s: %w", id, err)
			return
		}
		// The MCS controller's default client limits.
		rc.QPS, rc.Burst = 200, 400
		c, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
		if err != nil {
			errs[i] = err
			return
		}
		alloc, err := mcs.NewFamilyVIPAllocator(v4, mcs.VIPRange{}, mcs.NewBrokerVIPStore(c, id), id)
		if err != nil {
			errs[i] = err
			return
		}
		sims.members[i] = simMember{id: id, index: i, c: c, alloc: alloc}
	})
	if err := errors.Join(errs...); err != nil {
		return sims, err
	}
	s.progress("%d simulated member identities in the broker (%s…%s)", s.Members, SimulatedID(0), SimulatedID(s.Members-1))
	// Records are written only after the Lease, as the controller does.
	for _, m := range sims.members {
		if err := mcscontroller.RenewLivenessLease(ctx, m.c, m.id, livenessDuration); err != nil {
			return sims, fmt.Errorf("liveness Lease of %s: %w", m.id, err)
		}
	}
	for _, m := range sims.members {
		sims.wg.Go(func() {
			t := time.NewTicker(livenessDuration / 3)
			defer t.Stop()
			for {
				select {
				case <-lctx.Done():
					return
				case <-t.C:
				}
				if err := mcscontroller.RenewLivenessLease(lctx, m.c, m.id, livenessDuration); err != nil && lctx.Err() == nil {
					sims.failed.Add(1)
				}
			}
		})
	}
	return sims, nil
}

func (sims *simulated) stop() {
	sims.cancel()
	sims.wg.Wait()
}

// writeRecords publishes every simulated member's record of every
// Service and allocates its VIP, as the member's MCS controller's export
// sync would.
func (sims *simulated) writeRecords(ctx context.Context) error {
	s := sims.s
	type job struct{ member, service int }
	jobs := make([]job, 0, s.Members*s.Services)
	// Service by Service, so the members export each one about together.
	for i := range s.Services {
		for m := range s.Members {
			jobs = append(jobs, job{m, i})
		}
	}
	errs := make([]error, len(jobs))
	InParallel(s.Writers, len(jobs), func(k int) {
		j := jobs[k]
		errs[k] = sims.members[j.member].export(ctx, j.service)
	})
	return errors.Join(errs...)
}

// export writes member m's record of Service i and allocates its VIP.
// The Service has ClusterIP 10.<128+m>.<i/250>.<i%250+1> and one ready
// endpoint 10.<128+m>.255.<i%250+1> (distinct per member, inside the
// ClusterSet policy's default allowed space).
func (m simMember) export(ctx context.Context, i int) error {
	name := serviceName(i)
	clusterIP := netip.AddrFrom4([4]byte{10, byte(128 + m.index%128), byte(i / 250), byte(i%250 + 1)}).String()
	podIP := netip.AddrFrom4([4]byte{10, byte(128 + m.index%128), 255, byte(i%250 + 1)}).String()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ScaleNamespace, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	export := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ScaleNamespace, Name: name, CreationTimestamp: metav1.Now()}}
	ready := true
	slice := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ScaleNamespace, Name: name + "-local", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Protocol: new(corev1.ProtocolTCP), Port: new(int32(8080))}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{podIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: new(false)}}},
	}
	rec, err := mcs.NewExportRecord(m.id, export, svc)
	if err != nil {
		return fmt.Errorf("%s: record of %s: %w", m.id, name, err)
	}
	rec.Endpoints = mcs.RecordEndpointsFromSlices([]discoveryv1.EndpointSlice{slice})
	mcs.Aggregate(&rec)
	ns := broker.Namespace(m.id)
	objs := mcs.SplitRecord(rec, mcs.MaxRecordItems)
	// Parts before the head that names them, as the controller writes.
	for _, p := range objs[1:] {
		obj := &causewayv1alpha1.ServiceExportRecord{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mcs.RecordPartName(p.ServiceNamespace, p.ServiceName, p.Part.Revision, int(p.Part.Index))},
			Spec:       p,
		}
		if err := m.c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: create record part %s: %w", m.id, obj.Name, err)
		}
	}
	head := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: mcs.RecordName(ScaleNamespace, name)}, Spec: objs[0]}
	err = m.c.Create(ctx, head)
	if apierrors.IsAlreadyExists(err) {
		err = m.c.Get(ctx, client.ObjectKeyFromObject(head), head)
	}
	if err != nil {
		return fmt.Errorf("%s: create record %s: %w", m.id, head.Name, err)
	}
	key := types.NamespacedName{Namespace: ScaleNamespace, Name: name}
	if _, err := m.alloc.Allocate(ctx, key, rec.IPFamilies, m.exporters(ctx, key, head.CreationTimestamp.Time), nil); err != nil {
		return fmt.Errorf("%s: VIP of %s: %w", m.id, key, err)
	}
	return nil
}

// exporters is the VIP allocator's view of which clusters export key, as
// the MCS controller's: this member since its record's creation, any
// other cluster while the broker holds its record of key.
func (m simMember) exporters(ctx context.Context, key types.NamespacedName, created time.Time) mcs.VIPExporters {
	return func(cluster string) (time.Time, bool) {
		if cluster == m.id {
			return created, true
		}
		var rec causewayv1alpha1.ServiceExportRecord
		err := m.c.Get(ctx, types.NamespacedName{Namespace: broker.Namespace(cluster), Name: mcs.RecordName(key.Namespace, key.Name)}, &rec)
		if err != nil || rec.DeletionTimestamp != nil || rec.Spec.ClusterID != cluster {
			return time.Time{}, false
		}
		return rec.CreationTimestamp.Time, true
	}
}

// waitImported waits until every real member holds a ServiceImport of
// every simulated Service, with a VIP and with every simulated member
// among its clusters.
func (s *Scale) waitImported(ctx context.Context) error {
	for _, cl := range s.Lab.Members() {
		c, err := s.Lab.Client(cl)
		if err != nil {
			return err
		}
		err = poll(ctx, s.Timeout, time.Second, fmt.Sprintf("%s: %d ServiceImports of %d clusters each in %s", cl, s.Services, s.Members, ScaleNamespace), func() (bool, error) {
			var list mcsv1beta1.ServiceImportList
			if err := c.List(ctx, &list, client.InNamespace(ScaleNamespace)); err != nil {
				return false, err
			}
			done := 0
			for _, si := range list.Items {
				if len(si.Spec.IPs) > 0 && len(si.Status.Clusters) == s.Members {
					done++
				}
			}
			if done < s.Services {
				return false, fmt.Errorf("%d of %d complete", done, s.Services)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// measureDaemons measures every Causeway daemon Pod of every member of
// the lab.
func measureDaemons(ctx context.Context, st *lab.State) ([]DaemonStats, error) {
	var out []DaemonStats
	for _, cl := range st.Members() {
		pods, err := daemonPods(ctx, st, cl)
		if err != nil {
			return nil, err
		}
		for _, p := range pods {
			d, err := measureDaemon(ctx, cl, p)
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b DaemonStats) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// daemonPods lists the running daemon Pods of a cluster; the chart runs
// each daemon as the one container of its Pod.
func daemonPods(ctx context.Context, st *lab.State, cluster string) ([]corev1.Pod, error) {
	if st.Runtime != "" && st.Runtime != lab.RuntimeLab {
		return nil, fmt.Errorf("the daemons' processes are read as the lab kubelet runs them, not of runtime %s", st.Runtime)
	}
	c, err := st.Client(cluster)
	if err != nil {
		return nil, err
	}
	var list corev1.PodList
	if err := c.List(ctx, &list, client.InNamespace(causewayNamespace)); err != nil {
		return nil, fmt.Errorf("%s: list the daemons' Pods: %w", cluster, err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no running Pod in %s (is Causeway installed?)", cluster, causewayNamespace)
	}
	return out, nil
}

// measureDaemon reads a daemon Pod's process: the lab kubelet's
// container ID is lab://<pid>; its metrics address is its
// --metrics-addr, in its own network namespace.
func measureDaemon(ctx context.Context, cluster string, p corev1.Pod) (DaemonStats, error) {
	d := DaemonStats{Cluster: cluster, Node: p.Spec.NodeName}
	if len(p.Spec.Containers) == 0 || len(p.Status.ContainerStatuses) == 0 {
		return d, fmt.Errorf("%s: pod %s has no container status", cluster, p.Name)
	}
	ct := p.Spec.Containers[0]
	d.Daemon = ct.Name
	d.Name = cluster + "/" + d.Node + "/" + d.Daemon
	pid, ok := kubelet.ContainerPID(p.Status.ContainerStatuses[0].ContainerID)
	if !ok {
		return d, fmt.Errorf("%s: container ID %q of pod %s is not the lab kubelet's", d.Name, p.Status.ContainerStatuses[0].ContainerID, p.Name)
	}
	d.PID = pid
	metrics, err := scrapeDaemon(ctx, pid, &p)
	if err != nil {
		return d, fmt.Errorf("%s: %w", d.Name, err)
	}
	rss, peak, err := procmem.RSS(pid)
	if err != nil {
		return d, fmt.Errorf("%s: %w", d.Name, err)
	}
	d.RSSBytes, d.PeakRSSBytes = int64(rss)*1024, int64(peak)*1024
	heap, ok := sum(metrics, "go_memstats_heap_alloc_bytes", nil)
	if !ok {
		return d, fmt.Errorf("%s: no go_memstats_heap_alloc_bytes in its metrics", d.Name)
	}
	d.HeapBytes = int64(heap)
	g, ok := sum(metrics, "go_goroutines", nil)
	if !ok {
		return d, fmt.Errorf("%s: no go_goroutines in its metrics", d.Name)
	}
	d.Goroutines = int(g)
	if d.TotalCPUSeconds, ok = sum(metrics, "process_cpu_seconds_total", nil); !ok {
		return d, fmt.Errorf("%s: no process_cpu_seconds_total in its metrics", d.Name)
	}
	return d, nil
}

// scrapeInNetns fetches Prometheus metrics from url, connecting from
// inside the network namespace at netnsPath (a daemon's /metrics listens
// on its own loopback or Pod address).
func scrapeInNetns(ctx context.Context, netnsPath, url string) (metricFamilies, error) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := netnsx.Do(netnsPath, func() error {
				var err error
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
		DisableKeepAlives: true,
	}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body, url)
}

// brokerMetrics are the broker's API server's and etcd's metrics.
type brokerMetrics struct{ apiserver, etcd metricFamilies }

func (s *Scale) brokerMetrics(ctx context.Context) (brokerMetrics, error) {
	cp, err := s.Lab.ControlPlane("broker")
	if err != nil {
		return brokerMetrics{}, err
	}
	rc, err := cp.RESTConfig()
	if err != nil {
		return brokerMetrics{}, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return brokerMetrics{}, err
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").Stream(ctx)
	if err != nil {
		return brokerMetrics{}, fmt.Errorf("broker API server's metrics: %w", err)
	}
	defer raw.Close()
	var m brokerMetrics
	if m.apiserver, err = parseMetrics(raw, "broker API server"); err != nil {
		return m, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.EtcdURL+"/metrics", nil)
	if err != nil {
		return m, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, fmt.Errorf("broker etcd's metrics: %w", err)
	}
	defer resp.Body.Close()
	m.etcd, err = parseMetrics(resp.Body, "broker etcd")
	return m, err
}

// brokerStats turns two samples of the broker's metrics, window apart,
// into BrokerStats, with the objects counted now.
func (s *Scale) brokerStats(ctx context.Context, before, after brokerMetrics, window time.Duration) (BrokerStats, error) {
	var b BrokerStats
	keys, ok := sum(after.etcd, "etcd_debugging_mvcc_keys_total", nil)
	if !ok {
		return b, errors.New("broker etcd reports no etcd_debugging_mvcc_keys_total")
	}
	size, ok := sum(after.etcd, "etcd_mvcc_db_total_size_in_bytes", nil)
	if !ok {
		return b, errors.New("broker etcd reports no etcd_mvcc_db_total_size_in_bytes")
	}
	b.Objects, b.DBBytes = int64(keys), int64(size)
	watch := func(l map[string]string) bool { return l["verb"] == "WATCH" }
	ours := func(l map[string]string) bool {
		return watch(l) && (l["group"] == causewayv1alpha1.GroupVersion.Group || l["group"] == coordinationv1.GroupName)
	}
	w, _ := sum(after.apiserver, "apiserver_longrunning_requests", watch)
	cw, _ := sum(after.apiserver, "apiserver_longrunning_requests", ours)
	b.Watches, b.CausewayWatches = int64(w), int64(cw)
	e0, _ := sum(before.apiserver, "apiserver_watch_events_total", nil)
	e1, _ := sum(after.apiserver, "apiserver_watch_events_total", nil)
	b.WatchEventsPerSecond = (e1 - e0) / window.Seconds()

	c, err := s.Lab.Client("broker")
	if err != nil {
		return b, err
	}
	count := func(gvk string, list *metav1.PartialObjectMetadataList) (int, error) {
		list.SetGroupVersionKind(causewayv1alpha1.GroupVersion.WithKind(gvk))
		if err := c.List(ctx, list); err != nil {
			return 0, fmt.Errorf("broker: list %s: %w", gvk, err)
		}
		return len(list.Items), nil
	}
	if b.Records, err = count("ServiceExportRecordList", &metav1.PartialObjectMetadataList{}); err != nil {
		return b, err
	}
	if b.VIPAllocations, err = count("VIPAllocationList", &metav1.PartialObjectMetadataList{}); err != nil {
		return b, err
	}
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases); err != nil {
		return b, fmt.Errorf("broker: list Leases: %w", err)
	}
	b.Leases = len(leases.Items)
	return b, nil
}

// resync restarts ResyncCluster's MCS controller and times its full
// resync.
func (s *Scale) resync(ctx context.Context) (ResyncResult, error) {
	r := ResyncResult{Cluster: s.ResyncCluster}
	c, err := s.Lab.Client(s.ResyncCluster)
	if err != nil {
		return r, err
	}
	find := func() (*corev1.Pod, error) { return readyMCSController(ctx, s.Lab, s.ResyncCluster) }
	old, err := find()
	if err != nil {
		return r, err
	}
	imports := func(p *corev1.Pod) (float64, int, error) { return daemonGauge(ctx, p, "causeway_mcs_imports") }
	if r.Imports, _, err = imports(old); err != nil {
		return r, err
	}
	deleted, err := sinceBoot()
	if err != nil {
		return r, err
	}
	if err := c.Delete(ctx, old); err != nil {
		return r, fmt.Errorf("%s: delete MCS controller Pod %s: %w", s.ResyncCluster, old.Name, err)
	}
	var pid int
	err = poll(ctx, s.Timeout, 20*time.Millisecond, fmt.Sprintf("%s: restarted MCS controller back at %v imports", s.ResyncCluster, r.Imports), func() (bool, error) {
		p, err := find()
		if err != nil || p.UID == old.UID {
			return false, err
		}
		v, id, err := imports(p)
		pid = id
		return err == nil && v >= r.Imports, err
	})
	if err != nil {
		return r, err
	}
	done, err := sinceBoot()
	if err != nil {
		return r, err
	}
	started, err := processStart(pid)
	if err != nil {
		return r, err
	}
	r.Seconds, r.FromDeleteSeconds = (done - started).Seconds(), (done - deleted).Seconds()
	return r, nil
}

// scrapeDaemon fetches a daemon Pod's metrics (see measureDaemon).
func scrapeDaemon(ctx context.Context, pid int, p *corev1.Pod) (metricFamilies, error) {
	var addr string
	for _, a := range p.Spec.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
			addr = v
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("pod %s: metrics address %q: %w", p.Name, addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return scrapeInNetns(ctx, fmt.Sprintf("/proc/%d/ns/net", pid), "http://"+net.JoinHostPort(host, port)+"/metrics")
}

// sinceBoot is CLOCK_BOOTTIME, the clock of a process's start time in
// /proc/<pid>/stat.
func sinceBoot() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, fmt.Errorf("read CLOCK_BOOTTIME: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// processStart is when process pid started, on CLOCK_BOOTTIME: field 22
// of /proc/<pid>/stat, in clock ticks (100 per second: Linux's USER_HZ).
func processStart(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command, which is in parentheses and may
	// hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat starttime: %w", pid, err)
	}
	return time.Duration(ticks) * time.Second / 100, nil
}

// Cleanup removes everything Scale added, from this run or an
// interrupted one: the VIP allocations of ScaleNamespace's Services, the
// simulated members' cluster role bindings and broker namespaces (their records, Leases, identities and
// quotas with them), and ScaleNamespace in every real member, and waits
// until they are gone.
func (s *Scale) Cleanup(ctx context.Context) error {
	bc, err := s.Lab.Client("broker")
	if err != nil {
		return err
	}
	var nss corev1.NamespaceList
	if err := bc.List(ctx, &nss); err != nil {
		return fmt.Errorf("broker: list namespaces: %w", err)
	}
	// Only simulated members export Services of ScaleNamespace: its VIP
	// allocations are theirs, whether their namespace is still there or
	// not.
	var errs []error
	if err := bc.DeleteAllOf(ctx, &causewayv1alpha1.VIPAllocation{}, client.MatchingLabels{mcs.LabelVIPServiceNamespace: ScaleNamespace}); err != nil {
		errs = append(errs, fmt.Errorf("broker: delete the VIP allocations of %s: %w", ScaleNamespace, err))
	}
	var mine []string
	for _, ns := range nss.Items {
		id, ok := broker.ClusterIDFromNamespace(ns.Name)
		if !ok || !strings.HasPrefix(id, SimulatedPrefix) {
			continue
		}
		mine = append(mine, ns.Name)
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: broker.ClusterRoleName + "-" + id}}
		if err := bc.Delete(ctx, crb); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("broker: delete %s: %w", crb.Name, err))
		}
		if err := bc.Delete(ctx, &ns); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("broker: delete namespace %s: %w", ns.Name, err))
		}
	}
	members := map[string]client.Client{}
	for _, cl := range s.Lab.Members() {
		c, err := s.Lab.Client(cl)
		if err != nil {
			return err
		}
		members[cl] = c
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ScaleNamespace}}
		if err := c.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("%s: delete namespace %s: %w", cl, ScaleNamespace, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(mine) > 0 {
		s.progress("removing %d simulated members from the broker", len(mine))
	}
	gone := func(c client.Client, where, name string) error {
		return poll(ctx, s.Timeout, 200*time.Millisecond, fmt.Sprintf("%s: namespace %s gone", where, name), func() (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
	}
	for _, ns := range mine {
		if err := gone(bc, "broker", ns); err != nil {
			return err
		}
	}
	for cl, c := range members {
		if err := gone(c, cl, ScaleNamespace); err != nil {
			return err
		}
	}
	return nil
}

// poll calls check every interval until it reports done, for at most
// timeout.
func poll(ctx context.Context, timeout, interval time.Duration, what string, check func() (bool, error)) error {
	p := Propagation{Timeout: timeout}
	return p.poll(ctx, interval, what, check)
}

// InParallel calls f(0) … f(n-1) from at most workers goroutines and
// returns when every call has.
func InParallel(workers, n int, f func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for i := range work {
				f(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// metricFamilies are Prometheus metrics by name.
type metricFamilies map[string]*dto.MetricFamily

func parseMetrics(r io.Reader, from string) (metricFamilies, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	m, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse the metrics of %s: %w", from, err)
	}
	return m, nil
}

// sum adds the values (gauges, counters, untyped) of metric name whose
// labels match (nil: all); ok is false when there is no such metric.
func sum(m metricFamilies, name string, match func(labels map[string]string) bool) (float64, bool) {
	f, ok := m[name]
	if !ok {
		return 0, false
	}
	var total float64
	for _, x := range f.Metric {
		labels := map[string]string{}
		for _, l := range x.Label {
			labels[l.GetName()] = l.GetValue()
		}
		if match != nil && !match(labels) {
			continue
		}
		switch {
		case x.Gauge != nil:
			total += x.Gauge.GetValue()
		case x.Counter != nil:
			total += x.Counter.GetValue()
		case x.Untyped != nil:
			total += x.Untyped.GetValue()
		}
	}
	return total, true
}
