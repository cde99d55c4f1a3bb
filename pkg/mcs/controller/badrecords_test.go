package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/ctl"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// member is a client of the broker with cluster id's own identity: what
// a compromised member (its controller stopped) writes by hand.
// remoteMember gives cluster id, which has no API server here, its broker
// identity (as deploy-broker does); e.member(id) is then its client.
func (e *env) remoteMember(id string) {
	e.t.Helper()
	kc, err := broker.EnsureClusterIdentity(context.Background(), e.broker.Config, id)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.identity[id], err = clientcmd.RESTConfigFromKubeConfig(kc); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) member(id string) client.Client {
	e.t.Helper()
	c, err := client.New(e.identity[id], client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// writeRecord creates or replaces cluster id's record of ns/name with
// spec, through the member client.
func writeRecord(t *testing.T, c client.Client, id string, spec mcs.ExportRecord) error {
	t.Helper()
	return writeRecordObject(t, c, id, mcs.RecordName(spec.ServiceNamespace, spec.ServiceName), spec)
}

// writeRecordObject creates or replaces the record object name (a head or
// a part) in cluster id's broker namespace, through the member client.
func writeRecordObject(t *testing.T, c client.Client, id, name string, spec mcs.ExportRecord) error {
	t.Helper()
	ctx := context.Background()
	obj := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(id), Name: name}}
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	obj.Spec = spec
	switch {
	case apierrors.IsNotFound(err):
		return c.Create(ctx, obj)
	case err != nil:
		return err
	}
	return c.Update(ctx, obj)
}

// exportWeb starts c1's controller and exports ns/web from c1 (port
// http 80, one ready pod); it returns c1's client and the Service.
func exportWeb(t *testing.T, e *env, ns string) (client.Client, *corev1.Service) {
	t.Helper()
	e.namespace("c1", ns)
	e.start("c1")
	c1 := e.c("c1")
	svc := kubetest.Service(t, c1, ns, "web", false, map[string]int32{"http": 80})
	kubetest.LocalSlice(t, c1, svc, 8080, kubetest.Pod{IP: "10.244.1.5", Ready: true})
	kubetest.Export(t, c1, ns, "web")
	return c1, svc
}

// TestForgedExportTimestamp: a member whose record claims an export from
// the year 2000, written after an honest cluster's export, does not win
// the conflict; the broker's creationTimestamp of the record decides.
func TestForgedExportTimestamp(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	c1, svc := exportWeb(t, e, "kubecon")
	kubetest.Eventually(t, "import in c1", wantEndpoints(c1, "kubecon", "web", "c1/"+svc.Spec.ClusterIP+"/true"))
	// The broker's clock counts in seconds: the forged record is younger.
	time.Sleep(1100 * time.Millisecond)

	forged := mcs.ExportRecord{ClusterID: "c2", ServiceNamespace: "kubecon", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
		ExportCreationTimestamp: metav1.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		ClusterIPs:              []string{"10.96.200.1"},
		Ports:                   []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
		ExportedLabels:          map[string]string{"stolen": "yes"},
	}
	if err := writeRecord(t, e.member("c2"), "c2", forged); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "c1's export wins the conflict", func() error {
		got, se, err := condition(c1, "kubecon", "web", string(mcsv1beta1.ServiceExportConditionConflict))
		if err != nil {
			return err
		}
		cond := meta.FindStatusCondition(se.Status.Conditions, string(mcsv1beta1.ServiceExportConditionConflict))
		if got != "True/PortConflict,LabelsConflict" || !strings.Contains(cond.Message, "from the oldest export, in cluster c1") {
			return fmt.Errorf("Conflict = %s %q", got, cond.Message)
		}
		return nil
	})
	var si mcsv1beta1.ServiceImport
	if err := c1.Get(context.Background(), types.NamespacedName{Namespace: "kubecon", Name: "web"}, &si); err != nil {
		t.Fatal(err)
	}
	want := []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}
	if !equality.Semantic.DeepEqual(si.Spec.Ports, want) || si.Labels["stolen"] != "" {
		t.Errorf("import took the forged export: ports %+v, labels %v", si.Spec.Ports, si.Labels)
	}
}

