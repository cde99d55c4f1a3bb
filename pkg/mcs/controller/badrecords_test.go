package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// member is a client of the broker with cluster id's own identity: what
// a compromised member (its controller stopped) writes by hand.
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
	ctx := context.Background()
	obj := &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(id),
		Name: mcs.RecordName(spec.ServiceNamespace, spec.ServiceName)}}
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

// TestForgedExportTimestamp: a member whose record claims an export from
// the year 2000, written after an honest cluster's export, does not win
// the conflict; the broker's creationTimestamp of the record decides.
func TestForgedExportTimestamp(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	e.namespace("c1", "kubecon")
	e.start("c1")
	c1 := e.c("c1")
	svc := service(t, c1, "kubecon", "web", false, map[string]int32{"http": 80})
	localSlice(t, c1, svc, 8080, pod{ip: "10.244.1.5", ready: true})
	export(t, c1, "kubecon", "web")
	eventually(t, "import in c1", wantEndpoints(c1, "kubecon", "web", "c1/"+svc.Spec.ClusterIP+"/true"))
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
	eventually(t, "c1's export wins the conflict", func() error {
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
