package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/broker"
	globalnetcontroller "github.com/causeway-net/causeway/pkg/globalnet/controller"
	"github.com/causeway-net/causeway/pkg/mcs/controller"
)

func TestParseServiceRef(t *testing.T) {
	for in, ok := range map[string]bool{"kubecon/whereami": true, "whereami": false, "a/b/c": false, "Kube/x": false, "/x": false, "ns/": false} {
		if _, err := parseServiceRef(in); (err == nil) != ok {
			t.Errorf("parseServiceRef(%q): err=%v", in, err)
		}
	}
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestExportAndShow drives export, show and unexport against two real
// clusters with their MCS controllers running.
func TestExportAndShow(t *testing.T) {
	all := kubetest.StartMany(t, "c1", "c2", "broker")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	t.Cleanup(func() { cancel(); <-done; <-done; <-done })
	var kubeconfigs []string
	for _, id := range []string{"c1", "c2"} {
		c := all[id]
		for _, ns := range []string{"causeway-system", "kubecon"} {
			if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
		}
		kc, err := broker.EnsureClusterIdentity(ctx, all["broker"].Config, id)
		if err != nil {
			t.Fatal(err)
		}
		bcfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		mc, err := controller.New(c.Config, bcfg, controller.Config{ClusterID: id})
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- mc.Run(ctx) }()
		kubeconfigs = append(kubeconfigs, "--kubeconfig", id+"="+c.AdminKubeconfig)
	}
	// c1's globalnet controller assigns its exports' global addresses.
	gn, err := globalnetcontroller.New(all["c1"].Config, globalnetcontroller.Config{ClusterID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- gn.Run(ctx) }()
	// Globalnet as the gateways would mirror it: c1 owns 242.0.1.0/24, and
	// c2 reaches c1 through a Valid Endpoint with exactly that subnet.
	c1 := all["c1"].Client
	if err := c1.Create(ctx, &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-system", Name: "c1"},
		Spec: v1alpha1.ClusterSpec{ClusterID: "c1", PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"},
			GlobalCIDRs: []string{"242.0.1.0/24"}}}); err != nil {
		t.Fatal(err)
	}
	setTunnel := func(valid bool) {
		t.Helper()
		c2 := all["c2"].Client
		ep := &v1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-system", Name: "c1"}}
		if err := c2.Get(ctx, client.ObjectKeyFromObject(ep), ep); apierrors.IsNotFound(err) {
			ep.Spec = v1alpha1.EndpointSpec{ClusterID: "c1", Hostname: "c1-gw", CableDriver: v1alpha1.CableVXLAN, PublicIP: "192.0.2.1",
				Port: 4500, Subnets: []string{"242.0.1.0/24"}}
			if err := c2.Create(ctx, ep); err != nil {
				t.Fatal(err)
			}
		}
		cond := metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonValid, Message: "ok"}
		if !valid {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalidKey, "refused"
		}
		meta.SetStatusCondition(&ep.Status.Conditions, cond)
		if err := c2.Status().Update(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	setTunnel(true)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kubecon", Name: "whereami"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	if err := c1.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "kubecon", Name: "whereami-x", Labels: map[string]string{discoveryv1.LabelServiceName: "whereami"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}}},
	}
	if err := c1.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}

	if _, err := run(t, append([]string{"export", "kubecon/whereami"}, kubeconfigs...)...); err == nil ||
		!strings.Contains(err.Error(), "--cluster") {
		t.Errorf("export with two clusters and no --cluster: %v", err)
	}
	out, err := run(t, append([]string{"export", "kubecon/whereami", "--cluster", "c1"}, kubeconfigs...)...)
	if err != nil || !strings.Contains(out, "c1: exported kubecon/whereami") {
		t.Fatalf("export: %v\n%s", err, out)
	}

	var rows []ImportRow
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := run(t, append([]string{"show", "imports", "-o", "json"}, kubeconfigs...)...)
		if err != nil {
			t.Fatalf("show imports: %v\n%s", err, out)
		}
		rows = nil
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("show imports -o json: %v\n%s", err, out)
		}
		if len(rows) == 2 && len(rows[0].IPs) == 1 && len(rows[1].IPs) == 1 && rows[0].Endpoints["c1"].Ready == 1 && rows[1].Endpoints["c1"].Ready == 1 &&
			len(rows[1].Via["c1"]) == 1 && strings.HasPrefix(rows[1].Via["c1"][0], "242.0.1.") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("imports never complete: %+v", rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rows[0].Cluster != "c1" || rows[1].Cluster != "c2" || rows[0].IPs[0] != rows[1].IPs[0] || fmt.Sprint(rows[0].Sources) != "[c1]" {
		t.Errorf("imports: %+v", rows)
	}
	out, err = run(t, append([]string{"show", "imports"}, kubeconfigs...)...)
	if err != nil || !strings.Contains(out, rows[0].IPs[0]) || !strings.Contains(out, "http:80/TCP") || !strings.Contains(out, "c1 1/1") {
		t.Errorf("show imports table: %v\n%s", err, out)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		out, err = run(t, append([]string{"show", "exports"}, kubeconfigs...)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if err == nil && len(lines) == 2 && strings.Join(strings.Fields(lines[1]), " ") == "c1 kubecon whereami True True False http:80/TCP=242.0.1.2:1024" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("show exports: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// c1's own import uses its ClusterIP; c2's the global pair.
	if !strings.HasPrefix(rows[0].Via["c1"][0], "10.96.") || rows[1].Via["c1"][0] != "242.0.1.2 http:1024" {
		t.Errorf("via: c1 %q, c2 %q", rows[0].Via["c1"], rows[1].Via["c1"])
	}
	// No tunnel from c2 to c1: c2 shows c1 unreachable, with the reason.
	setTunnel(false)
	deadline = time.Now().Add(60 * time.Second)
	for {
		out, err = run(t, append([]string{"show", "imports"}, kubeconfigs...)...)
		if err == nil && strings.Contains(out, "c1 242.0.1.2 http:1024 UNREACHABLE: no tunnel to cluster c1") && strings.Contains(out, "c1 0/1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("show imports, no tunnel: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}

	out, err = run(t, append([]string{"unexport", "kubecon/whereami", "--cluster", "c1"}, kubeconfigs...)...)
	if err != nil || !strings.Contains(out, "unexported") {
		t.Fatalf("unexport: %v\n%s", err, out)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		out, err := run(t, append([]string{"show", "imports", "-o", "json"}, kubeconfigs...)...)
		if err == nil && strings.TrimSpace(out) == "[]" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("imports remain after unexport: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// With no cluster named, show probes the kubeconfig's contexts for
	// members; c1 never ran join (no ClusterProperty), so none is found and
	// the error says why and how to name clusters.
	t.Setenv("KUBECONFIG", all["c1"].AdminKubeconfig)
	_, err = run(t, "show", "imports")
	if err == nil || !strings.Contains(err.Error(), "no member cluster") || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("show without clusters: %v", err)
	}
}

func TestTableHelpers(t *testing.T) {
	if got, want := errorCells("c2", "refused", 4), []string{"c2", "-", "-", "error: refused"}; !slices.Equal(got, want) {
		t.Errorf("errorCells = %q, want %q", got, want)
	}
	rows := []ExportRow{{Cluster: "c2", Namespace: "b", Name: "x"}, {Cluster: "c3", Namespace: "a", Name: "y"},
		{Cluster: "c1", Namespace: "b", Name: "x"}, {Cluster: "c1", Namespace: "a", Name: "z"}}
	sortByService(rows, func(r ExportRow) (string, string, string) { return r.Namespace, r.Name, r.Cluster })
	var got []string
	for _, r := range rows {
		got = append(got, r.Namespace+"/"+r.Name+"@"+r.Cluster)
	}
	if want := []string{"a/y@c3", "a/z@c1", "b/x@c1", "b/x@c2"}; !slices.Equal(got, want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
}
