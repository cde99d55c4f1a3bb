package kubelet

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func waiting(name, reason string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}
}

func terminated(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

func TestPodPhase(t *testing.T) {
	crashLoop := waiting("b", ReasonCrashLoopBackOff)
	crashLoop.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1}
	for _, tc := range []struct {
		name     string
		statuses []corev1.ContainerStatus
		want     corev1.PodPhase
	}{
		{"no containers", nil, corev1.PodPending},
		{"creating", []corev1.ContainerStatus{waiting("a", ReasonContainerCreating)}, corev1.PodPending},
		{"one not yet started", []corev1.ContainerStatus{running("a"), waiting("b", ReasonErrImagePull)}, corev1.PodPending},
		{"running", []corev1.ContainerStatus{running("a"), running("b")}, corev1.PodRunning},
		{"crash loop counts as running", []corev1.ContainerStatus{running("a"), crashLoop}, corev1.PodRunning},
		{"only crash loop", []corev1.ContainerStatus{crashLoop}, corev1.PodRunning},
		{"one done, one running", []corev1.ContainerStatus{terminated("a", 0), running("b")}, corev1.PodRunning},
		{"all done", []corev1.ContainerStatus{terminated("a", 0), terminated("b", 0)}, corev1.PodSucceeded},
		{"one failed", []corev1.ContainerStatus{terminated("a", 0), terminated("b", 2)}, corev1.PodFailed},
	} {
		if got := podPhase(tc.statuses); got != tc.want {
			t.Errorf("%s: phase %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestRestarts(t *testing.T) {
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		code   int32
		want   bool
	}{
		{corev1.RestartPolicyAlways, 0, true},
		{corev1.RestartPolicyAlways, 1, true},
		{"", 0, true},
		{corev1.RestartPolicyOnFailure, 0, false},
		{corev1.RestartPolicyOnFailure, 137, true},
		{corev1.RestartPolicyNever, 1, false},
	} {
		if got := restarts(tc.policy, tc.code); got != tc.want {
			t.Errorf("restarts(%q, %d) = %v", tc.policy, tc.code, got)
		}
	}
	if crashBackoff(0, time.Second) != time.Second || crashBackoff(3, time.Second) != 8*time.Second ||
		crashBackoff(40, time.Second) != 30*time.Second || crashBackoff(40, 2*time.Minute) != time.Second {
		t.Error("crash backoff is not 1 s doubling to 30 s, reset after a long run")
	}
}

func TestPodConditions(t *testing.T) {
	get := func(cs []corev1.PodCondition, ty corev1.PodConditionType) corev1.PodCondition {
		for _, c := range cs {
			if c.Type == ty {
				return c
			}
		}
		t.Fatalf("no condition %s", ty)
		return corev1.PodCondition{}
	}
	notReady := running("b")
	cs := podConditions(true, corev1.PodRunning, []corev1.ContainerStatus{{Name: "a", Ready: true}, notReady})
	if c := get(cs, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [b]" {
		t.Errorf("Ready %+v", c)
	}
	if c := get(cs, PodReadyToStartContainers); c.Status != corev1.ConditionTrue {
		t.Errorf("PodReadyToStartContainers %+v", c)
	}
	cs = podConditions(true, corev1.PodRunning, []corev1.ContainerStatus{{Name: "a", Ready: true}})
	if get(cs, corev1.PodReady).Status != corev1.ConditionTrue || get(cs, corev1.ContainersReady).Status != corev1.ConditionTrue {
		t.Errorf("all ready: %+v", cs)
	}
	cs = podConditions(false, corev1.PodSucceeded, []corev1.ContainerStatus{{Name: "a"}})
	if c := get(cs, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != "PodCompleted" {
		t.Errorf("finished: %+v", c)
	}
}

func TestMergeConditions(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	have := []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t0},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: t0},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t0},
		{Type: "DisruptionTarget", Status: corev1.ConditionTrue, LastTransitionTime: t0},
	}
	want := []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
	}
	got := mergeConditions(have, want, t1)
	byType := map[corev1.PodConditionType]corev1.PodCondition{}
	for _, c := range got {
		byType[c.Type] = c
	}
	if len(got) != 5 {
		t.Fatalf("got %d conditions: %+v", len(got), got)
	}
	if c := byType[corev1.PodReady]; c.Status != corev1.ConditionTrue || !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("changed condition: %+v", c)
	}
	if c := byType[corev1.ContainersReady]; !c.LastTransitionTime.Equal(&t0) {
		t.Errorf("unchanged condition got a new transition time: %+v", c)
	}
	if c := byType["DisruptionTarget"]; c.Status != corev1.ConditionTrue {
		t.Errorf("foreign condition lost: %+v", got)
	}
	if c := byType[corev1.PodInitialized]; !c.LastTransitionTime.Equal(&t1) {
		t.Errorf("new condition: %+v", c)
	}
}

