package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// checkBadRecords is issue 10's promise for remote claims, in the kernel:
// c2 acts as a compromised member — its MCS controller stopped, it
// writes its export record of demo/whereami by hand, with its own broker
// credentials (the token its Pods mount), pointing c2's backend at c1's
// node network, at loopback, or its ClusterIP into the VIP range. Each
// bad record is refused in c1 and c3 (RemoteRecordRefused on their
// imports, named by `causewayctl diagnose`), and nothing of it reaches
// their kernels: every node of c1 and c3 holds exactly the routes,
// rules, links, netfilter rules, BPF programs and VIP map entries it
// held with no record of c2 at all, and c3's requests to the VIP are
// answered by c1 throughout. c2's controller then comes back and its
// honest record is served again.
func (l *Lab) checkBadRecords(ctx context.Context, vip string) {
	l.t.Helper()
	l.scale(ctx, "c2", mcsController, 0)
	c2 := l.memberClient(ctx, "c2")
	key := client.ObjectKey{Namespace: broker.Namespace("c2"), Name: mcs.RecordName("demo", "whereami")}
	honest := &causewayv1alpha1.ServiceExportRecord{}
	if err := c2.Get(ctx, key, honest); err != nil {
		l.t.Fatalf("c2's record of demo/whereami, read with c2's broker token: %v", err)
	}
	if err := c2.Delete(ctx, honest); err != nil {
		l.t.Fatalf("delete c2's record: %v", err)
	}
	waitFor(l.t, "c3's import of whereami without c2", l.sourcesOf(ctx, "c3", "whereami", "c1"))
	before := l.importerState(vip)
	lines := 0
	for _, v := range before {
		lines += len(v)
	}
	l.t.Logf("c1's and c3's kernel state without a record of c2: %d listings, %d lines", len(before), lines)

	nodeIP := l.nodeIP(ctx, "c1", "n1")
	for _, tc := range []struct {
		name   string
		edit   func(*causewayv1alpha1.ServiceExportRecordSpec)
		reason addrpolicy.RecordReason
	}{
		{"global IP in c1's node network", func(r *causewayv1alpha1.ServiceExportRecordSpec) { setGlobalIP(r, nodeIP) }, addrpolicy.RecordOutsideClaim},
		{"global IP 127.0.0.1", func(r *causewayv1alpha1.ServiceExportRecordSpec) { setGlobalIP(r, "127.0.0.1") }, addrpolicy.RecordReservedAddress},
		{"ClusterIP in the VIP range", func(r *causewayv1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"243.0.0.5"} }, addrpolicy.RecordReservedAddress},
	} {
		bad := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		bad.Spec = *honest.Spec.DeepCopy()
		tc.edit(&bad.Spec)
		if err := c2.Create(ctx, bad); err != nil {
			l.t.Fatalf("%s: c2 writes its bad record: %v", tc.name, err)
		}
		for _, importer := range []string{"c1", "c3"} {
			waitFor(l.t, fmt.Sprintf("%s: %s refuses c2's record (%s)", tc.name, importer, tc.reason), l.refused(ctx, importer, "whereami", tc.reason))
		}
		out, err := l.causewayctl("diagnose")
		if !strings.Contains(out, "c3: import demo/whereami: record refused") || !strings.Contains(out, "cluster c2: "+string(tc.reason)) {
			l.t.Errorf("%s: diagnose (%v) does not name the refusal:\n%s", tc.name, err, out)
		}
		// The route agents act on an import within a second; give a
		// wrong one time to show.
		time.Sleep(3 * time.Second)
		if d := before.diff(l.importerState(vip)); d != "" {
			l.t.Errorf("%s: c1's and c3's kernels changed:\n%s", tc.name, d)
		} else {
			l.t.Logf("%s: refused by c1 and c3 (%s), their kernels unchanged", tc.name, tc.reason)
		}
		l.curlClusters("c3/demo/client", "http://"+vip, []string{"c1"})
		if err := c2.Delete(ctx, bad); err != nil {
			l.t.Fatalf("%s: delete the bad record: %v", tc.name, err)
		}
	}

	l.scale(ctx, "c2", mcsController, 1)
	waitFor(l.t, "c3's import of whereami from c1 and c2 again", l.sourcesOf(ctx, "c3", "whereami", "c1", "c2"))
	l.curlClusters("c3/demo/client", "http://"+vip, []string{"c1", "c2"})
	// The comparison sees what a record changes: c2's honest one adds its
	// backend to the VIP maps.
	if d := before.diff(l.importerState(vip)); !strings.Contains(d, "vip map") {
		l.t.Errorf("c2's honest record served, yet c1's and c3's VIP maps equal those without it:\n%s", d)
	}
}

