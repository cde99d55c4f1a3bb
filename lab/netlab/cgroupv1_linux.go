package netlab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CgroupV1Roots are the mount points of the host's cgroup v1 hierarchies
// (a hybrid host's /sys/fs/cgroup/<controller>); none on a cgroup v2 host.
// A real kubelet on a hybrid host (lab up --runtime containerd) makes its
// node's kubepods in every one of them, below V1Node.
func CgroupV1Roots() ([]string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return findMounts(string(mi), "cgroup"), nil
}

// RelNode is the node's directory relative to the cgroup root
// ("/causeway-lab/<prefix><cluster>/<node>"): a real kubelet's
// cgroupRoot, which places its pods below the node's directory in the
// v2 hierarchy and at the same path in every v1 hierarchy.
func (l CgroupLayout) RelNode(cluster, node string) string {
	return strings.TrimPrefix(l.Node(cluster, node), l.Root)
}

// MkdirV1Node creates the node's directory (RelNode) in every cgroup v1
// hierarchy.
func (h *Host) MkdirV1Node(cluster, node string) error {
	roots, err := CgroupV1Roots()
	if err != nil {
		return err
	}
	for _, r := range roots {
		if err := os.MkdirAll(filepath.Join(r, h.cgroups.RelNode(cluster, node)), 0o755); err != nil {
			return fmt.Errorf("cgroup v1 %s: %w", r, err)
		}
	}
	return nil
}

// v1ClusterDirs lists the lab's cluster directories in every cgroup v1
// hierarchy (<root>/causeway-lab/<prefix>*).
func (h *Host) v1ClusterDirs() ([]string, error) {
	roots, err := CgroupV1Roots()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range roots {
		names, err := readDirNames(filepath.Join(r, CgroupBase), h.prefix)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			out = append(out, filepath.Join(r, CgroupBase, n))
		}
	}
	return out, nil
}

// removeV1Bases removes <root>/causeway-lab of every v1 hierarchy once no
// lab uses it.
func removeV1Bases() error {
	roots, err := CgroupV1Roots()
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range roots {
		err := unix.Rmdir(filepath.Join(r, CgroupBase))
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove %s: %w", filepath.Join(r, CgroupBase), err))
		}
	}
	return errors.Join(errs...)
}
