package controller_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestRecordQuota: with a ClusterSet policy of 3 records per member, c2
// (its own broker identity only, no controller) writes records of five
// Services s0…s4; c3 exports s4 honestly. c1 takes c2's three oldest: s0,
// s1 and s2 are imported with c2's backend; s3 (only c2's) is not
// imported, one Event on c2's Endpoint mirror says why; s4 is imported
// with c3 alone and RemoteRecordRefused=True/QuotaExceeded naming c2, with
// a Warning Event; the gauge counts c2's two objects over quota. c2
// deleting s1 brings s3 in (its spec, dropped while over quota, read
// again from the broker).
func TestRecordQuota(t *testing.T) {
	e := newEnv(t, "c1")
	ctx := context.Background()
	pol, err := addrpolicy.ParsePolicy(causewayv1alpha1.ClusterSetPolicySpec{Quotas: causewayv1alpha1.MemberQuotas{ServiceExportRecords: 3}})
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Policy = pol
	e.remoteMember("c2")
	e.remoteMember("c3")
	e.tunnel("c1", "c2", true, "10.96.0.0/16")
	e.tunnel("c1", "c3", true, "10.97.0.0/16")
	e.namespace("c1", "demo")
	e.start("c1")
	c1 := e.c("c1")

	record := func(id, name, clusterIP string) mcs.ExportRecord {
		return mcs.ExportRecord{ClusterID: id, ServiceNamespace: "demo", ServiceName: name, Type: mcsv1beta1.ClusterSetIP,
			ExportCreationTimestamp: metav1.Now(), ClusterIPs: []string{clusterIP}, ReadyEndpoints: 1, ServingEndpoints: 1,
			Ports: []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	}
	c2 := e.member("c2")
	for i := range 5 {
		// Written in order: s0 is the oldest (or, in the same second,
		// first by name).
		if err := writeRecord(t, c2, "c2", record("c2", fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.0.%d", 10+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeRecord(t, e.member("c3"), "c3", record("c3", "s4", "10.97.0.14")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := fmt.Sprintf("s%d", i)
		kubetest.Eventually(t, name+" imported with c2", wantEndpoints(c1, "demo", name, fmt.Sprintf("c2/10.96.0.%d/true", 10+i)))
	}
	kubetest.Eventually(t, "s4 imported with c3 alone", wantEndpoints(c1, "demo", "s4", "c3/10.97.0.14/true"))
	kubetest.Eventually(t, "s4 says c2 is over quota", wantImportCondition(c1, "demo", "s4", mcs.ConditionRemoteRecordRefused, metav1.ConditionTrue,
		mcs.ReasonQuotaExceeded, "cluster c2: QuotaExceeded: record object demo.s4 is beyond the cluster's quota of 3 record objects"))
	kubetest.Eventually(t, "Warning Event on s4's import", kubetest.WantEvent(c1, "demo", "ServiceImport", "s4", mcs.EventRemoteRecordRefused,
		"record demo.s4 of cluster c2 refused"))
	kubetest.Eventually(t, "one Warning Event on c2's Endpoint for its records over quota", kubetest.WantEvent(c1, "causeway-system", "Endpoint", "c2",
		mcs.EventRemoteRecordRefused, "cluster c2 holds records beyond its quota, which are not imported (first seen: record demo.s3: QuotaExceeded"))
	if err := c1.Get(ctx, types.NamespacedName{Namespace: "demo", Name: "s3"}, &mcsv1beta1.ServiceImport{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceImport demo/s3: err=%v, want NotFound", err)
	}
	overQuota := func(want float64) func() error {
		return func() error {
			for _, m := range e.series("c1", "causeway_mcs_remote_record_objects_over_quota", map[string]string{"cluster": "c2"}) {
				if m.GetGauge().GetValue() == want {
					return nil
				}
			}
			return fmt.Errorf("causeway_mcs_remote_record_objects_over_quota{cluster=c2} is not %v", want)
		}
	}
	kubetest.Eventually(t, "gauge: two of c2's objects over quota", overQuota(2))

	// c2 withdraws s1: s3 comes in.
	if err := c2.Delete(ctx, &causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace("c2"), Name: "demo.s1"}}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "s3 imported with c2", wantEndpoints(c1, "demo", "s3", "c2/10.96.0.13/true"))
	kubetest.Eventually(t, "s1 no longer imported", gone(c1, &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "s1"}}))
	kubetest.Eventually(t, "s4 still refuses c2's record", wantImportCondition(c1, "demo", "s4", mcs.ConditionRemoteRecordRefused, metav1.ConditionTrue,
		mcs.ReasonQuotaExceeded, "cluster c2"))
	kubetest.Eventually(t, "gauge: one object over quota", overQuota(1))
}
