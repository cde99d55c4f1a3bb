package kubelet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// processStartTicks returns field 22 (starttime) of /proc/<pid>/stat and
// the process state letter.
func processStat(pid int) (ticks uint64, state string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fs := strings.Fields(s[i+1:])
	// fs[0] is field 3 (state); starttime is field 22.
	if len(fs) < 20 {
		return 0, "", fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ticks, err = strconv.ParseUint(fs[19], 10, 64)
	return ticks, fs[0], err
}

func processStartTicks(pid int) (uint64, error) {
	t, _, err := processStat(pid)
	return t, err
}

// processAlive tells whether pid is still the process that started at
// ticks (not a later one reusing the number) and has not exited.
func processAlive(pid int, ticks uint64) bool {
	t, state, err := processStat(pid)
	return err == nil && t == ticks && state != "Z" && state != "X"
}

// waitPidfd blocks until the process exits (it need not be our child) or
// ctx is done (then it returns ctx's error).
func waitPidfd(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // already gone
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 500)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd %d: %w", pid, err)
		}
		if n > 0 {
			return nil
		}
	}
}
