package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
)

func TestShowGatewayCommands(t *testing.T) {
	c1 := kubetest.Start(t, "c1")
	ctx := context.Background()
	if err := c1.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "causeway-system"}}); err != nil {
		t.Fatal(err)
	}
	spec := v1alpha1.EndpointSpec{ClusterID: "c3", Hostname: "c3-n0", CableDriver: "wireguard", PublicIP: "198.18.3.10",
		Port: 4500, Subnets: []string{"10.245.0.0/16"}}
	gw := &v1alpha1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-system", Name: "c1-n0"}}
	if err := c1.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	gw.Status = v1alpha1.GatewayStatus{HAStatus: v1alpha1.HAStatusActive, Connections: []v1alpha1.Connection{{
		ClusterID: "c3", Endpoint: spec, Status: v1alpha1.Connected,
		LatencyRTT: &v1alpha1.LatencyRTT{Average: "310µs", LossPercent: 0}, LastHandshake: &metav1.Time{Time: time.Now()},
	}}}
	if err := c1.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	bad := &v1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: "causeway-system", Name: "c9"},
		Spec: v1alpha1.EndpointSpec{ClusterID: "c9", Hostname: "evil", CableDriver: "wireguard", PublicIP: "198.18.9.9", Port: 4500, Subnets: []string{"0.0.0.0/0"}}}
	if err := c1.Client.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	bad.Status.Conditions = []metav1.Condition{{Type: "Valid", Status: "False", Reason: "InvalidCIDR", Message: "0.0.0.0/0 is the default route", LastTransitionTime: metav1.Now()}}
	if err := c1.Client.Status().Update(ctx, bad); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) string {
		t.Helper()
		cs, out := &clusterSetFlags{}, &outputFlags{}
		show := &cobra.Command{Use: "show"}
		cs.addFlags(show.PersistentFlags())
		out.addFlags(show.PersistentFlags())
		show.AddCommand(newShowGatewayCommands(cs, out)...)
		var buf bytes.Buffer
		show.SetOut(&buf)
		show.SetArgs(append([]string{args[0], "--kubeconfig", "c1=" + c1.AdminKubeconfig}, args[1:]...))
		if err := show.ExecuteContext(ctx); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return buf.String()
	}
	if out := run("gateways"); !strings.Contains(out, "c1-n0") || !strings.Contains(out, "active") || !strings.Contains(out, "1/1") {
		t.Errorf("show gateways:\n%s", out)
	}
	if out := run("connections"); !strings.Contains(out, "c3") || !strings.Contains(out, "connected") || !strings.Contains(out, "310µs") {
		t.Errorf("show connections:\n%s", out)
	}
	if out := run("endpoints"); !strings.Contains(out, "c9") || !strings.Contains(out, "False") || !strings.Contains(out, "InvalidCIDR") {
		t.Errorf("show endpoints:\n%s", out)
	}
	var rows []ConnectionRow
	if err := json.Unmarshal([]byte(run("connections", "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Gateway != "c1-n0" || rows[0].ClusterID != "c3" || rows[0].Status != v1alpha1.Connected {
		t.Errorf("json rows = %+v", rows)
	}
}
