package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// TestGatewayFailover runs a lab with two gateway candidates per cluster,
// kills c1's active gateway (SIGKILL: no lease release) under a ping from
// c3 to a c1 pod, and checks the passive candidate takes over and traffic
// flows again. The gap is reported, not asserted (shared machines).
func TestGatewayFailover(t *testing.T) {
	l := StartLab(t, "--gateways", "2")
	ctx := context.Background()
	pods := &corev1.PodList{}
	if err := l.Client("c1").List(ctx, pods, client.InNamespace("demo"), client.MatchingLabels{"app": "whereami"}); err != nil || len(pods.Items) == 0 {
		t.Fatalf("c1 whereami pods: %v", err)
	}
	target := pods.Items[0]
	l.curlWhereami("c3/demo/client", "http://"+target.Status.PodIP+":8080", []string{target.Name}, 60)

	active := l.activeGateway(ctx, "c1")
	unit := "c1/" + active + "/gateway"
	pid := l.unitPID(unit)

	const interval, count = 20 * time.Millisecond, 500
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := l.Exec("c3/demo/client", "ping", "-i", "0.02", "-c", strconv.Itoa(count), "-W", "1", target.Status.PodIP)
		done <- result{out, err}
	}()
	time.Sleep(2 * time.Second)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (pid %d): %v", unit, pid, err)
	}
	res := <-done
	m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(res.out)
	if m == nil {
		t.Fatalf("ping: %v\n%s", res.err, res.out)
	}
	sent, _ := strconv.Atoi(m[1])
	got, _ := strconv.Atoi(m[2])
	t.Logf("FIGURE gateway failover (SIGKILL of the active, lab, WireGuard): %d of %d pings lost at %v intervals ≈ %v gap",
		sent-got, sent, interval, time.Duration(sent-got)*interval)

	if now := l.activeGateway(ctx, "c1"); now == active {
		t.Errorf("c1's active gateway is still %s after its process was killed", now)
	}
	// Traffic flows through the new active gateway.
	l.curlWhereami("c3/demo/client", "http://"+target.Status.PodIP+":8080", []string{target.Name}, 60)
}

// activeGateway waits for exactly one active gateway candidate in cluster
// and returns its node.
func (l *Lab) activeGateway(ctx context.Context, cluster string) string {
	l.t.Helper()
	var node string
	waitFor(l.t, "one active gateway in "+cluster, func() error {
		gws := &v1alpha1.GatewayList{}
		if err := l.Client(cluster).List(ctx, gws, client.InNamespace("causeway-system")); err != nil {
			return err
		}
		var active []string
		for _, g := range gws.Items {
			if g.Status.HAStatus == v1alpha1.HAStatusActive {
				active = append(active, g.Name)
			}
		}
		if len(active) != 1 {
			return fmt.Errorf("active candidates %v of %d", active, len(gws.Items))
		}
		node = active[0]
		return nil
	})
	return node
}