// importState is what c1 programs for a Service: the ServiceImport's
// spec (VIP, type, ports) and labels, and the multi-cluster slices'
// endpoints — the route agent's VIP table and CoreDNS follow exactly
// these.
func importState(c client.Client, ns, name string) (string, error) {
	var si mcsv1beta1.ServiceImport
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &si); err != nil {
		return "", err
	}
	eps, err := endpoints(c, ns, name)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal([]any{si.Spec, si.Labels, si.Status.Clusters, eps})
	return string(b), err
}

// TestBadRecords: members (their controllers stopped) write bad export
// records into their broker namespaces by hand, with their own broker
// credentials, for a Service c1 imports. Each is refused or rejected by
// the broker (schema, admission): what c1 programs stays what it was without the
// bad record, the refusal shows as RemoteRecordRefused on the import, a
// Warning Event and a causewayctl diagnose line; c3's honest record of the
// same Service is served throughout.
func TestBadRecords(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	ctx := context.Background()
	// c3 has no API server here, only its broker identity and, in c1, a
	// Valid Endpoint mirror.
	e.remoteMember("c3")
	e.tunnel("c1", "c3", true, "10.97.0.0/16", "10.245.0.0/16")
	c1, svc := exportWeb(t, e, "demo")

	honest := func(id, clusterIP, pod string) mcs.ExportRecord {
		return mcs.ExportRecord{ClusterID: id, ServiceNamespace: "demo", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
			ExportCreationTimestamp: metav1.Now(), ClusterIPs: []string{clusterIP}, ReadyEndpoints: 1, ServingEndpoints: 1,
			Ports: []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			// Endpoints, which an exporter leaves out of a ClusterSetIP
			// record, so that the cases below can put bad backends there.
			Endpoints: []causewayv1alpha1.RecordEndpoints{{AddressType: "IPv4",
				Ports:    []causewayv1alpha1.RecordEndpointPort{{Name: "http", Port: 8080}},
				Backends: []causewayv1alpha1.RecordBackend{{Address: pod, Ready: true, Serving: true}}}}}
	}
	if err := writeRecord(t, e.member("c3"), "c3", honest("c3", "10.97.0.30", "10.245.1.30")); err != nil {
		t.Fatal(err)
	}
	mine := "c1/" + svc.Spec.ClusterIP + "/true"
	kubetest.Eventually(t, "c1 imports itself and c3", wantEndpoints(c1, "demo", "web", mine, "c3/10.97.0.30/true"))
	var want string
	kubetest.Eventually(t, "import settled", func() error {
		var err error
		want, err = importState(c1, "demo", "web")
		return err
	})
	// Each case starts from c2's honest record, which c1 serves: c2's
	// records do reach c1's slices.
	c2 := e.member("c2")
	good := honest("c2", "10.96.0.77", "10.244.2.5")

	bigGroups := func(r *mcs.ExportRecord) {
		r.Endpoints = nil
		for g := range 11 {
			grp := causewayv1alpha1.RecordEndpoints{AddressType: "IPv4", Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "http", Port: 8080}}}
			for i := range 1000 {
				grp.Backends = append(grp.Backends, causewayv1alpha1.RecordBackend{Address: fmt.Sprintf("10.244.%d.%d", 100+g, i%250), Ready: true})
			}
			r.Endpoints = append(r.Endpoints, grp)
		}
	}
	for _, tc := range []struct {
		name   string
		edit   func(*mcs.ExportRecord)
		subnet []string // c2's Endpoint mirror in c1, when not the flat default
		reason string   // RemoteRecordRefused reason; "" = the broker refuses the write
		msg    string
	}{
		{name: "ClusterIP outside c2's CIDRs", edit: func(r *mcs.ExportRecord) { r.ClusterIPs = []string{"172.18.1.10"} },
			reason: string(addrpolicy.RecordOutsideClaim), msg: "clusterIP 172.18.1.10 is outside"},
		{name: "backend in the VIP range", edit: func(r *mcs.ExportRecord) { r.Endpoints[0].Backends[0].Address = "243.0.0.5" },
			reason: string(addrpolicy.RecordReservedAddress), msg: "clusterset VIP range"},
		{name: "backend 127.0.0.1", edit: func(r *mcs.ExportRecord) { r.Endpoints[0].Backends[0].Address = "127.0.0.1" },
			reason: string(addrpolicy.RecordReservedAddress), msg: "127.0.0.0/8"},
		{name: "0.0.0.0/1 split claimed", edit: func(r *mcs.ExportRecord) { r.ClusterIPs = []string{"8.8.8.8"} },
			subnet: []string{"0.0.0.0/1", "128.0.0.0/1"}, reason: string(addrpolicy.RecordInvalidClaim), msg: "shorter than /8"},
		{name: "duplicate port", edit: func(r *mcs.ExportRecord) { r.Ports = append(r.Ports, r.Ports[0]) },
			reason: string(addrpolicy.RecordInvalidPort), msg: "listed twice"},
		// More than pkg/broker.MaxRecordItems in one object: the broker's
		// admission refuses it.
		{name: "11 000 backends", edit: bigGroups},
		{name: "head naming a missing part", edit: func(r *mcs.ExportRecord) {
			r.Part = &causewayv1alpha1.RecordPart{Index: 0, Count: 2, Revision: "0123456789"}
		}, reason: mcs.ReasonIncompleteRecord, msg: "part 1 of 2 (revision 0123456789) is missing"},
		{name: "port 0", edit: func(r *mcs.ExportRecord) { r.Ports[0].Port = 0 }},
		{name: "101 ports", edit: func(r *mcs.ExportRecord) {
			for i := range 100 {
				r.Ports = append(r.Ports, causewayv1alpha1.RecordPort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(1000 + i)})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// From the honest record, served.
			if err := writeRecord(t, c2, "c2", good); err != nil {
				t.Fatal(err)
			}
			kubetest.Eventually(t, "c2 served", wantEndpoints(c1, "demo", "web", mine, "c2/10.96.0.77/true", "c3/10.97.0.30/true"))
			if tc.subnet != nil {
				e.tunnel("c1", "c2", true, tc.subnet...)
				t.Cleanup(func() { e.tunnel("c1", "c2", true, "10.96.0.0/16", "10.244.0.0/16") })
			}
			bad := *good.DeepCopy()
			tc.edit(&bad)
			err := writeRecord(t, c2, "c2", bad)
			if tc.reason == "" {
				if !apierrors.IsInvalid(err) {
					t.Fatalf("the broker took the record: err=%v, want Invalid", err)
				}
				kubetest.Eventually(t, "c2 still served", wantEndpoints(c1, "demo", "web", mine, "c2/10.96.0.77/true", "c3/10.97.0.30/true"))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			kubetest.Eventually(t, "refused", wantImportCondition(c1, "demo", "web", mcs.ConditionRemoteRecordRefused, metav1.ConditionTrue, tc.reason, tc.msg))
			kubetest.Eventually(t, "nothing of it programmed", func() error {
				got, err := importState(c1, "demo", "web")
				if err != nil || got != want {
					return fmt.Errorf("c1 programs\n%s\nwant\n%s (%v)", got, want, err)
				}
				return nil
			})
			kubetest.Eventually(t, "Warning Event", kubetest.WantEvent(c1, "demo", "ServiceImport", "web", mcs.EventRemoteRecordRefused, tc.msg))
			out := diagnose(t, e, "c1")
			if !strings.Contains(out, "c1: import demo/web: record refused") || !strings.Contains(out, "cluster c2: "+tc.reason) {
				t.Errorf("diagnose does not show the refusal:\n%s", out)
			}
		})
	}

	t.Run("an incomplete set freezes nothing", func(t *testing.T) {
		// c2's head names a part it never writes: c2 contributes nothing,
		// and a change of c3's record still reaches c1's import.
		if err := writeRecord(t, c2, "c2", good); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "c2 served", wantEndpoints(c1, "demo", "web", mine, "c2/10.96.0.77/true", "c3/10.97.0.30/true"))
		rev := "abcdef0123"
		head := *good.DeepCopy()
		head.Part = &causewayv1alpha1.RecordPart{Index: 0, Count: 2, Revision: rev}
		if err := writeRecord(t, c2, "c2", head); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "c2 refused", wantImportCondition(c1, "demo", "web", mcs.ConditionRemoteRecordRefused, metav1.ConditionTrue,
			mcs.ReasonIncompleteRecord, "cluster c2: IncompleteRecord: record of cluster c2 is incomplete: part 1 of 2"))
		moved := honest("c3", "10.97.0.31", "10.245.1.30")
		if err := writeRecord(t, e.member("c3"), "c3", moved); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "c3's change imported", wantEndpoints(c1, "demo", "web", mine, "c3/10.97.0.31/true"))
		// The part arrives: the set is complete, c2 is served again.
		// (The schema wants ports in every ClusterSetIP object; importers
		// read only the head's.)
		part := mcs.ExportRecord{ClusterID: "c2", ServiceNamespace: "demo", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
			ExportCreationTimestamp: good.ExportCreationTimestamp, Ports: good.Ports, Part: &causewayv1alpha1.RecordPart{Index: 1, Count: 2, Revision: rev},
			Endpoints: []causewayv1alpha1.RecordEndpoints{{AddressType: "IPv4", Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "http", Port: 8080}},
				Backends: []causewayv1alpha1.RecordBackend{{Address: "10.244.2.6", Ready: true, Serving: true}}}}}
		if err := writeRecordObject(t, c2, "c2", mcs.RecordPartName("demo", "web", rev, 1), part); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "c2 served again", wantEndpoints(c1, "demo", "web", mine, "c2/10.96.0.77/true", "c3/10.97.0.31/true"))
		kubetest.Eventually(t, "nothing refused", wantImportCondition(c1, "demo", "web", mcs.ConditionRemoteRecordRefused, metav1.ConditionFalse, mcs.ReasonNoneRefused, ""))
		if err := writeRecord(t, e.member("c3"), "c3", honest("c3", "10.97.0.30", "10.245.1.30")); err != nil {
			t.Fatal(err)
		}
		if err := e.member("c2").Delete(ctx, &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{
			Namespace: broker.Namespace("c2"), Name: mcs.RecordPartName("demo", "web", rev, 1)}}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("claimed weight bounded", func(t *testing.T) {
		// As many ready endpoints as a record may claim: c2's weight in
		// c1's slices is bounded by the others' (addrpolicy.CapWeights).
		claim := *good.DeepCopy()
		claim.ReadyEndpoints, claim.ServingEndpoints = addrpolicy.MaxRecordEndpointCount, addrpolicy.MaxRecordEndpointCount
		if err := writeRecord(t, c2, "c2", claim); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "c2's weight bounded", func() error {
			var list discoveryv1.EndpointSliceList
			if err := c1.List(ctx, &list, client.InNamespace("demo"), client.MatchingLabels{mcsv1beta1.LabelServiceName: "web"}); err != nil {
				return err
			}
			w := map[string]int{}
			for _, sl := range list.Items {
				w[sl.Labels[mcsv1beta1.LabelSourceCluster]], _ = strconv.Atoi(sl.Annotations[mcs.AnnotationReadyEndpoints])
			}
			if want := addrpolicy.RemoteWeightFactor * (w["c1"] + w["c3"]); w["c1"] == 0 || w["c2"] != want {
				return fmt.Errorf("weights by source cluster %v, want c2's %d", w, want)
			}
			return nil
		})
	})

	t.Run("every record refused", func(t *testing.T) {
		// A Service only c2 exports, badly: no import at all in c1, the
		// Event on c2's Endpoint mirror, and diagnose names it.
		e.namespace("c1", "solo")
		bad := honest("c2", "127.0.0.1", "10.244.2.5")
		bad.ServiceNamespace = "solo"
		if err := writeRecord(t, c2, "c2", bad); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, "Warning Event on the Endpoint mirror", kubetest.WantEvent(c1, "causeway-system", "Endpoint", "c2", mcs.EventRemoteRecordRefused,
			"record solo.web of cluster c2 refused"))
		if err := c1.Get(ctx, types.NamespacedName{Namespace: "solo", Name: "web"}, &mcsv1beta1.ServiceImport{}); !apierrors.IsNotFound(err) {
			t.Errorf("ServiceImport solo/web: err=%v, want NotFound", err)
		}
		if out := diagnose(t, e, "c1"); !strings.Contains(out, "c1: remote c2: record refused") || !strings.Contains(out, "solo.web") {
			t.Errorf("diagnose does not show the refusal:\n%s", out)
		}
	})
}

// diagnose runs causewayctl diagnose against cluster id and returns its
// output (it fails here anyway: the test runs no gateways).
func diagnose(t *testing.T, e *env, id string) string {
	t.Helper()
	cmd := ctl.NewCommand()
	var out strings.Builder
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"diagnose", "--kubeconfig", id + "=" + e.clusters[id].AdminKubeconfig})
	_ = cmd.Execute()
	return out.String()
}
