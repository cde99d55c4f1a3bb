package lab

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Supervise runs every unit of the lab in dir until ctx ends (the hidden
// `causeway-lab supervise`, started detached by `lab up`).
func Supervise(ctx context.Context, dir string) error {
	st, err := Load(dir)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "lab-supervisor")
	h, err := st.Host()
	if err != nil {
		return err
	}
	units, err := st.Units(h)
	if err != nil {
		return err
	}
	log.Info("supervising", "units", len(units))
	return NewSupervisor(log, st.statusFile()).Run(ctx, units)
}

// Status is the supervisor's view of every unit.
func (s *State) Status() ([]UnitStatus, error) { return ReadStatus(s.statusFile()) }

// SupervisorPID is the supervisor's PID, 0 when it is not running.
func (s *State) SupervisorPID() int {
	pid, _ := s.supervisorRunning()
	return pid
}

// LogFile is one log of the lab.
type LogFile struct {
	Unit string // e.g. "c1/kube-apiserver", "c1/n0/kubelet", "c1/demo/client/client"
	Path string
}

// LogFiles lists every log of the lab, sorted by unit.
func (s *State) LogFiles() ([]LogFile, error) {
	var out []LogFile
	err := filepath.WalkDir(s.Dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		rel, _ := filepath.Rel(s.Dir, path)
		parts := strings.Split(strings.TrimSuffix(rel, ".log"), string(filepath.Separator))
		var unit string
		switch {
		case len(parts) == 3 && parts[1] == "logs": // <cp>/logs/<bin>.log
			unit = parts[0] + "/" + parts[2]
		case len(parts) >= 2 && parts[0] == "logs": // logs/<c>/<n>/<x>.log, logs/supervisor.log
			unit = strings.Join(parts[1:], "/")
		case len(parts) == 6 && parts[0] == "nodes" && parts[3] == "pods": // nodes/<c>/<n>/pods/<ns>_<pod>/<ctr>.log
			ns, pod, _ := strings.Cut(parts[4], "_")
			unit = parts[1] + "/" + ns + "/" + pod + "/" + parts[5]
		default:
			unit = strings.Join(parts, "/")
		}
		out = append(out, LogFile{Unit: unit, Path: path})
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Unit < out[j].Unit })
	return out, err
}

// NodeStateDir is where a node's kubelet keeps pod state and logs.
func (s *State) NodeStateDir(cluster, node string) string {
	return filepath.Join(s.Dir, "nodes", cluster, node)
}
