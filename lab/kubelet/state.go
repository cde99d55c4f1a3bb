package kubelet

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// podState is what the kubelet keeps of a pod in
// <StateDir>/pods/<namespace>_<name>/state.json, so that a later kubelet
// adopts the pod's processes and keeps its IP.
type podState struct {
	Namespace   string    `json:"namespace"`
	Name        string    `json:"name"`
	UID         types.UID `json:"uid"`
	HostNetwork bool      `json:"hostNetwork,omitempty"`
	// IP is the pod's address ("" for hostNetwork pods).
	IP         string                      `json:"ip,omitempty"`
	Containers map[string]*containerRecord `json:"containers,omitempty"`
}

// containerRecord is one container's persisted state.
type containerRecord struct {
	// Pid is the running process (its process group and session leader);
	// 0 when none runs.
	Pid int `json:"pid,omitempty"`
	// StartTicks is field 22 of /proc/<pid>/stat, which tells the process
	// apart from a later one reusing the pid.
	StartTicks   uint64    `json:"startTicks,omitempty"`
	StartedAt    time.Time `json:"startedAt,omitempty"`
	RestartCount int32     `json:"restartCount,omitempty"`
	// Last is the termination before the current process (lastState).
	Last *termination `json:"last,omitempty"`
	// Exited is how the latest process ended while none runs.
	Exited *termination `json:"exited,omitempty"`
}

// termination is how a container process ended.
type termination struct {
	ExitCode    int32     `json:"exitCode"`
	Signal      int32     `json:"signal,omitempty"`
	Reason      string    `json:"reason"`
	Message     string    `json:"message,omitempty"`
	StartedAt   time.Time `json:"startedAt"`
	FinishedAt  time.Time `json:"finishedAt"`
	ContainerID string    `json:"containerID,omitempty"`
}

// podDirName is the state directory name of a pod. Namespace names are
// DNS labels (no '_'), so the first '_' separates the two.
func podDirName(namespace, name string) string { return namespace + "_" + name }

// ContainerLog is the log file of a container of pod namespace/name in
// the state directory of a kubelet (Config.StateDir): stdout and stderr,
// appended across restarts.
func ContainerLog(stateDir, namespace, name, container string) string {
	return filepath.Join(stateDir, "pods", podDirName(namespace, name), container+".log")
}

func parsePodDirName(dir string) (namespace, name string, ok bool) {
	return strings.Cut(dir, "_")
}

const stateFile = "state.json"

func loadState(dir string) (*podState, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var s podState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, stateFile), err)
	}
	if s.Containers == nil {
		s.Containers = map[string]*containerRecord{}
	}
	return &s, nil
}

// saveState writes the state atomically (temporary file and rename).
func saveState(dir string, s *podState) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, stateFile)); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

// loadStates reads every pod state below podsDir, keyed by
// "<namespace>/<name>". Unreadable entries are returned as errors but do
// not stop the others.
func loadStates(podsDir string) (map[string]*podState, []error) {
	ents, err := os.ReadDir(podsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	out := map[string]*podState{}
	var errs []error
	for _, e := range ents {
		ns, name, ok := parsePodDirName(e.Name())
		if !e.IsDir() || !ok {
			continue
		}
		s, err := loadState(filepath.Join(podsDir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			// A pod directory without state: only logs of a pod
			// whose state was never written. Keep it for its
			// worker, which starts the pod afresh.
			s = &podState{Namespace: ns, Name: name, Containers: map[string]*containerRecord{}}
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		s.Namespace, s.Name = ns, name
		out[ns+"/"+name] = s
	}
	return out, errs
}
