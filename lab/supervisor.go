package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Unit is one supervised process of the lab.
type Unit struct {
	// Name is unique in the lab, e.g. "c1/kube-apiserver" or "c1/n0/kubelet".
	Name string
	// Spec is the unit's command line; a running supervisor whose units'
	// specs differ from the lab's is stale.
	Spec string
	// Start starts the process; the supervisor waits for it and starts it
	// again when it exits.
	Start func() (*exec.Cmd, error)
}

// UnitStatus is what `lab status` shows of a unit.
type UnitStatus struct {
	Name     string    `json:"name"`
	Spec     string    `json:"spec"`
	PID      int       `json:"pid,omitempty"`
	Running  bool      `json:"running"`
	Since    time.Time `json:"since,omitzero"`
	Restarts int       `json:"restarts"`
	LastExit string    `json:"lastExit,omitempty"`
}

// Supervisor keeps units running: it restarts a unit that exits, with a
// backoff from 1 s up to maxBackoff, reset once the unit has run for a
// minute.
type Supervisor struct {
	log        *slog.Logger
	statusFile string

	mu     sync.Mutex
	status map[string]*UnitStatus
	order  []string
}

// NewSupervisor returns a supervisor writing its status to statusFile.
func NewSupervisor(log *slog.Logger, statusFile string) *Supervisor {
	return &Supervisor{log: log, statusFile: statusFile, status: map[string]*UnitStatus{}}
}

// Run starts every unit and keeps them running until ctx ends; then it
// stops them (SIGTERM, SIGKILL after stopGrace).
func (s *Supervisor) Run(ctx context.Context, units []Unit) error {
	var wg sync.WaitGroup
	stops := make([]chan struct{}, len(units))
	for i, u := range units {
		s.mu.Lock()
		s.status[u.Name] = &UnitStatus{Name: u.Name, Spec: u.Spec}
		s.order = append(s.order, u.Name)
		s.mu.Unlock()
		stops[i] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.keep(u, stops[i])
		}()
	}
	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	for done := false; !done; {
		s.writeStatus()
		select {
		case <-ctx.Done():
			done = true
		case <-ticker.C:
		}
	}
	s.log.Info("stopping units", "count", len(units))
	// Reverse order: daemons before the control planes they talk to.
	for i := len(units) - 1; i >= 0; i-- {
		close(stops[i])
	}
	wg.Wait()
	s.writeStatus()
	return nil
}

// keep runs u until stop is closed.
func (s *Supervisor) keep(u Unit, stop <-chan struct{}) {
	backoff := time.Second
	for {
		cmd, err := u.Start()
		if err != nil {
			s.update(u.Name, func(st *UnitStatus) { st.Running, st.LastExit = false, "start: "+err.Error() })
			s.log.Error("start failed", "unit", u.Name, "err", err)
		} else {
			started := time.Now()
			s.update(u.Name, func(st *UnitStatus) { st.PID, st.Running, st.Since = cmd.Process.Pid, true, started })
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				s.update(u.Name, func(st *UnitStatus) { st.Running, st.LastExit = false, exitText(err) })
				s.log.Warn("unit exited", "unit", u.Name, "err", exitText(err))
				if time.Since(started) > time.Minute {
					backoff = time.Second
				}
			case <-stop:
				stopCmd(cmd, exited, stopGrace)
				s.update(u.Name, func(st *UnitStatus) { st.Running, st.PID = false, 0 })
				return
			}
		}
		select {
		case <-stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		s.update(u.Name, func(st *UnitStatus) { st.Restarts++ })
	}
}

func stopCmd(cmd *exec.Cmd, exited <-chan error, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.String()
	}
	return err.Error()
}

func (s *Supervisor) update(name string, f func(*UnitStatus)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.status[name])
}

func (s *Supervisor) writeStatus() {
	s.mu.Lock()
	out := make([]UnitStatus, 0, len(s.order))
	for _, n := range s.order {
		out = append(out, *s.status[n])
	}
	s.mu.Unlock()
	b, _ := json.MarshalIndent(out, "", "  ")
	tmp := s.statusFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		s.log.Error("write status", "err", err)
		return
	}
	_ = os.Rename(tmp, s.statusFile)
}

// ReadStatus reads the supervisor's status file.
func ReadStatus(file string) ([]UnitStatus, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out []UnitStatus
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	return out, nil
}

// stopGrace is how long a unit may take to stop. kube-apiserver drains
// watches for up to a minute on SIGTERM; a lab being torn down does not
// need that.
const stopGrace = 3 * time.Second

// maxBackoff is short: in the lab, a daemon that exits early usually waits
// for something `lab up` is still creating (a broker identity, a CRD).
const maxBackoff = 5 * time.Second
