package lab

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestSupervisorWaitsForNeeds: a unit whose needed file is missing is not
// started (and not counted as restarting) until the file appears.
func TestSupervisorWaitsForNeeds(t *testing.T) {
	dir := t.TempDir()
	need := filepath.Join(dir, "kubeconfig")
	var starts atomic.Int32
	u := Unit{Name: "c1/n0/daemon", Needs: []string{need}, Start: func() (*exec.Cmd, error) {
		starts.Add(1)
		cmd := exec.Command("sleep", "60")
		return cmd, cmd.Start()
	}}
	status := filepath.Join(dir, "status.json")
	s := NewSupervisor(slog.New(slog.NewTextHandler(io.Discard, nil)), status)
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
	waitUntil := func(what string, ok func(UnitStatus) bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if ok(unit()) {
				return
			}
		}
		t.Fatalf("%s: %+v", what, unit())
	}
	waitUntil("unit waiting for its file", func(st UnitStatus) bool { return st.LastExit == "waiting for "+need })
	time.Sleep(300 * time.Millisecond) // a few polls of the missing file
	if n := starts.Load(); n != 0 {
		t.Fatalf("unit started %d times before %s existed", n, need)
	}
	if err := os.WriteFile(need, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil("unit running once its file exists", func(st UnitStatus) bool { return st.Running && st.PID > 0 && st.LastExit == "" })
	if st := unit(); st.Restarts != 0 || starts.Load() != 1 {
		t.Errorf("restarts %d, starts %d, want 0 and 1", st.Restarts, starts.Load())
	}
}
