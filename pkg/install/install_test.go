package install

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func pod(name, component, node string, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"c": component}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}},
			ContainerStatuses: []corev1.ContainerStatus{{RestartCount: map[bool]int32{true: 0, false: 3}[ready]}}},
	}
}

// A Pod meets one want at most: per node for a DaemonSet, any node for a
// Deployment's replicas; a Pod being deleted meets none.
func TestNotReady(t *testing.T) {
	ds := labels.SelectorFromSet(labels.Set{"c": "ds"})
	dep := labels.SelectorFromSet(labels.Set{"c": "dep"})
	wants := []want{{"ds", ds, "n0"}, {"ds", ds, "n1"}, {"dep", dep, ""}, {"dep", dep, ""}}
	gone := pod("dep-gone", "dep", "n0", true)
	gone.DeletionTimestamp = &metav1.Time{}
	for _, tc := range []struct {
		pods []corev1.Pod
		want []string
	}{
		{nil, []string{"ds on n0: no Pod", "ds on n1: no Pod", "dep: no Pod", "dep: no Pod"}},
		{[]corev1.Pod{pod("ds-a", "ds", "n0", true), pod("ds-b", "ds", "n1", false), pod("dep-a", "dep", "n1", true), gone},
			[]string{"ds on n1: Pod ds-b Running, 3 restarts", "dep: no Pod"}},
		{[]corev1.Pod{pod("ds-a", "ds", "n0", true), pod("ds-c", "ds", "n0", true), pod("dep-a", "dep", "n1", true), pod("dep-b", "dep", "n0", true)},
			[]string{"ds on n1: no Pod"}},
		{[]corev1.Pod{pod("ds-a", "ds", "n0", true), pod("ds-b", "ds", "n1", true), pod("dep-a", "dep", "n1", true), pod("dep-b", "dep", "n0", true)}, nil},
	} {
		if got := notReady(wants, tc.pods); !slices.Equal(got, tc.want) {
			t.Errorf("pods %d: not ready %q, want %q", len(tc.pods), got, tc.want)
		}
	}
}
