package kubelet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/netlab"
)

// worker owns one pod (by namespace/name): its sandbox, processes, probes
// and status. Only its goroutine touches its fields; process watchers and
// probers report through events.
type worker struct {
	k                    *Kubelet
	key, namespace, name string
	ctx                  context.Context
	cancel               context.CancelFunc
	wakeCh               chan struct{}
	events               chan event

	state   *podState // nil until the pod is first seen (or loaded)
	adopted bool      // state came from disk: adopt, do not reset
	dirty   bool      // state needs saving

	sandboxReady bool
	terminal     bool // finished for good: processes and sandbox gone
	cleaned      bool // torn down after deletion
	containers   map[string]*ctr
	lastStatus   *corev1.PodStatus
	vols         map[string]string // volume name → host path (syncVolumes)
	tokens       map[string]token  // "<volume>/<path>" → ServiceAccount token
}

// ctr is a container's runtime state.
type ctr struct {
	gen          int // increments per process
	running      bool
	pid          int
	ready        bool
	adoptChecked bool
	stopProbe    context.CancelFunc
	// waiting reason and message while no process could be started
	waitReason, waitMessage string
	failures                int
	nextStart               time.Time
}

type event struct {
	container string
	gen       int
	exit      *termination
	ready     *bool
	unhealthy bool // the liveness probe failed
	kill      bool // the grace period after a liveness failure is over
}

func (w *worker) wake() {
	select {
	case w.wakeCh <- struct{}{}:
	default:
	}
}

// send delivers an event unless the worker is gone.
func (w *worker) send(ev event) {
	select {
	case w.events <- ev:
	case <-w.ctx.Done():
	}
}

func (w *worker) run() {
	defer w.k.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-w.ctx.Done():
			w.stopProbers()
			w.save()
			return
		case <-w.wakeCh:
		case ev := <-w.events:
			w.apply(ev)
		case <-timer.C:
		}
		w.drain()
		done, next := w.sync()
		w.save()
		if done && w.k.finish(w) {
			return
		}
		timer.Reset(next)
	}
}

func (w *worker) drain() {
	for {
		select {
		case ev := <-w.events:
			w.apply(ev)
		default:
			return
		}
	}
}

func (w *worker) rec(name string) *containerRecord {
	r := w.state.Containers[name]
	if r == nil {
		r = &containerRecord{}
		w.state.Containers[name] = r
	}
	return r
}

func (w *worker) apply(ev event) {
	c := w.containers[ev.container]
	if c == nil || ev.gen != c.gen || w.state == nil {
		return
	}
	if ev.exit != nil && c.running {
		c.running, c.ready, c.pid = false, false, 0
		if c.stopProbe != nil {
			c.stopProbe()
		}
		r := w.rec(ev.container)
		r.Pid, r.StartTicks = 0, 0
		r.Exited = ev.exit
		w.dirty = true
		ran := ev.exit.FinishedAt.Sub(ev.exit.StartedAt)
		c.nextStart = time.Now().Add(crashBackoff(r.RestartCount, ran))
		w.k.log.Info("container exited", "pod", w.key, "container", ev.container, "exitCode", ev.exit.ExitCode, "reason", ev.exit.Reason)
	}
	if ev.ready != nil && c.running {
		c.ready = *ev.ready
	}
	if ev.unhealthy && c.running {
		w.killUnhealthy(ev.container, c)
	}
	if ev.kill && c.running {
		_ = unix.Kill(-c.pid, unix.SIGKILL)
	}
}

// killUnhealthy stops a container whose liveness probe failed: SIGTERM to
// its process group, SIGKILL after the pod's grace period; its exit then
// restarts it per restartPolicy.
func (w *worker) killUnhealthy(name string, c *ctr) {
	pod, err := w.k.pods.Pods(w.namespace).Get(w.name)
	if err != nil {
		return
	}
	w.k.log.Info("liveness probe failed; killing the container", "pod", w.key, "container", name)
	w.k.recorder.Eventf(pod, corev1.EventTypeWarning, "Unhealthy", "Liveness probe failed; container %s will be restarted", name)
	if c.stopProbe != nil {
		c.stopProbe()
		c.stopProbe = nil
	}
	pid, gen := c.pid, c.gen
	if err := unix.Kill(-pid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		w.k.log.Warn("signal container", "pod", w.key, "pid", pid, "err", err)
	}
	grace := gracePeriod(pod)
	go func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-w.ctx.Done():
		case <-t.C:
			// Still the same process (the worker's view is its own;
			// a signal to a gone group just fails).
			w.send(event{container: name, gen: gen, kill: true})
		}
	}()
}

