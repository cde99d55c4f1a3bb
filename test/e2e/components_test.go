package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/gateway"
	"github.com/causeway-net/causeway/pkg/lab"
)

// How the fault tests find, stop and watch the restart of the lab's
// processes. Today the control planes and the Causeway daemons are units
// of the lab's supervisor (restarted on exit), CoreDNS is a Pod of the
// lab kubelet (its container's pid is in its containerID, lab://<pid>).
// Tests go through these functions only, so that running the daemons as
// Pods changes daemon() and holdRestarts(), nothing else.

// component is one process of the lab: a supervisor unit, or the first
// container of the one Pod matching labels.
type component struct {
	unit               string // "c1/kube-apiserver", "c3/n1/route-agent"
	cluster, namespace string // a Pod's
	labels             map[string]string
}

// daemon is a Causeway daemon (gateway, route-agent, mcs-controller) of
// one node.
func daemon(cluster, node, name string) component {
	return component{unit: cluster + "/" + node + "/" + name}
}

// controlPlane is a control-plane process (etcd, kube-apiserver) of a
// cluster or of the broker.
func controlPlane(name, bin string) component { return component{unit: name + "/" + bin} }

// coreDNS is a cluster's CoreDNS Pod.
func coreDNS(cluster string) component {
	return component{cluster: cluster, namespace: "kube-system", labels: map[string]string{"k8s-app": "kube-dns"}}
}

func (c component) String() string {
	if c.unit != "" {
		return c.unit
	}
	return fmt.Sprintf("%s/%s/%v", c.cluster, c.namespace, c.labels)
}

// pid waits until c runs steadily and returns its live pid.
func (l *Lab) pid(ctx context.Context, c component) int {
	l.t.Helper()
	if c.unit != "" {
		return l.unitPID(c.unit)
	}
	pid := 0
	waitForWithin(l.t, time.Minute, c.String()+" running and ready", func() error {
		var err error
		pid, err = l.podPID(ctx, c)
		return err
	})
	return pid
}

// podPID is the pid of the first container of c's one Pod, when it is
// ready.
func (l *Lab) podPID(ctx context.Context, c component) (int, error) {
	pods := &corev1.PodList{}
	if err := l.Client(c.cluster).List(ctx, pods, client.InNamespace(c.namespace), client.MatchingLabels(c.labels)); err != nil {
		return 0, err
	}
	if len(pods.Items) != 1 {
		return 0, fmt.Errorf("%d pods, want 1", len(pods.Items))
	}
	p := pods.Items[0]
	if len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
		return 0, fmt.Errorf("pod %s not ready: %+v", p.Name, p.Status.ContainerStatuses)
	}
	id := p.Status.ContainerStatuses[0].ContainerID
	pid, err := strconv.Atoi(strings.TrimPrefix(id, "lab://"))
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0, fmt.Errorf("pod %s: container %q not a live lab process", p.Name, id)
	}
	return pid, nil
}

// waitRestarted waits until c runs again with a pid other than old and
// returns it.
func (l *Lab) waitRestarted(ctx context.Context, c component, old int) int {
	l.t.Helper()
	var pid int
	waitForWithin(l.t, 2*time.Minute, c.String()+" restarted", func() error {
		if pid = l.pid(ctx, c); pid == old {
			return fmt.Errorf("still pid %d", old)
		}
		return nil
	})
	return pid
}

// holdRestarts stops whatever restarts a killed daemon or control-plane
// process (the lab supervisor, SIGSTOP) until the returned function is
// called (also at the end of the test).
func (l *Lab) holdRestarts() (resume func()) {
	l.t.Helper()
	st, err := lab.Load(l.Dir)
	if err != nil {
		l.t.Fatal(err)
	}
	supervisor := st.SupervisorPID()
	if supervisor == 0 {
		l.t.Fatal("lab supervisor not running")
	}
	return l.signalUntil(supervisor, syscall.SIGSTOP, syscall.SIGCONT)
}

// signalUntil sends sig to pid now and then to it when the returned
// function is first called (or the test ends).
func (l *Lab) signalUntil(pid int, sig, then syscall.Signal) func() {
	l.t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		l.t.Fatalf("signal %v to pid %d: %v", sig, pid, err)
	}
	done := false
	undo := func() {
		if !done {
			done = true
			_ = syscall.Kill(pid, then)
		}
	}
	l.t.Cleanup(undo)
	return undo
}

// waitStandby waits until a gateway candidate of cluster other than
// active reports itself passive and runs steadily, and returns its node.
func (l *Lab) waitStandby(ctx context.Context, cluster, active string) string {
	l.t.Helper()
	var standby string
	waitForWithin(l.t, time.Minute, "another "+cluster+" gateway candidate standing by", func() error {
		gws := &v1alpha1.GatewayList{}
		if err := l.Client(cluster).List(ctx, gws, client.InNamespace("causeway-system")); err != nil {
			return err
		}
		for _, g := range gws.Items {
			if g.Name != active && g.Status.HAStatus == v1alpha1.HAStatusPassive {
				standby = g.Name
				return nil
			}
		}
		return fmt.Errorf("no passive candidate besides %s", active)
	})
	l.pid(ctx, daemon(cluster, standby, "gateway"))
	return standby
}

// waitNewActive waits until a candidate other than old holds cluster's
// gateway Lease and reports itself active, and returns its node.
func (l *Lab) waitNewActive(ctx context.Context, cluster, old string) string {
	l.t.Helper()
	c := l.Client(cluster)
	var now string
	waitForWithin(l.t, time.Minute, "another "+cluster+" candidate holding the lease and reporting itself active", func() error {
		lease := &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: gateway.LeaseName}, lease); err != nil {
			return err
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		if holder == "" || holder == old {
			return fmt.Errorf("lease holder %q", holder)
		}
		gw := &v1alpha1.Gateway{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: holder}, gw); err != nil {
			return err
		}
		if gw.Status.HAStatus != v1alpha1.HAStatusActive {
			return fmt.Errorf("lease held by %s, whose Gateway says %q", holder, gw.Status.HAStatus)
		}
		now = holder
		return nil
	})
	return now
}
