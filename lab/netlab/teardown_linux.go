package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Report lists lab objects: what Teardown removed or what Leftovers found.
type Report struct {
	Processes  []int    // pids in lab cgroups or lab namespaces
	Namespaces []string // namespace names
	Cgroups    []string // cgroup directories
	Sockets    []string // wireguard-go UAPI sockets
	Pins       []string // bpffs entries
}

// Empty tells whether the report lists nothing.
func (r Report) Empty() bool {
	return len(r.Processes)+len(r.Namespaces)+len(r.Cgroups)+len(r.Sockets)+len(r.Pins) == 0
}

func (r Report) String() string {
	if r.Empty() {
		return "nothing"
	}
	var parts []string
	add := func(what string, items []string) {
		if len(items) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", what, strings.Join(items, " ")))
		}
	}
	var pids []string
	for _, p := range r.Processes {
		pids = append(pids, strconv.Itoa(p))
	}
	add("processes", pids)
	add("namespaces", r.Namespaces)
	add("cgroups", r.Cgroups)
	add("sockets", r.Sockets)
	add("pins", r.Pins)
	return strings.Join(parts, "; ")
}

// Teardown removes everything of the host's prefix: kills the processes
// in its cgroups and namespaces, removes the namespaces (their links go
// with them), the cgroup directories, wireguard-go UAPI sockets named
// <prefix>*.sock and bpffs entries <prefix>*. It reports what it removed and
// goes on past errors, returning them joined.
func (h *Host) Teardown() (Report, error) {
	var rep Report
	var errs []error

	clusterDirs, err := h.clusterCgroups()
	errs = append(errs, err)
	for _, dir := range clusterDirs {
		pids, _ := cgroupPids(dir)
		rep.Processes = append(rep.Processes, pids...)
		dirs, _ := cgroupTree(dir)
		if err := killAndRemoveCgroup(dir); err != nil {
			errs = append(errs, err)
		} else {
			rep.Cgroups = append(rep.Cgroups, dirs...)
		}
	}
	// The shared base goes when no lab uses it any more.
	if err := unix.Rmdir(h.cgroups.Base()); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
		errs = append(errs, fmt.Errorf("remove %s: %w", h.cgroups.Base(), err))
	}
	errs = append(errs, removeV1Bases())

	names, err := h.ListNetns(h.prefix)
	errs = append(errs, err)
	// Pods before nodes before switches: longest names first.
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) })
	for _, name := range names {
		pids, err := h.netnsPids(name)
		errs = append(errs, err)
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err == nil {
				rep.Processes = append(rep.Processes, pid)
			}
		}
		if len(pids) > 0 {
			errs = append(errs, h.waitNetnsEmpty(name, 10*time.Second))
		}
		if err := h.DeleteNetns(name); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Namespaces = append(rep.Namespaces, name)
	}

	socks, err := globPrefix(h.wgDir, h.prefix, ".sock")
	errs = append(errs, err)
	for _, s := range socks {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove %s: %w", s, err))
			continue
		}
		rep.Sockets = append(rep.Sockets, s)
	}

	if isBPFFS(h.bpffsDir) {
		pins, err := globPrefix(h.bpffsDir, h.prefix, "")
		errs = append(errs, err)
		for _, p := range pins {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", p, err))
				continue
			}
			rep.Pins = append(rep.Pins, p)
		}
	}
	sort.Ints(rep.Processes)
	rep.Processes = compactInts(rep.Processes)
	h.log.Info("lab torn down", "removed", rep.String())
	return rep, errors.Join(errs...)
}

// Leftovers lists what of the host's prefix is still present: processes in
// its cgroups or namespaces, namespaces, cgroup directories, UAPI sockets
// and bpffs entries.
func (h *Host) Leftovers() (Report, error) {
	var rep Report
	var errs []error
	clusterDirs, err := h.clusterCgroups()
	errs = append(errs, err)
	for _, dir := range clusterDirs {
		pids, err := cgroupPids(dir)
		errs = append(errs, err)
		rep.Processes = append(rep.Processes, pids...)
		dirs, err := cgroupTree(dir)
		errs = append(errs, err)
		rep.Cgroups = append(rep.Cgroups, dirs...)
	}
	names, err := h.ListNetns(h.prefix)
	errs = append(errs, err)
	rep.Namespaces = names
	for _, name := range names {
		pids, err := h.netnsPids(name)
		errs = append(errs, err)
		rep.Processes = append(rep.Processes, pids...)
	}
	rep.Sockets, err = globPrefix(h.wgDir, h.prefix, ".sock")
	errs = append(errs, err)
	if isBPFFS(h.bpffsDir) {
		rep.Pins, err = globPrefix(h.bpffsDir, h.prefix, "")
		errs = append(errs, err)
	}
	sort.Ints(rep.Processes)
	rep.Processes = compactInts(rep.Processes)
	return rep, errors.Join(errs...)
}