// crashBackoff is the delay before restarting a container that exited:
// 1 s doubling per restart up to 30 s, back to 1 s after a run of a minute.
func crashBackoff(restarts int32, ran time.Duration) time.Duration {
	if ran > time.Minute {
		return time.Second
	}
	return min(time.Second<<min(restarts, 5), 30*time.Second)
}

func (w *worker) save() {
	if !w.dirty || w.state == nil {
		return
	}
	if err := saveState(w.k.podDir(w.namespace, w.name), w.state); err != nil {
		w.k.log.Warn("save pod state", "pod", w.key, "err", err)
		return
	}
	w.dirty = false
}

func (w *worker) netlabPod() netlab.Pod {
	p := netlab.Pod{Cluster: w.k.cfg.Cluster.Name, Node: w.k.cfg.Node.Name, Namespace: w.namespace, Name: w.name}
	if w.state != nil && !w.state.HostNetwork {
		p.IP, _ = parseAddr(w.state.IP)
		p.IP6 = w.k.cfg.Node.PodIP6(p.IP)
	}
	return p
}

// sync reconciles the pod; it returns whether the worker is finished and
// when to sync again at the latest.
func (w *worker) sync() (bool, time.Duration) {
	k := w.k
	resync := k.cfg.ResyncPeriod
	pod, err := k.pods.Pods(w.namespace).Get(w.name)
	if err != nil && !apierrors.IsNotFound(err) {
		k.log.Warn("get pod from cache", "pod", w.key, "err", err)
		return false, resync
	}
	if apierrors.IsNotFound(err) {
		// Gone from the API (deleted by us or force-deleted): make
		// sure nothing is left.
		if !w.cleaned {
			w.cleanup(2 * time.Second)
		}
		return true, resync
	}
	if w.state != nil && w.state.UID != "" && w.state.UID != pod.UID {
		k.log.Info("pod replaced by a new one of the same name", "pod", w.key)
		w.cleanup(2 * time.Second)
	}
	if pod.DeletionTimestamp != nil {
		if !w.cleaned {
			w.cleanup(gracePeriod(pod))
		}
		err := k.cfg.Client.CoreV1().Pods(w.namespace).Delete(w.ctx, w.name, metav1.DeleteOptions{
			GracePeriodSeconds: ptrTo(int64(0)),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			k.log.Warn("delete pod", "pod", w.key, "err", err)
		}
		return false, resync
	}
	if w.cleaned {
		// A new pod after a cleanup: start afresh.
		w.cleaned, w.terminal, w.state, w.adopted = false, false, nil, false
		w.containers = map[string]*ctr{}
		w.lastStatus = nil
		w.tokens = map[string]token{}
	}
	if !w.terminal && (pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed) {
		// Finished (maybe under an earlier kubelet): never run again.
		w.stopAll(0)
		w.teardownSandbox()
		w.terminal = true
	}
	if w.terminal {
		return false, resync
	}
	if w.state == nil || w.state.UID == "" {
		// Nothing known of this pod: clear whatever an earlier
		// kubelet may have left under its name, then start afresh.
		if err := k.cfg.Host.DeletePod(w.netlabPod()); err != nil {
			k.log.Warn("clear stale pod sandbox", "pod", w.key, "err", err)
		}
		w.state = &podState{Namespace: w.namespace, Name: w.name, Containers: map[string]*containerRecord{}}
		w.adopted = false
	}
	if w.state.UID == "" {
		w.state.UID, w.state.HostNetwork = pod.UID, pod.Spec.HostNetwork
		w.dirty = true
	}
	next := resync
	if !w.sandboxReady {
		if err := w.ensureSandbox(pod); err != nil {
			k.log.Warn("pod sandbox", "pod", w.key, "err", err)
			for _, c := range pod.Spec.Containers {
				cc := w.ctr(c.Name)
				cc.waitReason, cc.waitMessage = ReasonContainerCreating, err.Error()
			}
			w.writeStatus(pod)
			return false, 2 * time.Second
		}
	}
	vols, err := w.syncVolumes(pod)
	if err != nil {
		k.log.Warn("pod volumes", "pod", w.key, "err", err)
		if w.vols == nil {
			// Nothing can start without its volumes.
			for _, spec := range pod.Spec.Containers {
				if c := w.ctr(spec.Name); !c.running {
					if c.waitReason != ReasonCreateContainerConfig {
						k.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonCreateContainerConfig, "%v", err)
					}
					c.waitReason, c.waitMessage = ReasonCreateContainerConfig, err.Error()
				}
			}
			w.writeStatus(pod)
			return false, 2 * time.Second
		}
	} else {
		w.vols = vols
	}
	now := time.Now()
	for _, spec := range pod.Spec.Containers {
		c := w.ctr(spec.Name)
		r := w.rec(spec.Name)
		if !c.adoptChecked {
			c.adoptChecked = true
			w.adopt(pod, spec, c, r)
		}
		if c.running {
			continue
		}
		if r.Exited != nil && !restarts(pod.Spec.RestartPolicy, r.Exited.ExitCode) {
			continue
		}
		if now.Before(c.nextStart) {
			next = min(next, c.nextStart.Sub(now))
			continue
		}
		w.start(pod, spec, c, r)
		if !c.running {
			next = min(next, time.Until(c.nextStart))
		}
	}
	st := w.writeStatus(pod)
	if st != nil && (st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed) {
		k.log.Info("pod finished", "pod", w.key, "phase", st.Phase)
		w.stopProbers()
		w.teardownSandbox()
		w.terminal = true
	}
	return false, max(next, 10*time.Millisecond)
}

