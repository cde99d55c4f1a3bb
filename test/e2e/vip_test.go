package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/ctl"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestVIPWeightsAffinityConflicts checks issue 11's lab promises for the
// VIP datapath on the default (globalnet) lab: with whereami at 1 replica
// in c1 and 3 in c2, 200 requests to the VIP from c3 split within 10
// points of 25 %/75 %; curl to http://[::ffff:<vip>] (a dual-stack
// AF_INET6 socket) is answered by both clusters; `show vips --node` lists the VIP with both backends
// and their weights, and `show vips` every node, in sync; bad records
// that c2 writes by hand are refused and change nothing in c1's and c3's
// kernels (checkBadRecords); with
// sessionAffinity ClientIP on the exports 50 requests from c3's client pod
// land on one cluster; a port number c2 exports in conflict with c1's
// never receives the VIP's traffic for that port.
func TestVIPWeightsAffinityConflicts(t *testing.T) {
	l := StartLab(t)
	ctx := context.Background()

	for cluster, n := range map[string]int32{"c1": 1, "c2": 3} {
		l.scale(ctx, cluster, client.ObjectKey{Namespace: "demo", Name: "whereami"}, n)
	}
	for _, c := range []string{"c1", "c2"} {
		if out, err := l.causewayctl("export", "demo/whereami", "--cluster", c); err != nil {
			t.Fatalf("export from %s: %v\n%s", c, err, out)
		}
	}
	vip := l.importVIP(ctx, "c3", "whereami")
	waitFor(t, "c3's slices of whereami weighted c1=1, c2=3", func() error {
		got, err := readyEndpoints(ctx, l.Client("c3"), "whereami")
		if err != nil || got["c1"] != "1" || got["c2"] != "3" {
			return fmt.Errorf("%s annotations by source cluster %v (%v)", mcs.AnnotationReadyEndpoints, got, err)
		}
		return nil
	})
	node := l.podNode(ctx, "c3", "client")
	waitFor(t, "show vips --node c3/"+node+" with whereami's two backends weighted 1 and 3, in sync", func() error {
		rows, err := l.showVIPs("--node", "c3/"+node)
		if err != nil {
			return err
		}
		r, ok := vipRow(rows, vip+":80/TCP")
		if !ok {
			return fmt.Errorf("no row for %s:80/TCP in %+v", vip, rows)
		}
		if r.Service != "demo/whereami" || len(r.Diff) != 0 || r.Programmed == nil || len(r.Programmed.Backends) != 2 {
			return fmt.Errorf("row %+v", r)
		}
		weights := map[uint32]bool{}
		for _, b := range r.Programmed.Backends {
			weights[b.Weight] = true
		}
		if !weights[1] || !weights[3] {
			return fmt.Errorf("backends %+v, want weights 1 and 3", r.Programmed.Backends)
		}
		return nil
	})
	out, err := l.causewayctl("show", "vips", "--node", "c3/"+node)
	t.Logf("show vips --node c3/%s (%v):\n%s", node, err, out)

	// 200 requests: c1 (1 ready pod of 4) within 10 points of 25 %.
	url := "http://" + vip
	seen, failed := map[string]int{}, 0
	for range 200 {
		id, err := l.whereami("c3/demo/client", url)
		if err != nil {
			failed++
			continue
		}
		seen[id.Cluster]++
	}
	answered := seen["c1"] + seen["c2"]
	share := float64(seen["c1"]) / float64(answered)
	t.Logf("200 requests to %s from c3: by cluster %v, %d failed; c1 %.1f %%, c2 %.1f %%", url, seen, failed, 100*share, 100*(1-share))
	if failed > 4 || answered+failed != 200 {
		t.Errorf("200 requests: %d failed, answers %v", failed, seen)
	}
	if math.Abs(share-0.25) > 0.10 {
		t.Errorf("c1 answered %.1f %% of the requests, want 25 ± 10 %%", 100*share)
	}

	l.checkDualStackSocket(vip)

	// Every node of every cluster, in sync with its API.
	waitFor(t, "show vips listing every node in sync", func() error {
		rows, err := l.showVIPs()
		if err != nil {
			return err
		}
		nodes := map[string]bool{}
		for _, r := range rows {
			if r.Error != "" || len(r.Diff) > 0 {
				return fmt.Errorf("%s %s: %s %v", r.Node, r.VIP, r.Error, r.Diff)
			}
			if r.Service == "demo/whereami" {
				nodes[r.Node] = true
			}
		}
		for _, want := range []string{"c1/n0", "c1/n1", "c2/n0", "c2/n1", "c3/n0", "c3/n1"} {
			if !nodes[want] {
				return fmt.Errorf("no whereami row of node %s (nodes %v)", want, nodes)
			}
		}
		return nil
	})

	l.checkBadRecords(ctx, vip)
	l.checkAffinity(ctx, vip)
	l.checkPortNumberConflict(ctx)
}

