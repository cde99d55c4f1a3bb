package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/pkg/inspect"
)

// Soak runs a running lab through continuous churn while a client pod
// requests a whereami URL (answered by several clusters) every Interval,
// and compares the lab before and after. One round of churn, repeated
// until Duration has passed:
//
//   - export: Export.Samples Services exported from Export.Exporter, each
//     timed until reachable from Export.Client, then unexported and
//     awaited gone from every node's VIP map;
//   - scale: the whereami Deployment of Failover scaled to 2 and back;
//   - gateway failover: Failover's active gateway process killed
//     (SIGKILL), until another node is active and the killed one is back
//     as passive;
//   - restarts: Failover's kube-apiserver, Export.Exporter's MCS
//     controller and the route agent of the client's node killed
//     (SIGKILL) and awaited back — the dataplane must not notice.
//
// Each round ends with Failover's active gateway moved back to the node
// it started on. The gateway failovers and the scale-downs are the fault
// windows: a request may fail inside one (each window reports its
// failures), never outside. A warm-up round comes first; Settle after
// it and after the last round, every daemon's RSS and goroutines and
// every node's routes, nftables set and map elements, VIP map entries
// and conntrack entries are measured, and the second snapshot compared
// with the first. Requests, windows and export samples include the
// warm-up's; Rounds and Seconds do not.
type Soak struct {
	// Lab is the lab, up.
	Lab *lab.State
	// Self is the causeway-lab binary; its `app requests` runs in the
	// client pod.
	Self string
	// Export is the export/unexport churn (its Exporter and Client).
	Export *Propagation
	// Samples is the number of Services one export round creates.
	Samples int
	// URL is what the client (Export.Client) requests.
	URL string
	// Failover is the cluster whose gateways fail over, whose API
	// server is restarted and whose whereami is scaled.
	Failover string
	// Duration is how long rounds are started.
	Duration time.Duration
	// Interval is the time between two requests.
	Interval time.Duration
	// Settle is the wait between the last round and the last snapshot.
	Settle time.Duration
	// Timeout bounds each wait.
	Timeout time.Duration
	// Progress receives one line per step; nil discards.
	Progress io.Writer
}

// SoakResult is what a soak measured.
type SoakResult struct {
	Seconds  float64 `json:"seconds"`
	Rounds   int     `json:"rounds"`
	Requests int     `json:"requests"`
	Failed   int     `json:"failed"`
	// FailedOutside counts failed requests outside every fault window.
	FailedOutside int          `json:"failedOutsideWindows"`
	Windows       []SoakWindow `json:"windows"`
	// Export is the export → reachable figures of every round's samples.
	Export Stats        `json:"exportReachable"`
	Before SoakSnapshot `json:"before"`
	After  SoakSnapshot `json:"after"`
	// Growth names every figure beyond its tolerance (empty: none).
	Growth []string `json:"growth"`
}

