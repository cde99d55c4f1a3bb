package netlab

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Process describes a program to start inside a lab namespace and cgroup.
type Process struct {
	// Netns is the namespace name (as in Names); "" keeps the caller's.
	Netns string
	// Cgroup is an absolute cgroup v2 directory (see CgroupLayout); it is
	// created if missing. "" keeps the caller's cgroup.
	Cgroup string
	Path   string
	Args   []string // without argv[0]
	Env    []string // nil inherits the caller's environment
	Dir    string
	// LogPath receives stdout and stderr (appended, created if missing);
	// "" discards them unless Stdout/Stderr are set.
	LogPath string
	// Stdin, Stdout and Stderr, if set, are used instead (e.g. the
	// terminal for `lab exec`); Stdout and Stderr take precedence over
	// LogPath.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Setsid starts the program in a new session so that it outlives the
	// caller's terminal and process group.
	Setsid bool
	// Ctty makes Stdin, a terminal, the controlling terminal of the new
	// session (needs Setsid), as for an interactive shell.
	Ctty bool
	// MountNS starts the program in a mount namespace of its own, every
	// mount of it private (Go remounts / recursively private): what it
	// mounts stays there, the host's later mounts do not reach it.
	MountNS bool
}

// Start starts p and returns the running command; the caller Waits for it
// (or not, if it should outlive the caller). The program is forked from an
// OS thread switched into the namespace and placed into the cgroup by the
// kernel at fork (clone3 CLONE_INTO_CGROUP), so it never runs anywhere else
// and /sys inside it is the host's (unlike under `ip netns exec`).
//
// Do not set Pdeathsig on such commands: the forking thread is discarded
// right after the fork, which would deliver the signal at once.
func (h *Host) Start(p Process) (*exec.Cmd, error) {
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = p.Env
	cmd.Dir = p.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: p.Setsid, Setctty: p.Ctty}
	if p.MountNS {
		cmd.SysProcAttr.Unshareflags = unix.CLONE_NEWNS
	}
	if p.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(p.LogPath), 0o755); err != nil {
			return nil, fmt.Errorf("start %s: log directory: %w", p.Path, err)
		}
		f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("start %s: open log: %w", p.Path, err)
		}
		defer f.Close() // the child has its own copy
		cmd.Stdout, cmd.Stderr = f, f
	}
	cmd.Stdin = p.Stdin
	if p.Stdout != nil {
		cmd.Stdout = p.Stdout
	}
	if p.Stderr != nil {
		cmd.Stderr = p.Stderr
	}
	if p.Cgroup != "" {
		if err := mkdirCgroup(p.Cgroup); err != nil {
			return nil, fmt.Errorf("start %s: %w", p.Path, err)
		}
		fd, err := unix.Open(p.Cgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("start %s: open cgroup %s: %w", p.Path, p.Cgroup, err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}
	start := func() error { return cmd.Start() }
	var err error
	if p.Netns == "" {
		err = start()
	} else {
		ns, oerr := h.openNetns(p.Netns)
		if oerr != nil {
			return nil, fmt.Errorf("start %s: %w", p.Path, oerr)
		}
		defer ns.Close()
		// The thread that forks is thrown away afterwards: no need to
		// switch it back, and nothing else ever runs on it.
		err = onThrowawayThread(func() error {
			if err := unix.Setns(int(ns), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("enter namespace %s: %w", p.Netns, err)
			}
			return start()
		})
	}
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Path, err)
	}
	return cmd, nil
}
