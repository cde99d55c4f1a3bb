package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// maxRecordObjectBytes is the bound every record object must stay under
// (mcs.MaxRecordItems; etcd refuses requests over 1.5 MiB).
const maxRecordObjectBytes = 1 << 20

// TestLargeExports: Services with 5 000 endpoints (50 EndpointSlices of
// 100) export from c1 and import in c2. The ClusterSetIP one's record is
// one object carrying the ready count, and c2's slices of c1 weigh 5 000;
// the headless one's is split into parts, and c2 lists every pod. Fewer
// pods update both; unexport removes every object.
func TestLargeExports(t *testing.T) {
	e := newEnv(t, "c1", "c2")
	for _, id := range []string{"c1", "c2"} {
		e.namespace(id, "big")
		e.start(id)
	}
	c1, c2 := e.c("c1"), e.c("c2")
	web := kubetest.Service(t, c1, "big", "web", false, map[string]int32{"http": 80})
	db := kubetest.Service(t, c1, "big", "db", true, map[string]int32{"sql": 5432})
	bigSlices(t, c1, web, 0, 50, 8080)
	bigSlices(t, c1, db, 1, 50, 5432)
	kubetest.Export(t, c1, "big", "web")
	kubetest.Export(t, c1, "big", "db")

	kubetest.Eventually(t, "c2's slices of c1's web weigh 5 000 ready endpoints", wantReadyEndpoints(c2, "web", "5000"))
	kubetest.Eventually(t, "c2 lists all 5 000 pods of c1's db", wantPods(c2, "db", 5000))
	webObjs := recordObjects(t, e, "web", 1)
	if r := webObjs[0]; r.Spec.ReadyEndpoints != 5000 || r.Spec.ServingEndpoints != 5000 || len(r.Spec.Endpoints) != 0 || r.Spec.Part != nil {
		t.Errorf("web's record: ready %d serving %d, %d endpoint groups, part %v; want the aggregate only",
			r.Spec.ReadyEndpoints, r.Spec.ServingEndpoints, len(r.Spec.Endpoints), r.Spec.Part)
	}
	recordObjects(t, e, "db", 6) // 5 000 backends at 999 a part (+ the group's port)

	// Scale down: 2 000 fewer pods of each; 500 of web's not ready.
	for i := 30; i < 50; i++ {
		for _, s := range []string{"web", "db"} {
			if err := c1.Delete(context.Background(), &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: s + "-" + strconv.Itoa(i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	setReady(t, c1, "web", 25, 30, false)
	kubetest.Eventually(t, "c2's slices of c1's web weigh 2 500", wantReadyEndpoints(c2, "web", "2500"))
	kubetest.Eventually(t, "c2 lists 3 000 pods of c1's db", wantPods(c2, "db", 3000))
	kubetest.Eventually(t, "db's record: 4 objects, the previous revision's parts gone", func() error {
		_, err := recordObjectsErr(e, "db", 4)
		return err
	})
	if r := recordObjects(t, e, "web", 1)[0]; r.Spec.ReadyEndpoints != 2500 || r.Spec.ServingEndpoints != 2500 {
		t.Errorf("web's record after scaling down: ready %d serving %d, want 2500 2500", r.Spec.ReadyEndpoints, r.Spec.ServingEndpoints)
	}

	kubetest.Unexport(t, c1, "big", "web")
	kubetest.Unexport(t, c1, "big", "db")
	kubetest.Eventually(t, "every record object of web and db gone", func() error {
		_, errWeb := recordObjectsErr(e, "web", 0)
		_, errDB := recordObjectsErr(e, "db", 0)
		if errWeb != nil {
			return errWeb
		}
		return errDB
	})
	kubetest.Eventually(t, "the imports gone from c2", func() error {
		for _, name := range []string{"web", "db"} {
			if err := gone(c2, &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: name}})(); err != nil {
				return err
			}
		}
		return nil
	})
}

// bigSlices writes n EndpointSlices of 100 ready pods each for svc,
// named <svc>-<i>, pods 10.244.<100·base+i>.<j+1> (inside the test
// tunnels' subnets) with hostnames p-<i>-<j>.
func bigSlices(t *testing.T, c client.Client, svc *corev1.Service, base, n int, targetPort int32) {
	t.Helper()
	for i := range n {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: svc.Name + "-" + strconv.Itoa(i),
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr(svc.Spec.Ports[0].Name), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(targetPort)}},
		}
		for j := range 100 {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.244.%d.%d", 100*base+i, j+1)},
				Hostname:   ptr(fmt.Sprintf("p-%d-%d", i, j)),
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			})
		}
		if err := c.Create(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// setReady sets the readiness (and serving) of every pod of slices
// <name>-<from> .. <name>-<to-1>.
func setReady(t *testing.T, c client.Client, name string, from, to int, ready bool) {
	t.Helper()
	for i := from; i < to; i++ {
		var s discoveryv1.EndpointSlice
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "big", Name: name + "-" + strconv.Itoa(i)}, &s); err != nil {
			t.Fatal(err)
		}
		for j := range s.Endpoints {
			s.Endpoints[j].Conditions.Ready, s.Endpoints[j].Conditions.Serving = ptr(ready), ptr(ready)
		}
		if err := c.Update(context.Background(), &s); err != nil {
			t.Fatal(err)
		}
	}
}

