package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/pkg/vip"
)

// BPFFS is the lab's own bpffs mount. Each node's route agent sees its
// own directory of it, <dir>/bpffs/<cluster>-<node> (NodeBPFFS), as
// /sys/fs/bpf (the chart's hostPath, remapped by the node's kubelet) and
// pins its VIP datapath there. A private mount keeps the host's
// /sys/fs/bpf untouched and goes away with `lab down`.
func (s *State) BPFFS() string { return filepath.Join(s.Dir, "bpffs") }

// NodeBPFFS is the directory of a node in BPFFS (bpffs refuses names
// with dots).
func (s *State) NodeBPFFS(cluster, node string) string {
	return filepath.Join(s.BPFFS(), cluster+"-"+node)
}

// VIPPinDir is a node's VIP pin directory: the route agent's default
// <bpffs>/causeway/vip in NodeBPFFS.
func (s *State) VIPPinDir(cluster, node string) string {
	return vip.PinDir(s.NodeBPFFS(cluster, node))
}

func (s *State) mountBPFFS() error {
	dir := s.BPFFS()
	if mounted(dir) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("mount bpffs on %s: %w", dir, err)
	}
	return nil
}

func unmountBPFFS(dir string) error {
	if !mounted(dir) {
		return nil
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount bpffs %s: %w", dir, err)
	}
	return nil
}

// mounted reports whether dir is a mount point.
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}
