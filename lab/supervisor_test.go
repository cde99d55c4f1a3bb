package lab

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestSupervisorRestarts: a unit that dies is started again, and its
// status counts the restart and says how it ended.
func TestSupervisorRestarts(t *testing.T) {
	dir := t.TempDir()
	var starts atomic.Int32
	u := Unit{Name: "c1/n0/daemon", Start: func() (*exec.Cmd, error) {
		starts.Add(1)
		cmd := exec.Command("sleep", "60")
		return cmd, cmd.Start()
	}}
	s := NewSupervisor(slog.New(slog.NewTextHandler(io.Discard, nil)), filepath.Join(dir, "status.json"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, []Unit{u}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	unit := func() UnitStatus {
		s.mu.Lock()
		defer s.mu.Unlock()
		if st := s.status[u.Name]; st != nil {
			return *st
		}
		return UnitStatus{} // Run has not registered it yet
	}
	waitUntil := func(what string, ok func(UnitStatus) bool) UnitStatus {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if st := unit(); ok(st) {
				return st
			}
		}
		t.Fatalf("%s: %+v", what, unit())
		return UnitStatus{}
	}
	first := waitUntil("unit running", func(st UnitStatus) bool { return st.Running && st.PID > 0 })
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	again := waitUntil("unit running again", func(st UnitStatus) bool { return st.Running && st.PID != first.PID })
	if again.Restarts != 1 || starts.Load() != 2 || again.LastExit == "" {
		t.Errorf("after one kill: %+v, %d starts; want 1 restart, 2 starts and the exit recorded", again, starts.Load())
	}
}