func TestOwnedEqualIgnoresForeignFields(t *testing.T) {
	a := &corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.2", QOSClass: corev1.PodQOSBestEffort}
	b := a.DeepCopy()
	b.QOSClass = corev1.PodQOSBurstable
	if !ownedEqual(a, b) {
		t.Error("QOS class is not the kubelet's field")
	}
	b.PodIP = "10.244.0.3"
	if ownedEqual(a, b) {
		t.Error("pod IP difference not seen")
	}
}

func TestNodeConditionsKeepTransitionTimes(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	have := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: t0, LastHeartbeatTime: t0}}
	got := mergeNodeConditions(have, nodeConditions(), t1)
	if len(got) != len(nodeConditions()) {
		t.Fatalf("%d conditions", len(got))
	}
	for _, c := range got {
		if !c.LastHeartbeatTime.Equal(&t1) {
			t.Errorf("%s: heartbeat %v", c.Type, c.LastHeartbeatTime)
		}
		if c.Type == corev1.NodeReady && !c.LastTransitionTime.Equal(&t0) {
			t.Errorf("Ready stayed True but its transition time moved")
		}
	}
}

func TestStateRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := &podState{Namespace: "ns", Name: "web.v1", UID: "u1", IP: "10.244.0.2", Containers: map[string]*containerRecord{
		"app": {Pid: 42, StartTicks: 7, RestartCount: 2, StartedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
			Last: &termination{ExitCode: 137, Reason: ReasonError}},
	}}
	if err := saveState(filepath.Join(dir, podDirName(s.Namespace, s.Name)), s); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "other_logsonly"), 0o755); err != nil {
		t.Fatal(err)
	}
	states, errs := loadStates(dir)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	got := states["ns/web.v1"]
	if got == nil || got.UID != "u1" || got.IP != "10.244.0.2" || got.Containers["app"].Pid != 42 || got.Containers["app"].Last.ExitCode != 137 ||
		!got.Containers["app"].StartedAt.Equal(s.Containers["app"].StartedAt) {
		t.Errorf("read back %+v", got)
	}
	if o := states["other/logsonly"]; o == nil || o.UID != "" {
		t.Errorf("directory without state: %+v", o)
	}
}

func TestResolvePort(t *testing.T) {
	ports := []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	for _, tc := range []struct {
		in   intstr.IntOrString
		want int
		ok   bool
	}{
		{intstr.FromInt32(80), 80, true},
		{intstr.FromString("http"), 8080, true},
		{intstr.FromString("9090"), 9090, true},
		{intstr.FromString("grpc"), 0, false},
		{intstr.FromInt32(0), 0, false},
	} {
		got, err := resolvePort(tc.in, ports)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("resolvePort(%v) = %d, %v", tc.in, got, err)
		}
	}
}