// wantReadyEndpoints checks that c's multi-cluster slices of c1's part of
// name all carry mcs.AnnotationReadyEndpoints = want (the route agent's
// weight of c1's backend).
func wantReadyEndpoints(c client.Client, name, want string) func() error {
	return func() error {
		var list discoveryv1.EndpointSliceList
		if err := c.List(context.Background(), &list, client.InNamespace("big"),
			client.MatchingLabels{mcsv1beta1.LabelServiceName: name, mcsv1beta1.LabelSourceCluster: "c1"}); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("no slices of c1")
		}
		for _, s := range list.Items {
			if got := s.Annotations[mcs.AnnotationReadyEndpoints]; got != want {
				return fmt.Errorf("slice %s: %s=%q, want %q", s.Name, mcs.AnnotationReadyEndpoints, got, want)
			}
			if len(s.Endpoints) != 1 || !*s.Endpoints[0].Conditions.Ready {
				return fmt.Errorf("slice %s: endpoints %v, want c1's ClusterIP, ready", s.Name, s.Endpoints)
			}
		}
		return nil
	}
}

// wantPods checks that c's multi-cluster slices of name list exactly n
// distinct ready pods of c1, each at the address its hostname names.
func wantPods(c client.Client, name string, n int) func() error {
	return func() error {
		var list discoveryv1.EndpointSliceList
		if err := c.List(context.Background(), &list, client.InNamespace("big"),
			client.MatchingLabels{mcsv1beta1.LabelServiceName: name, mcsv1beta1.LabelSourceCluster: "c1"}); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				var i, j int
				if _, err := fmt.Sscanf(*ep.Hostname, "p-%d-%d", &i, &j); err != nil || ep.Addresses[0] != fmt.Sprintf("10.244.%d.%d", 100+i, j+1) {
					return fmt.Errorf("endpoint %s at %v", *ep.Hostname, ep.Addresses)
				}
				if !*ep.Conditions.Ready {
					return fmt.Errorf("endpoint %v in slice %s not ready", ep.Addresses, s.Name)
				}
				if seen[ep.Addresses[0]] {
					return fmt.Errorf("endpoint %v listed twice (slice %s)", ep.Addresses, s.Name)
				}
				seen[ep.Addresses[0]] = true
			}
		}
		if len(seen) != n {
			return fmt.Errorf("%d pods, want %d", len(seen), n)
		}
		return nil
	}
}

// recordObjects returns c1's record objects of big/<name> in the broker,
// the head first, after checking that there are want of them, that they
// form one complete set and that none reaches maxRecordObjectBytes; it
// logs their sizes.
func recordObjects(t *testing.T, e *env, name string, want int) []causewayv1alpha1.ServiceExportRecord {
	t.Helper()
	objs, err := recordObjectsErr(e, name, want)
	if err != nil {
		t.Fatal(err)
	}
	total, largest := 0, 0
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		total, largest = total+len(b), max(largest, len(b))
	}
	t.Logf("%s: %d record objects, %d bytes of JSON, the largest %d bytes", name, len(objs), total, largest)
	if largest >= maxRecordObjectBytes {
		t.Errorf("%s: a record object of %d bytes, want < %d", name, largest, maxRecordObjectBytes)
	}
	return objs
}

func recordObjectsErr(e *env, name string, want int) ([]causewayv1alpha1.ServiceExportRecord, error) {
	var list causewayv1alpha1.ServiceExportRecordList
	if err := e.broker.Client.List(context.Background(), &list, client.InNamespace(broker.Namespace("c1"))); err != nil {
		return nil, err
	}
	var head *causewayv1alpha1.ServiceExportRecord
	var out []causewayv1alpha1.ServiceExportRecord
	parts := map[string]mcs.ExportRecord{}
	for i, r := range list.Items {
		switch {
		case r.Spec.ServiceName != name:
		case r.Name == mcs.RecordName("big", name):
			head = &list.Items[i]
		default:
			out = append(out, r)
			parts[r.Name] = r.Spec
		}
	}
	if head == nil {
		if want == 0 && len(out) == 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: no head, %d other objects, want %d", name, len(out), want)
	}
	out = append([]causewayv1alpha1.ServiceExportRecord{*head}, out...)
	if len(out) != want {
		return nil, fmt.Errorf("%s: %d record objects, want %d", name, len(out), want)
	}
	if _, err := mcs.JoinRecord(head.Spec, parts); err != nil {
		return nil, err
	}
	return out, nil
}
