package kubelet

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Waiting reasons the kubelet reports.
const (
	ReasonContainerCreating = "ContainerCreating"
	ReasonErrImagePull      = "ErrImagePull"
	ReasonInvalidImageName  = "InvalidImageName"
	ReasonCrashLoopBackOff  = "CrashLoopBackOff"
	ReasonCreateContainer   = "CreateContainerError"
	// ReasonCreateContainerConfig: a ConfigMap or Secret key the
	// container's env needs is missing.
	ReasonCreateContainerConfig = "CreateContainerConfigError"
)

// Termination reasons.
const (
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	// ReasonUnknown is reported for an adopted process (started by an
	// earlier kubelet) that exited: the new kubelet is not its parent and
	// cannot observe its exit status.
	ReasonUnknown = "ContainerStatusUnknown"
)

// PodReadyToStartContainers is the condition telling that the pod's
// sandbox (here: namespace, veth, address, cgroup) is set up.
const PodReadyToStartContainers corev1.PodConditionType = "PodReadyToStartContainers"

// restarts tells whether a container that exited with exitCode is
// started again under policy.
func restarts(policy corev1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default: // Always, and the API's default when empty
		return true
	}
}

// everStarted tells whether a container status shows a process that ran
// at some point.
func everStarted(s corev1.ContainerStatus) bool {
	return s.State.Running != nil || s.State.Terminated != nil || s.RestartCount > 0 || s.LastTerminationState.Terminated != nil
}

// podPhase derives the phase from the container statuses (no init
// containers): Pending until every container ran once; Succeeded or Failed
// when all have terminated for good (restartPolicy decides which exits are
// final); Running otherwise.
func podPhase(statuses []corev1.ContainerStatus) corev1.PodPhase {
	if len(statuses) == 0 {
		return corev1.PodPending
	}
	allTerminated, anyFailed := true, false
	for _, s := range statuses {
		if !everStarted(s) {
			return corev1.PodPending
		}
		if s.State.Terminated == nil {
			allTerminated = false
			continue
		}
		if s.State.Terminated.ExitCode != 0 {
			anyFailed = true
		}
	}
	switch {
	case !allTerminated:
		return corev1.PodRunning
	case anyFailed:
		return corev1.PodFailed
	default:
		return corev1.PodSucceeded
	}
}

// podConditions returns the conditions the kubelet owns, without times.
func podConditions(sandboxReady bool, phase corev1.PodPhase, statuses []corev1.ContainerStatus) []corev1.PodCondition {
	boolStatus := func(b bool) corev1.ConditionStatus {
		if b {
			return corev1.ConditionTrue
		}
		return corev1.ConditionFalse
	}
	var unready []string
	for _, s := range statuses {
		if !s.Ready {
			unready = append(unready, s.Name)
		}
	}
	ready := len(unready) == 0 && len(statuses) > 0
	readyCond := func(t corev1.PodConditionType) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, Status: boolStatus(ready)}
		switch {
		case phase == corev1.PodSucceeded || phase == corev1.PodFailed:
			c.Status, c.Reason = corev1.ConditionFalse, "PodCompleted"
		case !ready:
			c.Reason = "ContainersNotReady"
			c.Message = fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
		}
		return c
	}
	return []corev1.PodCondition{
		{Type: PodReadyToStartContainers, Status: boolStatus(sandboxReady)},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
		readyCond(corev1.ContainersReady),
		readyCond(corev1.PodReady),
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
	}
}

// mergeConditions returns have with every condition of want set: a
// condition keeps its lastTransitionTime while its status stays, gets now
// when it changes; conditions of other types (owned by other components)
// are kept as they are. The scheduler's PodScheduled is kept if present.
func mergeConditions(have, want []corev1.PodCondition, now metav1.Time) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(have)+len(want))
	index := map[corev1.PodConditionType]int{}
	for _, c := range have {
		index[c.Type] = len(out)
		out = append(out, c)
	}
	for _, w := range want {
		i, ok := index[w.Type]
		if !ok {
			w.LastTransitionTime = now
			index[w.Type] = len(out)
			out = append(out, w)
			continue
		}
		if w.Type == corev1.PodScheduled {
			continue
		}
		old := out[i]
		if old.Status == w.Status {
			w.LastTransitionTime = old.LastTransitionTime
			w.LastProbeTime = old.LastProbeTime
		} else {
			w.LastTransitionTime = now
		}
		out[i] = w
	}
	return out
}

// ownedEqual compares the status fields the kubelet writes.
func ownedEqual(a, b *corev1.PodStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Phase == b.Phase &&
		a.HostIP == b.HostIP && a.PodIP == b.PodIP &&
		equality.Semantic.DeepEqual(a.HostIPs, b.HostIPs) &&
		equality.Semantic.DeepEqual(a.PodIPs, b.PodIPs) &&
		equality.Semantic.DeepEqual(a.StartTime, b.StartTime) &&
		equality.Semantic.DeepEqual(a.Conditions, b.Conditions) &&
		equality.Semantic.DeepEqual(a.ContainerStatuses, b.ContainerStatuses)
}