// clusterCgroups lists the lab's cluster (and control) directories in
// the cgroup v2 hierarchy and in every v1 hierarchy (where only a real
// kubelet's pods live).
func (h *Host) clusterCgroups() ([]string, error) {
	names, err := readDirNames(h.cgroups.Base(), h.prefix)
	var dirs []string
	for _, n := range names {
		dirs = append(dirs, filepath.Join(h.cgroups.Base(), n))
	}
	v1, v1err := h.v1ClusterDirs()
	return append(dirs, v1...), errors.Join(err, v1err)
}

// killNetnsProcesses SIGKILLs every process whose network namespace is the
// named one.
func (h *Host) killNetnsProcesses(name string) error {
	pids, err := h.netnsPids(name)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill %d in %s: %w", pid, name, err)
		}
	}
	return nil
}

// waitNetnsEmpty waits until no process runs in the named namespace any
// more (a SIGKILLed process takes a moment to exit).
func (h *Host) waitNetnsEmpty(name string, timeout time.Duration) error {
	for deadline := time.Now().Add(timeout); ; time.Sleep(5 * time.Millisecond) {
		pids, err := h.netnsPids(name)
		if err != nil || len(pids) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s: processes %v still run after SIGKILL", name, pids)
		}
	}
}

// netnsPids returns the processes (other than this one) whose network
// namespace is the named one.
func (h *Host) netnsPids(name string) ([]int, error) {
	var st unix.Stat_t
	if err := unix.Stat(h.netnsPath(name), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("stat namespace %s: %w", name, err)
	}
	if !isBoundNetns(h.netnsPath(name)) {
		return nil, nil
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err == nil && link == want {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killAndRemoveCgroup kills every process in the cgroup subtree at dir,
// waits for it to empty and removes the directories bottom-up. A missing
// directory is fine.
func killAndRemoveCgroup(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644); err != nil {
		// Kernels before 5.14 lack cgroup.kill: signal one by one.
		pids, perr := cgroupPids(dir)
		if perr != nil {
			return perr
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("kill %d in %s: %w", pid, dir, err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		populated, err := cgroupPopulated(dir)
		if err != nil {
			return err
		}
		if !populated {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes after SIGKILL", dir)
		}
		time.Sleep(5 * time.Millisecond)
	}
	dirs, err := cgroupTree(dir)
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children before parents
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// cgroupPopulated reads "populated" from cgroup.events (1 while any
// process lives in the subtree).
func cgroupPopulated(dir string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	if errors.Is(err, os.ErrNotExist) {
		// cgroup v1 (or dir gone): populated while any cgroup.procs
		// of the subtree lists a process.
		pids, err := cgroupPids(dir)
		return len(pids) > 0, err
	}
	if err != nil {
		return false, fmt.Errorf("read %s/cgroup.events: %w", dir, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "populated "); ok {
			return strings.TrimSpace(v) == "1", nil
		}
	}
	return false, fmt.Errorf("%s/cgroup.events has no populated field", dir)
}

// cgroupTree lists dir and its descendant directories, parents first.
func cgroupTree(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk cgroup %s: %w", dir, err)
	}
	return out, nil
}

// cgroupPids lists the processes in the subtree at dir.
func cgroupPids(dir string) ([]int, error) {
	dirs, err := cgroupTree(dir)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s/cgroup.procs: %w", d, err)
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}

// readDirNames lists the subdirectory names in dir that start with
// prefix; a missing dir is empty.
func readDirNames(dir, prefix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// globPrefix lists the paths in dir whose names start with prefix and end
// with suffix.
func globPrefix(dir, prefix, suffix string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) && strings.HasSuffix(e.Name(), suffix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}

// isBPFFS tells whether dir is a mounted bpffs.
func isBPFFS(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.BPF_FS_MAGIC
}

func compactInts(s []int) []int {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// mkdirCgroup creates a cgroup directory and its parents. Another lab's
// Teardown may remove the shared causeway-lab directory between the
// creation of a parent and of its child; creation is retried then.
func mkdirCgroup(dir string) error {
	var err error
	for i := 0; i < 5; i++ {
		if err = os.MkdirAll(dir, 0o755); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	return nil
}