func (w *worker) ctr(name string) *ctr {
	c := w.containers[name]
	if c == nil {
		c = &ctr{}
		w.containers[name] = c
	}
	return c
}

func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	default:
		return 30 * time.Second
	}
}

// ensureSandbox gives the pod its address, namespace, veth and cgroup
// (hostNetwork pods: only the cgroup, made when the first process starts).
func (w *worker) ensureSandbox(pod *corev1.Pod) error {
	k := w.k
	if !w.state.HostNetwork {
		ip, err := k.allocateIP(w.key, pod)
		if err != nil {
			return fmt.Errorf("allocate pod IP: %w", err)
		}
		if w.state.IP != ip.String() {
			w.state.IP = ip.String()
			w.dirty = true
		}
		if err := k.cfg.Host.EnsurePod(w.netlabPod()); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(k.podDir(w.namespace, w.name), 0o755); err != nil {
		return err
	}
	w.sandboxReady = true
	w.dirty = true
	return nil
}

// teardownSandbox kills what is left in the pod's cgroup and namespace
// and removes them; the pod's address is free again.
func (w *worker) teardownSandbox() {
	if err := w.k.cfg.Host.DeletePod(w.netlabPod()); err != nil {
		w.k.log.Warn("remove pod sandbox", "pod", w.key, "err", err)
	}
	w.k.releaseIP(w.key)
	w.sandboxReady = false
}

// cleanup stops the pod's processes (SIGTERM, then SIGKILL after grace),
// removes its sandbox and its state directory.
func (w *worker) cleanup(grace time.Duration) {
	w.stopAll(grace)
	w.teardownSandbox()
	if err := os.RemoveAll(w.k.podDir(w.namespace, w.name)); err != nil {
		w.k.log.Warn("remove pod state", "pod", w.key, "err", err)
	}
	w.k.log.Info("pod cleaned up", "pod", w.key)
	w.state, w.dirty, w.cleaned = nil, false, true
	w.containers = map[string]*ctr{}
}

// stopAll signals every running container's process group with SIGTERM,
// waits up to grace for them to exit and SIGKILLs the rest.
func (w *worker) stopAll(grace time.Duration) {
	w.stopProbers()
	running := func() bool {
		for _, c := range w.containers {
			if c.running {
				return true
			}
		}
		return false
	}
	signal := func(sig unix.Signal) {
		for _, c := range w.containers {
			if c.running && c.pid > 0 {
				if err := unix.Kill(-c.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
					w.k.log.Warn("signal container", "pod", w.key, "pid", c.pid, "signal", sig, "err", err)
				}
			}
		}
	}
	if !running() {
		return
	}
	signal(unix.SIGTERM)
	w.waitExits(grace, running)
	if running() {
		signal(unix.SIGKILL)
		w.waitExits(5*time.Second, running)
	}
}

func (w *worker) waitExits(d time.Duration, running func() bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for running() {
		select {
		case ev := <-w.events:
			w.apply(ev)
		case <-deadline.C:
			return
		case <-w.ctx.Done():
			return
		}
	}
}

func (w *worker) stopProbers() {
	for _, c := range w.containers {
		if c.stopProbe != nil {
			c.stopProbe()
			c.stopProbe = nil
		}
	}
}

// adopt takes over a process an earlier kubelet started for the
// container, if it still runs; one that is gone counts as exited with an
// unknown status.
func (w *worker) adopt(pod *corev1.Pod, spec corev1.Container, c *ctr, r *containerRecord) {
	if !w.adopted || r.Pid <= 0 {
		return
	}
	if processAlive(r.Pid, r.StartTicks) {
		c.gen++
		c.running, c.pid = true, r.Pid
		gen, name, pid := c.gen, spec.Name, r.Pid
		startedAt := r.StartedAt
		go func() {
			if err := waitPidfd(w.ctx, pid); err != nil {
				return // worker stopping, or cannot watch
			}
			w.send(event{container: name, gen: gen, exit: unknownExit(pid, startedAt)})
		}()
		w.startProber(pod, spec, c)
		w.k.log.Info("adopted container process", "pod", w.key, "container", spec.Name, "pid", pid)
		return
	}
	r.Exited = unknownExit(r.Pid, r.StartedAt)
	r.Pid, r.StartTicks = 0, 0
	w.dirty = true
}

func unknownExit(pid int, startedAt time.Time) *termination {
	return &termination{
		ExitCode:    137,
		Reason:      ReasonUnknown,
		Message:     "the process exited while adopted from an earlier kubelet; its exit status is not observable",
		StartedAt:   startedAt,
		FinishedAt:  time.Now().Truncate(time.Second),
		ContainerID: containerID(pid),
	}
}

// containerID is the ContainerID of a container the lab kubelet runs:
// lab://<pid of its process>.
func containerID(pid int) string { return "lab://" + strconv.Itoa(pid) }

// ContainerPID is the process of a container the lab kubelet runs, from
// its ContainerID; false when id is not one of the lab kubelet's.
func ContainerPID(id string) (int, bool) {
	s, ok := strings.CutPrefix(id, "lab://")
	pid, err := strconv.Atoi(s)
	return pid, ok && err == nil && pid > 0
}

// start runs a container's process.
func (w *worker) start(pod *corev1.Pod, spec corev1.Container, c *ctr, r *containerRecord) {
	k := w.k
	backoff := func(reason string, err error) {
		c.waitReason, c.waitMessage = reason, err.Error()
		c.nextStart = time.Now().Add(min(time.Second<<min(c.failures, 5), 30*time.Second))
		level := slog.LevelDebug
		if c.failures == 0 {
			level = slog.LevelWarn
			k.recorder.Eventf(pod, corev1.EventTypeWarning, reason, "container %s: %v", spec.Name, err)
		}
		c.failures++
		k.log.Log(w.ctx, level, "cannot start container", "pod", w.key, "container", spec.Name, "reason", reason, "err", err)
	}
	if strings.TrimSpace(spec.Image) == "" {
		backoff(ReasonInvalidImageName, errors.New("container has no image"))
		return
	}
	podIP := w.podIP()
	var ports []int32
	for _, p := range spec.Ports {
		ports = append(ports, p.ContainerPort)
	}
	env, err := k.env(w.ctx, pod, spec, podIP)
	if err != nil {
		backoff(ReasonCreateContainerConfig, err)
		return
	}
	vars := envMap(env)
	cmd, err := k.cfg.Apps.Command(spec.Image, apps.Container{
		Cluster:    k.cfg.Cluster.Name,
		Node:       k.cfg.Node.Name,
		Namespace:  pod.Namespace,
		Pod:        pod.Name,
		PodIP:      podIP,
		Ports:      ports,
		Command:    expandAll(spec.Command, vars),
		Args:       expandAll(spec.Args, vars),
		Env:        env,
		WorkingDir: spec.WorkingDir,
	})
	if errors.Is(err, apps.ErrUnknownImage) {
		backoff(ReasonErrImagePull, err)
		return
	}
	if err != nil {
		backoff(ReasonCreateContainer, err)
		return
	}
	// The pod's resolv.conf and hosts first: a volume mounted at the
	// same path wins.
	mounts, err := w.podNameFiles(pod)
	if err != nil {
		backoff(ReasonCreateContainerConfig, err)
		return
	}
	vmounts, err := containerMounts(spec, w.vols)
	if err != nil {
		backoff(ReasonCreateContainerConfig, err)
		return
	}
	mounts = append(mounts, vmounts...)
	if len(mounts) > 0 {
		// A mount namespace of its own with the volumes (and the pod's
		// resolv.conf and hosts) bound in. Slave
		// propagation: what the host unmounts goes away here too (a
		// mount kept here would keep, e.g., a deleted pod's network
		// namespace alive), and nothing mounted here reaches the host.
		cmd.Args = append([]string{"--mount", "--propagation", "slave", "--", "sh", "-c", mountScript(mounts), "sh", cmd.Path}, cmd.Args...)
		cmd.Path = k.unshare
	}
	np := w.netlabPod()
	netns := k.cfg.Host.Names().PodOf(np)
	if w.state.HostNetwork {
		netns = k.nodeNS
	}
	proc, err := k.cfg.Host.Start(netlab.Process{
		Netns:   netns,
		Cgroup:  k.cfg.Host.Cgroups().PodOf(np),
		Path:    cmd.Path,
		Args:    cmd.Args,
		Env:     append(os.Environ(), cmd.Env...),
		Dir:     cmd.Dir,
		LogPath: ContainerLog(k.cfg.StateDir, w.namespace, w.name, spec.Name),
		Setsid:  true,
	})
	if err != nil {
		backoff(ReasonCreateContainer, err)
		return
	}
	pid := proc.Process.Pid
	startedAt := time.Now().Truncate(time.Second)
	if r.Exited != nil {
		r.RestartCount++
		r.Last = r.Exited
		r.Exited = nil
	}
	ticks, _ := processStartTicks(pid)
	r.Pid, r.StartTicks, r.StartedAt = pid, ticks, startedAt
	w.dirty = true
	c.gen++
	c.running, c.pid, c.ready = true, pid, false
	c.waitReason, c.waitMessage, c.failures = "", "", 0
	gen, name := c.gen, spec.Name
	go func() {
		err := proc.Wait()
		w.send(event{container: name, gen: gen, exit: exitOf(proc.ProcessState, err, pid, startedAt)})
	}()
	k.log.Info("started container", "pod", w.key, "container", spec.Name, "pid", pid, "restartCount", r.RestartCount)
	k.recorder.Eventf(pod, corev1.EventTypeNormal, "Started", "Started container %s", spec.Name)
	w.startProber(pod, spec, c)
}

// exitOf turns a wait result into a termination; a death by signal N
// reports exit code 128+N like container runtimes do.
func exitOf(ps *os.ProcessState, waitErr error, pid int, startedAt time.Time) *termination {
	t := &termination{StartedAt: startedAt, FinishedAt: time.Now().Truncate(time.Second), ContainerID: containerID(pid)}
	if ps == nil {
		t.ExitCode, t.Reason, t.Message = 128, ReasonError, fmt.Sprintf("wait: %v", waitErr)
		return t
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Signal = int32(ws.Signal())
		t.ExitCode = 128 + t.Signal
		t.Message = "killed by " + ws.Signal().String()
	} else {
		t.ExitCode = int32(ps.ExitCode())
	}
	if t.ExitCode == 0 {
		t.Reason = ReasonCompleted
	} else {
		t.Reason = ReasonError
	}
	return t
}

func (w *worker) podIP() string {
	if w.state.HostNetwork {
		return w.k.cfg.Node.Address.Addr().String()
	}
	return w.state.IP
}

// podIPs are the pod's addresses, IPv4 first: on dual-stack nodes a pod
// has an IPv6 address too (netlab.Node.PodIP6), a hostNetwork pod the
// node's.
func (w *worker) podIPs() []string {
	if w.state.HostNetwork {
		return w.k.hostIPs()
	}
	ips := []string{w.state.IP}
	if ip, err := parseAddr(w.state.IP); err == nil {
		if ip6 := w.k.cfg.Node.PodIP6(ip); ip6.IsValid() {
			ips = append(ips, ip6.String())
		}
	}
	return ips
}

// containerStatuses reports every container of the spec.
func (w *worker) containerStatuses(pod *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, spec := range pod.Spec.Containers {
		c := w.ctr(spec.Name)
		r := w.rec(spec.Name)
		s := corev1.ContainerStatus{
			Name:         spec.Name,
			Image:        spec.Image,
			ImageID:      apps.ImageName(spec.Image),
			RestartCount: r.RestartCount,
			Ready:        c.running && c.ready,
			Started:      ptrTo(c.running),
		}
		if r.Last != nil {
			s.LastTerminationState.Terminated = r.Last.api()
		}
		switch {
		case c.running:
			s.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(r.StartedAt)}
			s.ContainerID = containerID(c.pid)
		case r.Exited != nil && !restarts(pod.Spec.RestartPolicy, r.Exited.ExitCode):
			s.State.Terminated = r.Exited.api()
			s.ContainerID = r.Exited.ContainerID
		case r.Exited != nil:
			s.LastTerminationState.Terminated = r.Exited.api()
			s.ContainerID = r.Exited.ContainerID
			reason, msg := ReasonCrashLoopBackOff, fmt.Sprintf("back-off restarting failed container %s", spec.Name)
			if c.waitReason != "" {
				reason, msg = c.waitReason, c.waitMessage
			}
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
		case c.waitReason != "":
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: c.waitReason, Message: c.waitMessage}
		default:
			s.State.Waiting = &corev1.ContainerStateWaiting{Reason: ReasonContainerCreating}
		}
		out = append(out, s)
	}
	return out
}