// mcsController is the chart's MCS controller Deployment.
var mcsController = client.ObjectKey{Namespace: kube.Namespace, Name: "causeway-mcs-controller"}

// setGlobalIP points every port of a record at ip (its global address).
func setGlobalIP(r *causewayv1alpha1.ServiceExportRecordSpec, ip string) {
	for i := range r.Ports {
		if r.Ports[i].Global != nil {
			r.Ports[i].Global.IP = ip
		}
	}
}

// importerState is the kernel state of every node of c1 and c3 with the
// VIP map entries of vip on each (show vips --node).
func (l *Lab) importerState(vip string) kernelState {
	l.t.Helper()
	ks, err := l.kernelState()
	if err != nil {
		l.t.Fatal(err)
	}
	for k := range ks {
		if !strings.HasPrefix(k, "c1/") && !strings.HasPrefix(k, "c3/") {
			delete(ks, k)
		}
	}
	rows, err := l.showVIPs()
	if err != nil {
		l.t.Fatal(err)
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.VIP, vip+":") || strings.HasPrefix(r.Node, "c2/") {
			continue
		}
		b, err := json.Marshal(r.Programmed)
		if err != nil {
			l.t.Fatal(err)
		}
		ks[r.Node+" vip map"] = append(ks[r.Node+" vip map"], r.VIP+" "+string(b))
	}
	return ks
}

// memberClient is a broker client with cluster's own identity: the
// token of the causeway-broker Secret its Pods mount, at the broker's
// address on the host.
func (l *Lab) memberClient(ctx context.Context, cluster string) client.Client {
	l.t.Helper()
	sec := &corev1.Secret{}
	if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: broker.Secret}, sec); err != nil {
		l.t.Fatal(err)
	}
	cfg, err := broker.RESTConfigFromSecret(sec.Data)
	if err != nil {
		l.t.Fatal(err)
	}
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	b, err := st.ControlPlane("broker")
	if err != nil {
		l.t.Fatal(err)
	}
	cfg.Host = b.URL
	c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		l.t.Fatal(err)
	}
	return c
}

// sourcesOf checks that cluster's ServiceImport demo/name has slices of
// exactly the clusters want.
func (l *Lab) sourcesOf(ctx context.Context, cluster, name string, want ...string) func() error {
	return func() error {
		got, err := readyEndpoints(ctx, l.Client(cluster), name)
		if err != nil {
			return err
		}
		if len(got) != len(want) {
			return fmt.Errorf("slices by source cluster %v, want %v", got, want)
		}
		for _, w := range want {
			if _, ok := got[w]; !ok {
				return fmt.Errorf("slices by source cluster %v, want %v", got, want)
			}
		}
		return nil
	}
}

// refused checks that cluster's ServiceImport demo/name says
// RemoteRecordRefused with reason.
func (l *Lab) refused(ctx context.Context, cluster, name string, reason addrpolicy.RecordReason) func() error {
	return func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := l.Client(cluster).Get(ctx, client.ObjectKey{Namespace: "demo", Name: name}, si); err != nil {
			return err
		}
		c := meta.FindStatusCondition(si.Status.Conditions, mcs.ConditionRemoteRecordRefused)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Reason+" "+c.Message, string(reason)) {
			return fmt.Errorf("condition %s: %+v", mcs.ConditionRemoteRecordRefused, c)
		}
		return nil
	}
}

// nodeIP is the InternalIP of a node of cluster.
func (l *Lab) nodeIP(ctx context.Context, cluster, node string) string {
	l.t.Helper()
	n := &corev1.Node{}
	if err := l.Client(cluster).Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
		l.t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	l.t.Fatalf("%s: node %s has no InternalIP", cluster, node)
	return ""
}
