package e2e

import (
	"context"
	"time"

	"helm.sh/helm/v4/pkg/strvals"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/install"
	"github.com/causeway-net/causeway/pkg/kube"
)

// upgradeTag is the image tag of TestFaults' upgrade: every Pod
// template changes, as with `helm upgrade --set image.tag=…` (the lab
// runs the same binaries whatever the tag).
const upgradeTag = "upgrade-test"

// upgrade applies the chart to cluster with the lab's values and the
// helm --set values set, and waits until every workload has rolled out.
func (l *Lab) upgrade(ctx context.Context, st *lab.State, cluster string, set ...string) {
	l.t.Helper()
	c, ok := st.Topology.Cluster(cluster)
	if !ok {
		l.t.Fatalf("no cluster %s", cluster)
	}
	values := st.ChartValues(c)
	for _, kv := range set {
		if err := strvals.ParseInto(kv, values); err != nil {
			l.t.Fatalf("--set %s: %v", kv, err)
		}
	}
	objs, err := chart.Render(values)
	if err != nil {
		l.t.Fatalf("%s: render the chart: %v", cluster, err)
	}
	rc, err := st.RESTConfig(cluster)
	if err != nil {
		l.t.Fatal(err)
	}
	cl := l.Client(cluster)
	if err := install.Apply(ctx, rc, cl, objs); err != nil {
		l.t.Fatalf("%s: apply the chart with %v: %v", cluster, set, err)
	}
	if err := install.WaitReady(ctx, cl, objs, 5*time.Minute, func(s string) { l.t.Logf("%s: %s", cluster, s) }); err != nil {
		l.t.Fatalf("%s: after applying the chart with %v: %v", cluster, set, err)
	}
}

// causewayPods are the Pods of Causeway's workloads in cluster (not
// being deleted).
func (l *Lab) causewayPods(ctx context.Context, cluster string) []corev1.Pod {
	l.t.Helper()
	pods := &corev1.PodList{}
	if err := l.Client(cluster).List(ctx, pods, client.InNamespace(kube.Namespace), client.MatchingLabels{"app.kubernetes.io/part-of": "causeway"}); err != nil {
		l.t.Fatalf("%s: list Causeway's Pods: %v", cluster, err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}
