package netlab

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
)

// Names derives every kernel-visible name of a lab from its prefix. Names
// are pure functions of the lab's description so that nothing needs to be
// remembered between runs.
//
//	switch namespace of cluster c1     <prefix>c1
//	node n0 of cluster c1              <prefix>c1.n0
//	pod kubecon/whereami on that node  <prefix>c1.n0.kubecon.whereami
//	WAN namespace                      <prefix>wan
//
// Cluster and node names are DNS labels (no dots), so a pod namespace
// belongs to a node exactly when its name starts with the node's name and a
// dot.
type Names struct {
	Prefix string
}

// maxNetnsName keeps namespace names well below the 255-byte file name
// limit of /run/netns.
const maxNetnsName = 200

// Switch is the namespace holding cluster's node network bridge.
func (n Names) Switch(cluster string) string { return n.Prefix + cluster }

// WAN is the namespace holding the WAN bridge.
func (n Names) WAN() string { return n.Prefix + WANNamespace }

// Node is a node's namespace.
func (n Names) Node(cluster, node string) string { return n.Prefix + cluster + "." + node }

// Pod is a pod's namespace.
func (n Names) Pod(cluster, node, namespace, name string) string {
	return shorten(n.Node(cluster, node)+"."+namespace+"."+name, maxNetnsName)
}

// PodOf is Pod for a Pod value.
func (n Names) PodOf(p Pod) string { return n.Pod(p.Cluster, p.Node, p.Namespace, p.Name) }

// SwitchPort is the bridge port of node in its cluster's switch namespace.
func SwitchPort(node string) string { return ifName(node) }

// WANPort is the bridge port of a gateway node in the WAN namespace.
func WANPort(cluster, node string) string { return ifName(cluster + "." + node) }

// HostVeth is the node-side name of a pod's veth: "cw" and 13 hex digits
// of a hash of the pod's namespace and name (15 characters, the kernel's
// limit), unique per node namespace.
func HostVeth(namespace, name string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return "cw" + hex.EncodeToString(sum[:])[:13]
}

// ifName returns s if it is a usable interface name, or a hashed name
// that cannot collide with a DNS label (it contains '_').
func ifName(s string) string {
	if len(s) <= 15 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h_" + hex.EncodeToString(sum[:])[:13]
}

// shorten cuts s to at most max bytes, replacing the tail by a hash of the
// whole so that different long names stay different.
func shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:max-13] + "~" + hex.EncodeToString(sum[:])[:12]
}

// CgroupBase is the directory below the cgroup v2 root that holds every
// lab's cgroups.
const CgroupBase = "causeway-lab"

// CgroupLayout places a lab's cgroup v2 directories:
//
//	<Root>/causeway-lab/<prefix><cluster>/<node>/system       node-level daemons
//	<Root>/causeway-lab/<prefix><cluster>/<node>/pod-<ns>.<pod>  one per pod
//
// The node directory is what a node's route agent attaches cgroup BPF
// programs to: they apply to the node's daemons and to all its pods. It
// holds no processes itself.
type CgroupLayout struct {
	// Root is where cgroup2 is mounted, e.g. /sys/fs/cgroup or
	// /sys/fs/cgroup/unified on a hybrid host.
	Root   string
	Prefix string
}

// Base is the shared parent of all labs' directories.
func (l CgroupLayout) Base() string { return filepath.Join(l.Root, CgroupBase) }

// controlName is the cgroup of the lab's processes outside any node
// (supervisor, control planes, kubelets); the underscore keeps it apart
// from cluster names, which are DNS labels.
const controlName = "_control"

// Control is the cgroup of the lab's processes in the root namespace:
// <Root>/causeway-lab/<prefix>_control. Teardown kills them with the rest;
// Apply never prunes it.
func (l CgroupLayout) Control() string { return filepath.Join(l.Base(), l.Prefix+controlName) }

// Cluster is a cluster's directory.
func (l CgroupLayout) Cluster(cluster string) string {
	return filepath.Join(l.Base(), l.Prefix+cluster)
}

// Node is a node's directory (attach point for the node's cgroup BPF).
func (l CgroupLayout) Node(cluster, node string) string {
	return filepath.Join(l.Cluster(cluster), node)
}

// NodeSystem is the leaf for the node's own processes (kube-proxy,
// Causeway daemons).
func (l CgroupLayout) NodeSystem(cluster, node string) string {
	return filepath.Join(l.Node(cluster, node), "system")
}

// Pod is a pod's directory.
func (l CgroupLayout) Pod(cluster, node, namespace, name string) string {
	return filepath.Join(l.Node(cluster, node), shorten("pod-"+namespace+"."+name, maxNetnsName))
}

// PodOf is Pod for a Pod value.
func (l CgroupLayout) PodOf(p Pod) string { return l.Pod(p.Cluster, p.Node, p.Namespace, p.Name) }

// FindCgroup2Mount returns the mount point of the first cgroup2 file
// system in a /proc/<pid>/mountinfo text, or "" if there is none.
func FindCgroup2Mount(mountinfo string) string {
	return findMount(mountinfo, "cgroup2")
}

// findMount returns the mount point of the first mount of fstype.
func findMount(mountinfo, fstype string) string {
	if m := findMounts(mountinfo, fstype); len(m) > 0 {
		return m[0]
	}
	return ""
}

// findMounts returns the mount points of every file system of fstype.
func findMounts(mountinfo, fstype string) []string {
	var out []string
	for _, line := range strings.Split(mountinfo, "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		pf := strings.Fields(pre)
		qf := strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || qf[0] != fstype {
			continue
		}
		out = append(out, unescapeMountinfo(pf[4]))
	}
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for space, …) of
// mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) && isOctal(s[i+1:i+4]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := 0; i < 3; i++ {
		if s[i] < '0' || s[i] > '7' {
			return false
		}
	}
	return true
}