// SoakWindow is one fault of the churn: from its start until it was
// over (the new active gateway, the pod gone), plus a second.
type SoakWindow struct {
	Fault string    `json:"fault"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Failed requests started in the window; FailedSeconds from the
	// first to the last of them, plus Interval.
	Failed        int     `json:"failed"`
	FailedSeconds float64 `json:"failedSeconds"`
}

// SoakSnapshot is the lab's state at one moment.
type SoakSnapshot struct {
	Daemons []DaemonStats `json:"daemons"`
	Nodes   []NodeCounts  `json:"nodes"`
}

// Daemon is the snapshot's daemon of that name.
func (s SoakSnapshot) Daemon(name string) (DaemonStats, bool) {
	i := slices.IndexFunc(s.Daemons, func(d DaemonStats) bool { return d.Name == name })
	if i < 0 {
		return DaemonStats{}, false
	}
	return s.Daemons[i], true
}

// Node is the snapshot's node of that name.
func (s SoakSnapshot) Node(name string) (NodeCounts, bool) {
	i := slices.IndexFunc(s.Nodes, func(n NodeCounts) bool { return n.Name == name })
	if i < 0 {
		return NodeCounts{}, false
	}
	return s.Nodes[i], true
}

// NodeCounts counts what a node holds in the kernel.
type NodeCounts struct {
	// Name is <cluster>/<node>.
	Name        string `json:"name"`
	Routes      int    `json:"routes"`      // every table, both families
	NftElements int    `json:"nftElements"` // in the causeway tables' sets and maps
	VIPServices int    `json:"vipServices"` // services in the VIP map
	VIPBackends int    `json:"vipBackends"` // their backends
	Conntrack   int    `json:"conntrack"`   // entries with more than soakConntrackLongLived to live
	// routes are the routes counted, one line each, to name those that
	// differ.
	routes []string
}

// Tolerances of the before/after comparison: a daemon's RSS and
// goroutines and a node's conntrack entries may grow by a fraction plus
// a constant (traffic, GC timing, TIME_WAIT entries of the requests);
// routes, nftables elements and VIP entries must be back exactly.
const (
	soakRSSGrowth       = 0.25
	soakRSSSlack        = 8 << 20
	soakGoroutineGrowth = 0.10
	soakGoroutineSlack  = 10
	soakConntrackGrowth = 0.5
	soakConntrackSlack  = 200
)

// soakConntrackLongLived is the remaining lifetime (seconds) above which
// a conntrack entry counts: established TCP connections (5 days), not
// the requests' closed ones (TIME_WAIT, 2 min) or UDP (at most 2 min),
// whose numbers follow the traffic rather than leaks.
const soakConntrackLongLived = 300

func (s *Soak) progress(format string, args ...any) {
	if s.Progress != nil {
		fmt.Fprintf(s.Progress, format+"\n", args...)
	}
}

// Run soaks the lab. The export churn's Services are removed by
// Export.Cleanup (the caller's, also after an error).
func (s *Soak) Run(ctx context.Context) (SoakResult, error) {
	var res SoakResult
	if err := s.waitDaemonsReady(ctx, s.Failover, "gateway"); err != nil {
		return res, err
	}
	pods, err := daemonPods(ctx, s.Lab, s.Failover)
	if err != nil {
		return res, err
	}
	if n := len(slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Spec.Containers[0].Name != "gateway" })); n < 2 {
		return res, fmt.Errorf("%s has %d gateway candidate(s); a failover needs 2 (lab up --gateways 2)", s.Failover, n)
	}
	startNode, err := s.activeGateway(ctx, "")
	if err != nil {
		return res, err
	}
	reqs, err := s.startRequests(ctx)
	if err != nil {
		return res, err
	}
	defer reqs.stop()

	// A warm-up round, so that the first snapshot sees every daemon
	// after its first churn (caches, pools, a gateway's tunnel device)
	// and the requests' conntrack entries: what the soak compares is the
	// growth over the rounds, not the cost of the first one.
	var exports []time.Duration
	s.progress("warm-up round")
	if err := s.round(ctx, &res, &exports, startNode); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	if err := s.sleep(ctx, s.Settle); err != nil {
		return res, err
	}
	if res.Before, err = s.snapshot(ctx); err != nil {
		return res, err
	}
	start := time.Now()
	for res.Rounds == 0 || time.Since(start) < s.Duration {
		res.Rounds++
		s.progress("round %d (%s of %s)", res.Rounds, time.Since(start).Round(time.Second), s.Duration)
		if err := s.round(ctx, &res, &exports, startNode); err != nil {
			return res, fmt.Errorf("round %d: %w", res.Rounds, err)
		}
	}
	if err := s.sleep(ctx, s.Settle); err != nil {
		return res, err
	}
	results, err := reqs.stop()
	if err != nil {
		return res, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Export = NewStats(exports)
	s.count(&res, results)
	if res.After, err = s.snapshot(ctx); err != nil {
		return res, err
	}
	res.Growth = compareSnapshots(res.Before, res.After)
	return res, nil
}

// round is one round of churn: export and unexport, scale, gateway
// failover, restarts; then Failover's active gateway is moved back to
// home, so that every node's state compares with its own. Its windows
// go to res, its export → reachable samples to exports.
func (s *Soak) round(ctx context.Context, res *SoakResult, exports *[]time.Duration, home string) error {
	e, err := s.Export.MeasureExport(ctx, s.Samples)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	*exports = append(*exports, e.reachable...)
	if err := s.Export.Cleanup(ctx); err != nil {
		return fmt.Errorf("unexport: %w", err)
	}
	w, err := s.scale(ctx)
	if err != nil {
		return fmt.Errorf("scale: %w", err)
	}
	res.Windows = append(res.Windows, w)
	if w, err = s.failover(ctx); err != nil {
		return fmt.Errorf("gateway failover: %w", err)
	}
	res.Windows = append(res.Windows, w)
	if err := s.restarts(ctx); err != nil {
		return fmt.Errorf("restarts: %w", err)
	}
	for i := 0; ; i++ {
		now, err := s.activeGateway(ctx, "")
		if err != nil {
			return err
		}
		if now == home {
			return nil
		}
		if i == 3 {
			return fmt.Errorf("%s's active gateway stays on %s, want %s (where the soak started)", s.Failover, now, home)
		}
		w, err := s.failover(ctx)
		if err != nil {
			return fmt.Errorf("gateway failover back to %s: %w", home, err)
		}
		res.Windows = append(res.Windows, w)
	}
}

// sleep waits d or until ctx ends.
func (s *Soak) sleep(ctx context.Context, d time.Duration) error {
	s.progress("settling for %s", d)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// count attributes every request to the windows.
func (s *Soak) count(res *SoakResult, results []apps.Request) {
	res.Requests = len(results)
	first := make([]time.Time, len(res.Windows))
	last := make([]time.Time, len(res.Windows))
	for _, r := range results {
		if r.Err == "" {
			continue
		}
		res.Failed++
		in := slices.IndexFunc(res.Windows, func(w SoakWindow) bool { return !r.At.Before(w.Start) && !r.At.After(w.End) })
		if in < 0 {
			res.FailedOutside++
			s.progress("request at %s failed outside every fault window: %s", r.At.Format(time.RFC3339Nano), r.Err)
			continue
		}
		w := &res.Windows[in]
		w.Failed++
		if first[in].IsZero() {
			first[in] = r.At
		}
		last[in] = r.At
	}
	for i := range res.Windows {
		if res.Windows[i].Failed > 0 {
			res.Windows[i].FailedSeconds = (last[i].Sub(first[i]) + s.Interval).Seconds()
		}
	}
}

// compareSnapshots names every figure of after beyond its tolerance of
// before.
func compareSnapshots(before, after SoakSnapshot) []string {
	var growth []string
	for _, a := range after.Daemons {
		b, ok := before.Daemon(a.Name)
		if !ok {
			growth = append(growth, a.Name+": not running at the start")
			continue
		}
		if limit := int64(float64(b.RSSBytes)*(1+soakRSSGrowth)) + soakRSSSlack; a.RSSBytes > limit {
			growth = append(growth, fmt.Sprintf("%s: RSS %.1f MiB, was %.1f MiB (limit %.1f)", a.Name, mib(a.RSSBytes), mib(b.RSSBytes), mib(limit)))
		}
		if limit := int(float64(b.Goroutines)*(1+soakGoroutineGrowth)) + soakGoroutineSlack; a.Goroutines > limit {
			growth = append(growth, fmt.Sprintf("%s: %d goroutines, was %d (limit %d)", a.Name, a.Goroutines, b.Goroutines, limit))
		}
	}
	for _, a := range after.Nodes {
		b, _ := before.Node(a.Name)
		for _, f := range []struct {
			what          string
			before, after int
		}{{"routes", b.Routes, a.Routes}, {"nftables elements", b.NftElements, a.NftElements},
			{"VIP services", b.VIPServices, a.VIPServices}, {"VIP backends", b.VIPBackends, a.VIPBackends}} {
			if f.after != f.before {
				growth = append(growth, fmt.Sprintf("%s: %d %s, was %d", a.Name, f.after, f.what, f.before))
			}
		}
		if gone, added := diffLines(b.routes, a.routes); len(gone)+len(added) > 0 {
			growth = append(growth, fmt.Sprintf("%s: routes gone %v, added %v", a.Name, gone, added))
		}
		if limit := int(float64(b.Conntrack)*(1+soakConntrackGrowth)) + soakConntrackSlack; a.Conntrack > limit {
			growth = append(growth, fmt.Sprintf("%s: %d conntrack entries, was %d (limit %d)", a.Name, a.Conntrack, b.Conntrack, limit))
		}
	}
	return growth
}

// diffLines returns the lines of before missing from after and those
// of after missing from before (as multisets).
func diffLines(before, after []string) (gone, added []string) {
	n := map[string]int{}
	for _, l := range before {
		n[l]++
	}
	for _, l := range after {
		n[l]--
	}
	for l, c := range n {
		for ; c > 0; c-- {
			gone = append(gone, l)
		}
		for ; c < 0; c++ {
			added = append(added, l)
		}
	}
	slices.Sort(gone)
	slices.Sort(added)
	return gone, added
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// snapshot measures every daemon and node of the lab.
func (s *Soak) snapshot(ctx context.Context) (SoakSnapshot, error) {
	var snap SoakSnapshot
	var err error
	if snap.Daemons, err = measureDaemons(ctx, s.Lab); err != nil {
		return snap, err
	}
	h, err := s.Lab.Host()
	if err != nil {
		return snap, err
	}
	for _, c := range s.Lab.Topology.Clusters {
		for _, n := range c.Nodes {
			nc, err := countNode(h.NodeNetns(c.Name, n.Name), s.Lab.VIPPinDir(c.Name, n.Name))
			if err != nil {
				return snap, fmt.Errorf("%s/%s: %w", c.Name, n.Name, err)
			}
			nc.Name = c.Name + "/" + n.Name
			snap.Nodes = append(snap.Nodes, nc)
		}
	}
	return snap, nil
}

// countNode counts a node's kernel state: its routes and VIP map entries
// from its node view (what `causewayctl diagnose` reads), its conntrack
// entries and its causeway nftables elements, which the view does not
// count — all from inside its network namespace.
func countNode(netnsPath, vipPinDir string) (NodeCounts, error) {
	var nc NodeCounts
	err := netnsx.Do(netnsPath, func() error {
		view := inspect.Read(vipPinDir)
		if len(view.Errors) > 0 {
			return fmt.Errorf("node view: %s", strings.Join(view.Errors, "; "))
		}
		nc.Routes, nc.VIPServices = len(view.Routes), len(view.VIPs)
		for _, r := range view.Routes {
			if p, err := netip.ParsePrefix(r.Dst); err == nil && p.Addr().IsLinkLocalUnicast() && p.IsSingleIP() {
				// A re-created device's link-local address is new
				// each time: its route compares by device.
				r.Dst = "link-local"
			}
			nc.routes = append(nc.routes, fmt.Sprintf("%+v", r))
		}
		for _, v := range view.VIPs {
			nc.VIPBackends += len(v.Backends)
		}
		for _, family := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
			flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, family)
			if err != nil {
				return fmt.Errorf("conntrack table: %w", err)
			}
			for _, f := range flows {
				if f.TimeOut > soakConntrackLongLived {
					nc.Conntrack++
				}
			}
		}
		out, err := exec.Command("nft", "-j", "list", "ruleset").Output()
		if err != nil {
			return fmt.Errorf("nft list ruleset: %w", err)
		}
		nc.NftElements, err = nftElements(out)
		return err
	})
	return nc, err
}

// nftElements counts the elements of the sets and maps of the causeway
// tables in `nft -j list ruleset` output.
func nftElements(out []byte) (int, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return 0, fmt.Errorf("nft -j: %w", err)
	}
	n := 0
	for _, obj := range doc.Nftables {
		for _, kind := range []string{"set", "map"} {
			raw, ok := obj[kind]
			if !ok {
				continue
			}
			var set struct {
				Table string            `json:"table"`
				Elem  []json.RawMessage `json:"elem"`
			}
			if err := json.Unmarshal(raw, &set); err != nil {
				return 0, fmt.Errorf("nft -j %s: %w", kind, err)
			}
			if strings.HasPrefix(set.Table, "causeway") {
				n += len(set.Elem)
			}
		}
	}
	return n, nil
}

// activeGateway waits until exactly one Gateway of Failover is active,
// on a node other than not, and returns that node. not's own Gateway is
// left out: a killed gateway cannot write its status, which says active
// until its process is back (after the kubelet's crash backoff, longer
// each round).
func (s *Soak) activeGateway(ctx context.Context, not string) (string, error) {
	c, err := s.Lab.Client(s.Failover)
	if err != nil {
		return "", err
	}
	what := s.Failover + ": one active gateway"
	if not != "" {
		what += ", not " + not
	}
	var node string
	err = poll(ctx, s.Timeout, 100*time.Millisecond, what, func() (bool, error) {
		active, err := activeGateways(ctx, c, not)
		if err != nil {
			return false, err
		}
		if len(active) != 1 {
			return false, fmt.Errorf("active: %v", active)
		}
		node = active[0]
		return true, nil
	})
	return node, err
}

// activeGateways are the nodes whose Gateway in c says active, but not.
func activeGateways(ctx context.Context, c client.Client, not string) ([]string, error) {
	var gws v1alpha1.GatewayList
	if err := c.List(ctx, &gws, client.InNamespace(causewayNamespace)); err != nil {
		return nil, err
	}
	var active []string
	for _, g := range gws.Items {
		if g.Status.HAStatus == v1alpha1.HAStatusActive && g.Name != not {
			active = append(active, g.Name)
		}
	}
	return active, nil
}

// failover kills Failover's active gateway process and waits until
// another node is active and every gateway Pod is ready again (the
// killed one restarted as passive).
func (s *Soak) failover(ctx context.Context) (SoakWindow, error) {
	old, err := s.activeGateway(ctx, "")
	if err != nil {
		return SoakWindow{}, err
	}
	if err := s.waitDaemonsReady(ctx, s.Failover, "gateway"); err != nil {
		return SoakWindow{}, err
	}
	pid, err := s.daemonPID(ctx, s.Failover, old, "gateway")
	if err != nil {
		return SoakWindow{}, err
	}
	w := SoakWindow{Fault: fmt.Sprintf("gateway failover %s/%s", s.Failover, old), Start: time.Now()}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return w, fmt.Errorf("kill the gateway of %s/%s (pid %d): %w", s.Failover, old, pid, err)
	}
	now, err := s.activeGateway(ctx, old)
	if err != nil {
		return w, err
	}
	w.End = time.Now().Add(time.Second)
	s.progress("%s: active gateway %s killed, %s active after %s", s.Failover, old, now, time.Since(w.Start).Round(time.Millisecond))
	return w, s.waitDaemonsReady(ctx, s.Failover, "gateway")
}

// scale scales Failover's whereami to 2 replicas and back to 1; the
// window is the scale-down's, until the removed pod is gone.
func (s *Soak) scale(ctx context.Context) (SoakWindow, error) {
	c, err := s.Lab.Client(s.Failover)
	if err != nil {
		return SoakWindow{}, err
	}
	key := client.ObjectKey{Namespace: s.Export.Namespace, Name: "whereami"}
	set := func(n int32) error {
		// A patch of the replicas alone: an update of the object read
		// before conflicts with the controllers' writes (its status).
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n)
		if err := c.Patch(ctx, d, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return fmt.Errorf("scale %s/%s to %d: %w", key.Namespace, key.Name, n, err)
		}
		return poll(ctx, s.Timeout, 200*time.Millisecond, fmt.Sprintf("%s: %d whereami pods ready, none else", s.Failover, n), func() (bool, error) {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabels(s.Export.Selector)); err != nil {
				return false, err
			}
			ready := 0
			for _, p := range pods.Items {
				for _, cond := range p.Status.Conditions {
					if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
			return len(pods.Items) == int(n) && ready == int(n), nil
		})
	}
	if err := set(2); err != nil {
		return SoakWindow{}, err
	}
	w := SoakWindow{Fault: s.Failover + " whereami scaled down", Start: time.Now()}
	err = set(1)
	w.End = time.Now().Add(time.Second)
	s.progress("%s: whereami scaled to 2 and back to 1", s.Failover)
	return w, err
}

// restarts kills Failover's kube-apiserver, the export cluster's MCS
// controller and the client node's route agent, and waits until each is
// back.
func (s *Soak) restarts(ctx context.Context) error {
	unit := s.Failover + "/kube-apiserver"
	if err := s.killUnit(ctx, unit); err != nil {
		return err
	}
	if err := s.killDaemon(ctx, s.Export.Exporter, "", "mcs-controller"); err != nil {
		return err
	}
	cluster, namespace, pod, err := s.Export.clientRef()
	if err != nil {
		return err
	}
	c, err := s.Lab.Client(cluster)
	if err != nil {
		return err
	}
	p := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, p); err != nil {
		return err
	}
	if err := s.killDaemon(ctx, cluster, p.Spec.NodeName, "route-agent"); err != nil {
		return err
	}
	s.progress("restarted %s, the MCS controller of %s, the route agent of %s/%s", unit, s.Export.Exporter, cluster, p.Spec.NodeName)
	return nil
}

// killUnit SIGKILLs a supervisor unit and waits until it runs again and
// its cluster's API server answers.
func (s *Soak) killUnit(ctx context.Context, unit string) error {
	pid := 0
	units, err := s.Lab.Status()
	if err != nil {
		return err
	}
	for _, u := range units {
		if u.Name == unit && u.Running {
			pid = u.PID
		}
	}
	if pid == 0 {
		return fmt.Errorf("unit %s not running", unit)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s (pid %d): %w", unit, pid, err)
	}
	cluster, _, _ := strings.Cut(unit, "/")
	c, err := s.Lab.Client(cluster)
	if err != nil {
		return err
	}
	return poll(ctx, s.Timeout, 200*time.Millisecond, unit+" back and answering", func() (bool, error) {
		units, err := s.Lab.Status()
		if err != nil {
			return false, err
		}
		for _, u := range units {
			if u.Name == unit && (!u.Running || u.PID == pid) {
				return false, fmt.Errorf("not restarted yet")
			}
		}
		var nodes corev1.NodeList
		return true, c.List(ctx, &nodes)
	})
}

// killDaemon SIGKILLs a Causeway daemon (on node; "" for the one of a
// Deployment) and waits until its Pods are ready again.
func (s *Soak) killDaemon(ctx context.Context, cluster, node, daemon string) error {
	if err := s.waitDaemonsReady(ctx, cluster, daemon); err != nil {
		return err
	}
	pid, err := s.daemonPID(ctx, cluster, node, daemon)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s of %s (pid %d): %w", daemon, cluster, pid, err)
	}
	return poll(ctx, s.Timeout, 200*time.Millisecond, fmt.Sprintf("%s: %s restarted", cluster, daemon), func() (bool, error) {
		now, err := s.daemonPID(ctx, cluster, node, daemon)
		if err != nil || now == pid {
			return false, err
		}
		return true, s.waitDaemonsReady(ctx, cluster, daemon)
	})
}

// daemonPID is the process of a daemon's ready Pod on node (any node
// when node is "").
func (s *Soak) daemonPID(ctx context.Context, cluster, node, daemon string) (int, error) {
	pods, err := daemonPods(ctx, s.Lab, cluster)
	if err != nil {
		return 0, err
	}
	for _, p := range pods {
		if p.Spec.Containers[0].Name != daemon || (node != "" && p.Spec.NodeName != node) || len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		cs := p.Status.ContainerStatuses[0]
		pid, ok := kubelet.ContainerPID(cs.ContainerID)
		if !cs.Ready || !ok || syscall.Kill(pid, 0) != nil {
			return 0, fmt.Errorf("%s: %s on %s not ready", cluster, daemon, p.Spec.NodeName)
		}
		return pid, nil
	}
	return 0, fmt.Errorf("%s: no %s Pod on node %q", cluster, daemon, node)
}

// waitDaemonsReady waits until every Pod of daemon in cluster is ready.
func (s *Soak) waitDaemonsReady(ctx context.Context, cluster, daemon string) error {
	return poll(ctx, s.Timeout, 200*time.Millisecond, fmt.Sprintf("%s: every %s Pod ready", cluster, daemon), func() (bool, error) {
		pods, err := daemonPods(ctx, s.Lab, cluster)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if p.Spec.Containers[0].Name != daemon {
				continue
			}
			if len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
				return false, fmt.Errorf("%s not ready", p.Name)
			}
		}
		return true, nil
	})
}

// requests is the client's request loop (`causeway-lab app requests`
// in the client pod).
type requests struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	got  []apps.Request
	done chan error
}

// startRequests starts the client's request loop.
func (s *Soak) startRequests(ctx context.Context) (*requests, error) {
	cluster, namespace, pod, err := s.Export.clientRef()
	if err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	cmd, err := s.Lab.Exec(ctx, cluster, namespace, pod, s.Self,
		[]string{"app", "requests", "--url", s.URL, "--interval", s.Interval.String(), "--timeout", "2s", "--duration", "0"}, nil, w, os.Stderr)
	if err != nil {
		return nil, err
	}
	rq := &requests{cmd: cmd, done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			req, ok := apps.ParseRequest(sc.Text())
			if !ok {
				continue
			}
			rq.mu.Lock()
			rq.got = append(rq.got, req)
			rq.mu.Unlock()
		}
		rq.done <- sc.Err()
	}()
	go func() {
		err := cmd.Wait()
		_ = w.CloseWithError(err)
	}()
	return rq, nil
}

// stop ends the request loop (SIGTERM: the running requests end and are
// written) and returns every request in start order.
func (rq *requests) stop() ([]apps.Request, error) {
	_ = rq.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-rq.done:
	case <-time.After(10 * time.Second):
		_ = rq.cmd.Process.Kill()
		err = errors.New("the request loop did not stop in 10 s")
	}
	rq.mu.Lock()
	defer rq.mu.Unlock()
	got := slices.Clone(rq.got)
	slices.SortFunc(got, func(a, b apps.Request) int { return a.At.Compare(b.At) })
	return got, err
}

// ExportWhereami makes the demo's whereami a Service of the ClusterSet
// backed by clusters: it exports it from those not exporting it yet and
// waits until the client's cluster imports it from every one of them.
// It returns the URL of its clusterset VIP and the function that
// unexports it where ExportWhereami exported it.
func ExportWhereami(ctx context.Context, st *lab.State, clientRef string, clusters []string, timeout time.Duration) (string, func(context.Context) error, error) {
	var created []string
	unexport := func(ctx context.Context) error {
		var errs []error
		for _, cl := range created {
			c, err := st.Client(cl)
			if err == nil {
				err = client.IgnoreNotFound(c.Delete(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: lab.DemoNamespace, Name: "whereami"}}))
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	for _, cl := range clusters {
		c, err := st.Client(cl)
		if err != nil {
			return "", unexport, err
		}
		err = c.Create(ctx, &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: lab.DemoNamespace, Name: "whereami"}})
		switch {
		case err == nil:
			created = append(created, cl)
		case !apierrors.IsAlreadyExists(err):
			return "", unexport, fmt.Errorf("%s: export demo/whereami: %w", cl, err)
		}
	}
	cluster, _, _ := strings.Cut(clientRef, "/")
	c, err := st.Client(cluster)
	if err != nil {
		return "", unexport, err
	}
	var url string
	err = poll(ctx, timeout, 200*time.Millisecond, fmt.Sprintf("%s: demo/whereami imported from %v", cluster, clusters), func() (bool, error) {
		si := &mcsv1beta1.ServiceImport{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: lab.DemoNamespace, Name: "whereami"}, si); err != nil {
			return false, err
		}
		if len(si.Spec.IPs) == 0 {
			return false, errors.New("no VIP yet")
		}
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.InNamespace(lab.DemoNamespace), client.MatchingLabels{mcsv1beta1.LabelServiceName: "whereami"}); err != nil {
			return false, err
		}
		ready := map[string]bool{}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					ready[s.Labels[mcsv1beta1.LabelSourceCluster]] = true
				}
			}
		}
		for _, cl := range clusters {
			if !ready[cl] {
				return false, fmt.Errorf("no ready endpoint from %s", cl)
			}
		}
		url = "http://" + si.Spec.IPs[0]
		return true, nil
	})
	return url, unexport, err
}
