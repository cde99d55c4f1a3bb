package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/kube"
)

// How the fault tests find, stop and watch the restart of the lab's
// processes. The control planes are units of the lab's supervisor
// (restarted on exit); the Causeway daemons are Pods of the Helm chart's
// DaemonSets and Deployment and CoreDNS a Pod of the lab's, run by the
// lab kubelets (a container's pid is in its containerID, lab://<pid>;
// the kubelet restarts an exited container). Tests go through these
// functions only.

// component is one process of the lab: a supervisor unit, or the first
// container of the one Pod matching labels (on node, when set).
type component struct {
	unit               string // "c1/kube-apiserver", "c1/broker/etcd"
	cluster, namespace string // a Pod's
	node               string // a Pod's node; "" for any
	labels             map[string]string
}

// daemon is a Causeway daemon (gateway, route-agent, mcs-controller,
// globalnet) of one node: its Pod of the chart's DaemonSet. The MCS and
// globalnet controllers are the Pods of one-replica Deployments, on
// whichever node the scheduler picked: node is ignored for them.
func daemon(cluster, node, name string) component {
	if name == "mcs-controller" || name == "globalnet" {
		node = ""
	}
	return component{cluster: cluster, namespace: kube.Namespace, node: node,
		labels: map[string]string{"app.kubernetes.io/part-of": "causeway", "app.kubernetes.io/component": name}}
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
	return fmt.Sprintf("%s/%s/%s/%v", c.cluster, c.node, c.namespace, c.labels)
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

// pod is c's one Pod (not being deleted).
func (l *Lab) pod(ctx context.Context, c component) (corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := l.Client(c.cluster).List(ctx, pods, client.InNamespace(c.namespace), client.MatchingLabels(c.labels)); err != nil {
		return corev1.Pod{}, err
	}
	var found []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && (c.node == "" || p.Spec.NodeName == c.node) {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return corev1.Pod{}, fmt.Errorf("%d pods, want 1", len(found))
	}
	return found[0], nil
}

// podPID is the pid of the first container of c's one Pod, when it is
// ready.
func (l *Lab) podPID(ctx context.Context, c component) (int, error) {
	p, err := l.pod(ctx, c)
	if err != nil {
		return 0, err
	}
	if len(p.Status.ContainerStatuses) == 0 || !p.Status.ContainerStatuses[0].Ready {
		return 0, fmt.Errorf("pod %s not ready: %+v", p.Name, p.Status.ContainerStatuses)
	}
	id := p.Status.ContainerStatuses[0].ContainerID
	pid, ok := kubelet.ContainerPID(id)
	if !ok || syscall.Kill(pid, 0) != nil {
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

// holdRestarts keeps c from running again once killed, until the
// returned function is called (also at the end of the test): for a
// supervisor unit it freezes the supervisor (SIGSTOP), for a Pod the
// Pod's cgroup (cgroup.freeze), so the kubelet's restart of the
// container stays frozen at its start. c must be running.
func (l *Lab) holdRestarts(ctx context.Context, c component) (resume func()) {
	l.t.Helper()
	if c.unit == "" {
		return l.freezeCgroupOf(l.pid(ctx, c))
	}
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

// freezeCgroupOf freezes the cgroup (v2) of process pid, with whatever
// starts in it later, until the returned function is first called (or
// the test ends). SIGKILL still ends a frozen process.
func (l *Lab) freezeCgroupOf(pid int) func() {
	l.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		l.t.Fatal(err)
	}
	var rel string
	for _, line := range strings.Split(string(b), "\n") {
		if r, ok := strings.CutPrefix(line, "0::"); ok {
			rel = r
		}
	}
	h, err := netlab.NewHost(netlab.Config{Prefix: l.Prefix})
	if err != nil {
		l.t.Fatal(err)
	}
	freeze := filepath.Join(h.Cgroups().Root, rel, "cgroup.freeze")
	if rel == "" {
		l.t.Fatalf("pid %d in no cgroup v2: %q", pid, b)
	}
	if err := os.WriteFile(freeze, []byte("1"), 0); err != nil {
		l.t.Fatalf("freeze the cgroup of pid %d: %v", pid, err)
	}
	done := false
	undo := func() {
		if !done {
			done = true
			_ = os.WriteFile(freeze, []byte("0"), 0)
		}
	}
	l.t.Cleanup(undo)
	return undo
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
		if err := c.Get(ctx, client.ObjectKey{Namespace: "causeway-system", Name: kube.GatewayLease}, lease); err != nil {
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