// checkDualStackSocket: from c3's client pod (an IPv4-only network
// namespace), curl to http://[::ffff:<vip>] uses an AF_INET6 socket whose
// connect() to the IPv4-mapped VIP goes through the IPv4 stack; the
// connect6 hook translates it like an IPv4 connect. 40 requests are
// answered, by both clusters (the weights hold: P(no c1) = 0.75^40).
func (l *Lab) checkDualStackSocket(vip string) {
	l.t.Helper()
	url := "http://[::ffff:" + vip + "]"
	seen, failed := map[string]int{}, 0
	var errs []string
	for range 40 {
		id, err := l.whereami("c3/demo/client", url)
		if err != nil {
			failed++
			errs = append(errs, err.Error())
			continue
		}
		seen[id.Cluster]++
	}
	l.t.Logf("40 requests to %s (AF_INET6 socket, IPv4-mapped VIP) from c3: by cluster %v, %d failed", url, seen, failed)
	if failed > 1 || seen["c1"] == 0 || seen["c2"] == 0 {
		l.t.Errorf("%s from c3: answers by cluster %v, %d failed (%v), want both clusters", url, seen, failed, errs)
	}
}

// checkAffinity sets sessionAffinity ClientIP on whereami in c1 and c2 and
// checks 50 requests from c3's client pod land on one cluster.
func (l *Lab) checkAffinity(ctx context.Context, vip string) {
	l.t.Helper()
	for _, cluster := range []string{"c1", "c2"} {
		svc := &corev1.Service{}
		key := client.ObjectKey{Namespace: "demo", Name: "whereami"}
		if err := l.Client(cluster).Get(ctx, key, svc); err != nil {
			l.t.Fatal(err)
		}
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		if err := l.Client(cluster).Update(ctx, svc); err != nil {
			l.t.Fatalf("%s: set sessionAffinity: %v", cluster, err)
		}
	}
	node := l.podNode(ctx, "c3", "client")
	waitFor(l.t, "ClientIP affinity (10800 s) in c3/"+node+"'s maps, no conflict", func() error {
		rows, err := l.showVIPs("--node", "c3/"+node)
		if err != nil {
			return err
		}
		r, ok := vipRow(rows, vip+":80/TCP")
		if !ok || r.Programmed == nil || r.Programmed.AffinitySeconds != 10800 || len(r.Diff) != 0 {
			return fmt.Errorf("row %+v", r)
		}
		for _, cluster := range []string{"c1", "c2"} {
			if c := l.exportCondition(ctx, cluster, "whereami", mcsv1beta1.ServiceExportConditionConflict); c == nil || c.Status != metav1.ConditionFalse {
				return fmt.Errorf("%s: Conflict %+v", cluster, c)
			}
		}
		return nil
	})
	seen, failed := map[string]int{}, 0
	for range 50 {
		id, err := l.whereami("c3/demo/client", "http://"+vip)
		if err != nil {
			failed++
			continue
		}
		seen[id.Cluster]++
	}
	l.t.Logf("50 requests from c3/demo/client with ClientIP affinity: by cluster %v, %d failed", seen, failed)
	if len(seen) != 1 || failed > 1 {
		l.t.Errorf("50 requests with ClientIP affinity: answers by cluster %v (%d failed), want one cluster", seen, failed)
	}
}

// checkPortNumberConflict exports demo/portclash from c1 (http TCP/80) and
// then from c2 (http TCP/81): the import keeps c1's definition, both
// exports get PortConflict, and 40 requests to the VIP's port 80 from c3
// are all answered by c1 — c2 gets no traffic for the port it lost, and
// port 81 is not served at all.
func (l *Lab) checkPortNumberConflict(ctx context.Context) {
	l.t.Helper()
	for _, tc := range []struct {
		cluster string
		port    int32
	}{{"c1", 80}, {"c2", 81}} {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "portclash"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "whereami"},
				Ports: []corev1.ServicePort{{Name: "http", Port: tc.port, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
		}
		if err := l.Client(tc.cluster).Create(ctx, svc); err != nil {
			l.t.Fatalf("%s: %v", tc.cluster, err)
		}
		if out, err := l.causewayctl("export", "demo/portclash", "--cluster", tc.cluster); err != nil {
			l.t.Fatalf("export portclash from %s: %v\n%s", tc.cluster, err, out)
		}
		if tc.cluster == "c1" {
			l.importVIP(ctx, "c3", "portclash") // c1's export is the older one
		}
	}
	waitFor(l.t, "Conflict=True PortConflict on both exports of demo/portclash", func() error {
		for _, cluster := range []string{"c1", "c2"} {
			c := l.exportCondition(ctx, cluster, "portclash", mcsv1beta1.ServiceExportConditionConflict)
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Reason, string(mcsv1beta1.ServiceExportReasonPortConflict)) {
				return fmt.Errorf("%s: Conflict condition %+v", cluster, c)
			}
		}
		return nil
	})
	vip := l.importVIP(ctx, "c3", "portclash")
	node := l.podNode(ctx, "c3", "client")
	waitFor(l.t, "c3's import of portclash: http TCP/80 only, one backend (c1's) in c3/"+node+"'s maps", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "portclash"}, si); err != nil {
			return err
		}
		if len(si.Spec.Ports) != 1 || si.Spec.Ports[0].Port != 80 {
			return fmt.Errorf("import ports %+v", si.Spec.Ports)
		}
		rows, err := l.showVIPs("--node", "c3/"+node)
		if err != nil {
			return err
		}
		r, ok := vipRow(rows, vip+":80/TCP")
		if !ok || r.Programmed == nil || len(r.Programmed.Backends) != 1 || len(r.Diff) != 0 {
			return fmt.Errorf("row %+v", r)
		}
		if _, ok := vipRow(rows, vip+":81/TCP"); ok {
			return fmt.Errorf("c2's losing port 81 is programmed: %+v", rows)
		}
		return nil
	})
	seen, failed := map[string]int{}, 0
	for range 40 {
		id, err := l.whereami("c3/demo/client", "http://"+vip+":80")
		if err != nil {
			failed++
			continue
		}
		seen[id.Cluster]++
	}
	l.t.Logf("40 requests to portclash %s:80 from c3: by cluster %v, %d failed", vip, seen, failed)
	if seen["c2"] > 0 || seen["c1"] == 0 || failed > 1 {
		l.t.Errorf("portclash %s:80 from c3: answers by cluster %v (%d failed), want c1 only", vip, seen, failed)
	}
	if id, err := l.whereami("c3/demo/client", "http://"+vip+":81"); err == nil {
		l.t.Errorf("portclash %s:81 (c2's losing port number) answered by %s", vip, id.Cluster)
	}
}

