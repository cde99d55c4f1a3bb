package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab/bench"
	"github.com/causeway-net/causeway/pkg/broker"
)

// checkScale runs `causeway-lab benchmark scale` at a small size (3
// simulated members × 5 Services, 3 export samples, 5 s steady): the JSON carries
// every real daemon with sane figures, the export and resync samples,
// the broker's counts (which include the simulated members' objects),
// and afterwards nothing of the simulated members is left in the broker
// or the real members. Figures are logged, not asserted against targets:
// the machine is shared.
func (l *Lab) checkScale(ctx context.Context) {
	l.t.Helper()
	const members, services, exports = 3, 5, 3
	var out json.RawMessage
	l.benchmark(&out, "scale", "--members", fmt.Sprint(members), "--services", fmt.Sprint(services),
		"--exports", fmt.Sprint(exports), "--steady", "5s", "--timeout", "5m")

	// The contract, by field name.
	var raw struct {
		Daemons []map[string]any `json:"daemons"`
		P50     *float64         `json:"exportReachableP50Ms"`
		P99     *float64         `json:"exportReachableP99Ms"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		l.t.Fatal(err)
	}
	if raw.P50 == nil || raw.P99 == nil || len(raw.Daemons) == 0 {
		l.t.Fatalf("want exportReachableP50Ms, exportReachableP99Ms and daemons in %s", out)
	}
	for _, d := range raw.Daemons {
		for _, f := range []string{"name", "rssBytes", "cpuSeconds"} {
			if _, ok := d[f]; !ok {
				l.t.Errorf("daemon %v has no %q", d, f)
			}
		}
	}

	var res bench.ScaleResult
	if err := json.Unmarshal(out, &res); err != nil {
		l.t.Fatal(err)
	}
	if res.Members != members || res.Services != services {
		l.t.Errorf("ran %d members × %d Services, want %d × %d", res.Members, res.Services, members, services)
	}
	if res.WriteSeconds <= 0 || res.ConvergeSeconds < res.WriteSeconds || res.SettledSeconds < res.ConvergeSeconds {
		l.t.Errorf("written in %vs, converged after %vs, queues empty after %vs: want 0 < written ≤ converged ≤ queues empty",
			res.WriteSeconds, res.ConvergeSeconds, res.SettledSeconds)
	}
	const mib = 1 << 20
	seen := map[string]bool{}
	for _, d := range res.Daemons {
		seen[d.Cluster+"/"+d.Daemon] = true
		switch {
		case d.Restarted:
			l.t.Errorf("%s restarted during the benchmark (now pid %d)", d.Name, d.PID)
		case d.PID <= 0, d.RSSBytes < 10*mib, d.RSSBytes > 1024*mib, d.PeakRSSBytes < d.RSSBytes:
			l.t.Errorf("%s: pid %d, RSS %d, peak %d: want a live process of 10 MiB to 1 GiB", d.Name, d.PID, d.RSSBytes, d.PeakRSSBytes)
		case d.HeapBytes <= 0:
			// Not bounded by RSS: an allocated buffer's untouched pages
			// are not resident (the embedded WireGuard's 64 KiB packet
			// buffers hold ~1500-byte packets; after TestLab's throughput
			// benchmark a gateway had 163 MB of heap in 102 MB of RSS).
			l.t.Errorf("%s: heap %d bytes: want > 0", d.Name, d.HeapBytes)
		case d.CPUSeconds < 0 || d.SteadyCPUSeconds < 0 || d.CPUSeconds+d.SteadyCPUSeconds > d.TotalCPUSeconds:
			l.t.Errorf("%s: %v CPU seconds in the benchmark, %v steady, %v in all: want 0 ≤ each, benchmark + steady ≤ all",
				d.Name, d.CPUSeconds, d.SteadyCPUSeconds, d.TotalCPUSeconds)
		}
	}
	if res.SteadySeconds < 5 {
		l.t.Errorf("steady window %vs, want ≥ 5 s", res.SteadySeconds)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		for _, daemon := range []string{"gateway", "route-agent", "mcs-controller", "globalnet"} {
			if !seen[c+"/"+daemon] {
				l.t.Errorf("no %s of %s among the measured daemons", daemon, c)
			}
		}
	}
	if e := res.Export; e == nil || e.Reachable.N != exports || *raw.P50 <= 0 || *raw.P99 < *raw.P50 || *raw.P50 != e.Reachable.P50MS {
		l.t.Errorf("export → reachable %+v, p50 %v, p99 %v: want %d samples, 0 < p50 ≤ p99", e, *raw.P50, *raw.P99, exports)
	}
	if r := res.Resync; r.Cluster != "c2" || r.Imports < services || r.Seconds <= 0 || r.Seconds > r.FromDeleteSeconds {
		l.t.Errorf("resync %+v: want c2's controller back at ≥ %d imports, 0 < seconds ≤ from deletion", r, services)
	}
	b := res.Broker
	switch {
	case b.Records < members*services, b.VIPAllocations < services, b.Leases < members+3:
		l.t.Errorf("broker %+v: want ≥ %d records, ≥ %d VIP allocations, ≥ %d Leases", b, members*services, services, members+3)
	case b.Objects <= int64(b.Records+b.VIPAllocations+b.Leases), b.DBBytes <= 0:
		l.t.Errorf("broker %+v: want more etcd keys than records, VIPs and Leases, and a database size", b)
	case b.CausewayWatches <= 0 || b.Watches < b.CausewayWatches, b.WatchEventsPerSecond <= 0:
		l.t.Errorf("broker %+v: want open watches of Causeway's resources and watch events", b)
	}

	// Nothing left behind.
	bc := l.Client("broker")
	var nss corev1.NamespaceList
	if err := bc.List(ctx, &nss); err != nil {
		l.t.Fatal(err)
	}
	for _, ns := range nss.Items {
		if strings.HasPrefix(ns.Name, broker.Namespace(bench.SimulatedPrefix)) {
			l.t.Errorf("broker: namespace %s left behind", ns.Name)
		}
	}
	var vips causewayv1alpha1.VIPAllocationList
	if err := bc.List(ctx, &vips); err != nil {
		l.t.Fatal(err)
	}
	for _, v := range vips.Items {
		if strings.HasPrefix(v.Labels[causewayv1alpha1.LabelClusterID], bench.SimulatedPrefix) || v.Spec.ServiceNamespace == bench.ScaleNamespace {
			l.t.Errorf("broker: VIP allocation %s (%s/%s) left behind", v.Name, v.Spec.ServiceNamespace, v.Spec.ServiceName)
		}
	}
	for i := range members {
		crb := &rbacv1.ClusterRoleBinding{}
		err := bc.Get(ctx, client.ObjectKey{Name: broker.ClusterRoleName + "-" + bench.SimulatedID(i)}, crb)
		if !apierrors.IsNotFound(err) {
			l.t.Errorf("broker: cluster role binding of %s left behind (error %v)", bench.SimulatedID(i), err)
		}
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		err := l.Client(c).Get(ctx, client.ObjectKey{Name: bench.ScaleNamespace}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			l.t.Errorf("%s: namespace %s left behind (error %v)", c, bench.ScaleNamespace, err)
		}
	}
}
