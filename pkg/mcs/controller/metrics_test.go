package controller

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestQueueDepth: causeway_mcs_queue_depth reads the controller's work
// queue (0 before it runs; one per distinct Service waiting, 0 again
// once taken).
func TestQueueDepth(t *testing.T) {
	var r requeuer
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, r.depth)
	depth := func() float64 { return testutil.ToFloat64(m.queueDepth) }
	if d := depth(); d != 0 {
		t.Fatalf("depth %v before the controller runs, want 0", d)
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := r.Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "a"} {
		r.add(types.NamespacedName{Namespace: "ns", Name: name})
	}
	if d := depth(); d != 2 {
		t.Fatalf("depth %v with two Services queued, want 2", d)
	}
	item, _ := q.Get()
	q.Done(item)
	if d := depth(); d != 1 {
		t.Errorf("depth %v after one was taken, want 1", d)
	}
	if n, err := testutil.GatherAndCount(reg, "causeway_mcs_queue_depth"); err != nil || n != 1 {
		t.Errorf("causeway_mcs_queue_depth: %d series, %v; want 1", n, err)
	}
}
