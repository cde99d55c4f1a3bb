package controlplane

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ProcessConfig describes a child process.
type ProcessConfig struct {
	Name    string
	Path    string
	Args    []string
	Env     []string
	LogFile string // stdout and stderr, appended
	PIDFile string // written after start when set
	// Detach puts the process in its own session so it outlives the
	// caller; otherwise it is killed when the caller dies.
	Detach bool
	// SysProcAttr, when set, is used as is (Detach and the death signal
	// are then the caller's business).
	SysProcAttr *syscall.SysProcAttr
}

// Process is a started child process.
type Process struct {
	cfg  ProcessConfig
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// StartProcess starts cfg's program.
func StartProcess(cfg ProcessConfig) (*Process, error) {
	logf, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	defer logf.Close()
	cmd := exec.Command(cfg.Path, cfg.Args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), cfg.Env...)
	switch {
	case cfg.SysProcAttr != nil:
		cmd.SysProcAttr = cfg.SysProcAttr
	case cfg.Detach:
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	default:
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	p := &Process{cfg: cfg, cmd: cmd, done: make(chan struct{})}
	// The kernel sends Pdeathsig when the *thread* that forked the child
	// exits, and other code (netlab) deliberately retires locked threads.
	// So the child is forked from a thread locked to this goroutine, which
	// holds it until the child has exited.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
	}
	if cfg.PIDFile != "" {
		if err := os.WriteFile(cfg.PIDFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
			p.Stop(time.Second)
			return nil, fmt.Errorf("start %s: %w", cfg.Name, err)
		}
	}
	return p, nil
}

// PID is the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the exit error once exited.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if p.cfg.PIDFile != "" {
		_ = os.Remove(p.cfg.PIDFile)
	}
}

// LogTail returns up to n bytes from the end of the process's log.
// A nil Process (one adopted, not started here) has no log to show.
func (p *Process) LogTail(n int64) string {
	if p == nil {
		return ""
	}
	return LogTail(p.cfg.LogFile, n)
}

// LogTail returns up to n bytes from the end of file.
func LogTail(file string, n int64) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	buf := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return strings.TrimSpace(string(buf))
}

// StopPIDFile stops the process recorded in a PID file written by a
// detached StartProcess (SIGTERM, then SIGKILL after grace) and removes
// the file. A missing file or process is not an error.
func StopPIDFile(file string, grace time.Duration) error {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	defer os.Remove(file)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return nil // already gone
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return nil
}