func (t *termination) api() *corev1.ContainerStateTerminated {
	return &corev1.ContainerStateTerminated{
		ExitCode:    t.ExitCode,
		Signal:      t.Signal,
		Reason:      t.Reason,
		Message:     t.Message,
		StartedAt:   metav1.NewTime(t.StartedAt),
		FinishedAt:  metav1.NewTime(t.FinishedAt),
		ContainerID: t.ContainerID,
	}
}

// buildStatus is pod's status with the kubelet's fields set.
func (w *worker) buildStatus(pod *corev1.Pod) *corev1.PodStatus {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st := pod.Status.DeepCopy()
	statuses := w.containerStatuses(pod)
	st.ContainerStatuses = statuses
	st.Phase = podPhase(statuses)
	st.HostIP, st.HostIPs = w.k.cfg.Node.Address.Addr().String(), nil
	for _, ip := range w.k.hostIPs() {
		st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
	}
	if w.sandboxReady {
		st.PodIP, st.PodIPs = w.podIP(), nil
		for _, ip := range w.podIPs() {
			st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	st.Conditions = mergeConditions(st.Conditions, podConditions(w.sandboxReady, st.Phase, statuses), now)
	return st
}

// writeStatus posts the status if the kubelet's fields changed, retrying
// on conflicts with a fresh copy; it returns what it computed.
func (w *worker) writeStatus(pod *corev1.Pod) *corev1.PodStatus {
	want := w.buildStatus(pod)
	if ownedEqual(want, &pod.Status) || (w.lastStatus != nil && ownedEqual(want, w.lastStatus)) {
		return want
	}
	pods := w.k.cfg.Client.CoreV1().Pods(w.namespace)
	cur := pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cur == nil {
			var err error
			if cur, err = pods.Get(w.ctx, w.name, metav1.GetOptions{}); err != nil {
				return err
			}
			if cur.UID != pod.UID {
				return apierrors.NewNotFound(corev1.Resource("pods"), w.name)
			}
		}
		upd := cur.DeepCopy()
		upd.Status = *w.buildStatus(cur)
		want = &upd.Status
		_, err := pods.UpdateStatus(w.ctx, upd, metav1.UpdateOptions{})
		cur = nil
		return err
	})
	if err != nil {
		if !apierrors.IsNotFound(err) && w.ctx.Err() == nil {
			w.k.log.Warn("update pod status", "pod", w.key, "err", err)
		}
		return want
	}
	w.lastStatus = want
	return want
}