func TestContainerEnv(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{NodeName: "n0"}}
	kube := fake.NewClientset(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"cluster-id": "c1"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "sec"}, Data: map[string][]byte{"k": []byte("s3cret")}},
	)
	optional := ptrTo(true)
	c := corev1.Container{Name: "c", Env: []corev1.EnvVar{
		{Name: "A", Value: "1"},
		{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
		{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
		{Name: "CLUSTER", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "cluster-id"}}},
		{Name: "SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "k"}}},
		{Name: "MAYBE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "x", Optional: optional}}},
		{Name: "CPU", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
	}}
	got, err := containerEnv(context.Background(), kube, pod, c, "10.244.0.2", "172.18.1.10", slog.New(slog.DiscardHandler))
	want := []string{"A=1", "POD=p", "IP=10.244.0.2", "NODE=n0", "APP=web", "CLUSTER=c1", "SECRET=s3cret"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("env %v (%v), want %v", got, err, want)
	}
	c.Env = []corev1.EnvVar{{Name: "GONE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "missing"}}}}
	if _, err := containerEnv(context.Background(), kube, pod, c, "", "", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), `key "missing" of Secret ns/sec`) {
		t.Errorf("missing secret key: %v", err)
	}
}

func TestProcessStat(t *testing.T) {
	ticks, err := processStartTicks(os.Getpid())
	if err != nil || ticks == 0 {
		t.Fatalf("own start ticks %d, %v", ticks, err)
	}
	if !processAlive(os.Getpid(), ticks) {
		t.Error("own process not alive")
	}
	if processAlive(os.Getpid(), ticks+1) {
		t.Error("a different start time must mean a different process")
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"NODE": "n0", "EMPTY": ""}
	for in, want := range map[string]string{
		"--node=$(NODE)":      "--node=n0",
		"$(NODE)$(NODE)":      "n0n0",
		"$$(NODE)":            "$(NODE)",
		"$(UNDEFINED)":        "$(UNDEFINED)",
		"[$(EMPTY)]":          "[]",
		"cost $5":             "cost $5",
		"$(NODE":              "$(NODE",
		"trailing $":          "trailing $",
		"$()":                 "$()",
		"echo $HOME $(NODE)!": "echo $HOME n0!",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
	c := corev1.Container{Env: []corev1.EnvVar{{Name: "A", Value: "x"}, {Name: "B", Value: "$(A)-y"}, {Name: "C", Value: "$(D)"}, {Name: "D", Value: "d"}}}
	got, _ := containerEnv(context.Background(), fake.NewClientset(), &corev1.Pod{}, c, "", "", slog.New(slog.DiscardHandler))
	if want := []string{"A=x", "B=x-y", "C=$(D)", "D=d"}; !slices.Equal(got, want) {
		t.Errorf("env %v, want %v (a value sees only earlier variables)", got, want)
	}
}

func TestTailStart(t *testing.T) {
	for _, tc := range []struct {
		data string
		n    int64
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc\n"},
		{"a\nb\nc", 2, "b\nc"},
		{"a\nb\nc\n", 5, "a\nb\nc\n"},
		{"a\nb\nc\n", 0, ""},
		{"", 3, ""},
		{"\n\n", 1, "\n"},
		{strings.Repeat("x", 70000) + "\nlast\n", 1, "last\n"},
		{"one\n" + strings.Repeat("y", 70000) + "\n", 1, strings.Repeat("y", 70000) + "\n"},
	} {
		r := strings.NewReader(tc.data)
		off, err := tailStart(r, int64(len(tc.data)), tc.n)
		if err != nil || tc.data[off:] != tc.want {
			t.Errorf("tail %d of %.20q: from %d (%v), want %.20q", tc.n, tc.data, off, err, tc.want)
		}
	}
}

func TestLimitedWriter(t *testing.T) {
	var b strings.Builder
	lw := &limitedWriter{w: &b, left: 5}
	n, err := io.Copy(lw, strings.NewReader("hello world"))
	if b.String() != "hello" || n != 5 || !errors.Is(err, errLimit) {
		t.Errorf("wrote %q (%d), %v", b.String(), n, err)
	}
}
