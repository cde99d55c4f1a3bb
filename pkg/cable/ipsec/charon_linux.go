package ipsec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/strongswan/govici/vici"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// maxSocketPath is the usable length of a unix socket path.
const maxSocketPath = 107

// charonPID returns the pid of the charon serving f if it runs, else 0.
func charonPID(f Files) int {
	b, err := os.ReadFile(f.PidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "charon" {
		return 0
	}
	return pid
}

// session opens a VICI session on f's socket.
func session(f Files) (*vici.Session, error) {
	s, err := vici.NewSession(vici.WithSocketPath(f.Socket))
	if err != nil {
		return nil, fmt.Errorf("connect to vici %s: %w", f.Socket, err)
	}
	return s, nil
}

// ensureCharon adopts the charon of f if it runs and answers on its
// socket, otherwise starts one in the namespace netnsPath. It returns the
// pid and whether it was adopted.
func ensureCharon(ctx context.Context, f Files, netnsPath string, plugins []string, log *slog.Logger) (int, bool, error) {
	if len(f.Socket) > maxSocketPath {
		return 0, false, fmt.Errorf("vici socket path %s longer than %d bytes", f.Socket, maxSocketPath)
	}
	if pid := charonPID(f); pid != 0 {
		if s, err := session(f); err == nil {
			_, err = s.Call(ctx, "version", nil)
			s.Close()
			if err == nil {
				log.Info("adopting running charon", "pid", pid)
				return pid, true, nil
			}
		}
		log.Info("charon runs but does not answer on vici: restarting it", "pid", pid)
		if err := stopCharon(pid); err != nil {
			return 0, false, err
		}
	}
	if _, err := os.Stat(Charon); err != nil {
		return 0, false, fmt.Errorf("charon: %w (install strongswan-charon)", err)
	}
	if err := os.MkdirAll(f.RunDir, 0o700); err != nil {
		return 0, false, fmt.Errorf("create %s: %w", f.RunDir, err)
	}
	if err := os.Chmod(f.Dir, 0o700); err != nil {
		return 0, false, err
	}
	for _, p := range []string{f.PidFile, f.Socket} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, false, fmt.Errorf("remove stale %s: %w", p, err)
		}
	}
	if err := writeFileAtomic(f.Conf, []byte(StrongSwanConf(f, plugins)), 0o600); err != nil {
		return 0, false, err
	}
	out, err := os.OpenFile(f.Stdout, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, false, fmt.Errorf("open %s: %w", f.Stdout, err)
	}
	defer out.Close()
	// charon's pid file is compiled in as /var/run/charon.pid: a private
	// mount namespace with the state dir's run/ over /run lets several
	// charons (one per gateway namespace) run on one machine.
	cmd := exec.Command("/bin/sh", "-c", `mount --bind "$1" /run && exec "$2"`, "sh", f.RunDir, Charon)
	cmd.Env = []string{"STRONGSWAN_CONF=" + f.Conf, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Unshareflags: syscall.CLONE_NEWNS}
	// The child inherits the namespace of the (locked) thread that forks it.
	if err := netnsx.Do(netnsPath, cmd.Start); err != nil {
		return 0, false, fmt.Errorf("start charon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reap; charon outlives the driver
	pid := cmd.Process.Pid
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			return 0, false, fmt.Errorf("charon exited at start: %v: %s", err, tail(f.Stdout, f.Log))
		case <-ctx.Done():
			stopCharon(pid)
			return 0, false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if s, err := session(f); err == nil {
			_, err = s.Call(ctx, "version", nil)
			s.Close()
			if err == nil && charonPID(f) == pid {
				log.Info("started charon", "pid", pid, "conf", f.Conf, "vici", f.Socket, "plugins", plugins)
				return pid, false, nil
			}
		}
		if time.Now().After(deadline) {
			stopCharon(pid)
			return 0, false, fmt.Errorf("charon not answering on %s: %s", f.Socket, tail(f.Stdout, f.Log))
		}
	}
}

// stopCharon sends SIGTERM (charon deletes its SAs, telling the peers,
// and closes its TUN) and waits for the process to go, then SIGKILL.
func stopCharon(pid int) error {
	if pid == 0 {
		return nil
	}
	gone := func() bool { return unix.Kill(pid, 0) == unix.ESRCH }
	if err := unix.Kill(pid, unix.SIGTERM); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("stop charon %d: %w", pid, err)
	}
	for i := 0; i < 200; i++ {
		if gone() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	unix.Kill(pid, unix.SIGKILL)
	for i := 0; i < 100; i++ {
		if gone() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("charon %d does not exit", pid)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}

// tail returns the last lines of the given files, for error messages.
func tail(paths ...string) string {
	var parts []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 8 {
			lines = lines[len(lines)-8:]
		}
		parts = append(parts, p+": "+strings.Join(lines, " | "))
	}
	return strings.Join(parts, "; ")
}