// scale sets the replicas of cluster's Deployment key and waits until
// exactly n of its Pods are ready and none is terminating.
func (l *Lab) scale(ctx context.Context, cluster string, key client.ObjectKey, n int32) {
	l.t.Helper()
	c := l.Client(cluster)
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, key, d); err != nil {
		l.t.Fatal(err)
	}
	d.Spec.Replicas = &n
	if err := c.Update(ctx, d); err != nil {
		l.t.Fatalf("%s: scale %s to %d: %v", cluster, key, n, err)
	}
	waitForWithin(l.t, 90*time.Second, fmt.Sprintf("%s: %d ready %s pods", cluster, n, key), func() error {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace(key.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s terminating", p.Name)
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if len(pods.Items) != int(n) || ready != int(n) {
			return fmt.Errorf("%d pods, %d ready", len(pods.Items), ready)
		}
		return nil
	})
}

// importVIP waits for cluster's ServiceImport demo/name and returns its VIP.
func (l *Lab) importVIP(ctx context.Context, cluster, name string) string {
	l.t.Helper()
	var vip string
	waitFor(l.t, cluster+"'s ServiceImport demo/"+name+" with a VIP", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "demo", Name: name}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) != 1 {
			return fmt.Errorf("IPs %v", si.Spec.IPs)
		}
		vip = si.Spec.IPs[0]
		return nil
	})
	return vip
}

// podNode is the node a pod of demo runs on.
func (l *Lab) podNode(ctx context.Context, cluster, pod string) string {
	l.t.Helper()
	p := &corev1.Pod{}
	if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "demo", Name: pod}, p); err != nil || p.Spec.NodeName == "" {
		l.t.Fatalf("%s: pod demo/%s: %v (node %q)", cluster, pod, err, p.Spec.NodeName)
	}
	return p.Spec.NodeName
}

// exportCondition is a condition of cluster's ServiceExport demo/name.
func (l *Lab) exportCondition(ctx context.Context, cluster, name string, t mcsv1beta1.ServiceExportConditionType) *metav1.Condition {
	se := &mcsv1beta1.ServiceExport{}
	if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "demo", Name: name}, se); err != nil {
		return nil
	}
	return meta.FindStatusCondition(se.Status.Conditions, string(t))
}

// showVIPs runs `causewayctl show vips -o json` with args.
func (l *Lab) showVIPs(args ...string) ([]ctl.VIPRow, error) {
	out, err := l.causewayctl(append([]string{"show", "vips", "-o", "json"}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("show vips: %v: %s", err, out)
	}
	var rows []ctl.VIPRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		return nil, fmt.Errorf("show vips: %v: %s", err, out)
	}
	return rows, nil
}

func vipRow(rows []ctl.VIPRow, vip string) (ctl.VIPRow, bool) {
	for _, r := range rows {
		if r.VIP == vip {
			return r, true
		}
	}
	return ctl.VIPRow{}, false
}

// readyEndpoints is the ready-endpoints annotation of name's multicluster
// slices in demo, by source cluster.
func readyEndpoints(ctx context.Context, c client.Client, name string) (map[string]string, error) {
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.List(ctx, slices, client.InNamespace("demo"), client.MatchingLabels{mcsv1beta1.LabelServiceName: name}); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range slices.Items {
		out[s.Labels[mcsv1beta1.LabelSourceCluster]] = s.Annotations[mcs.AnnotationReadyEndpoints]
	}
	return out, nil
}
