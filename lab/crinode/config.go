package crinode

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Paths inside a node's mount namespace.
const (
	// ContainerdSocket is containerd's CRI and API socket.
	ContainerdSocket = "/run/containerd/containerd.sock"
	// CNIBinDir holds Debian's containernetworking-plugins.
	CNIBinDir = "/usr/lib/cni"
	// RuncPath is Debian's runc.
	RuncPath = "/usr/sbin/runc"
	// CgroupV2Mount is the cgroup v2 mount of the hybrid layout (cgroup
	// v1 hierarchies at /sys/fs/cgroup/<controller>), the only one run
	// here. The node's mount namespace shows the node's cgroup v2
	// directory there: runc puts containers below it, and the route
	// agent (the chart's routeAgent.cgroupHostPath) attaches its VIP
	// programs to it.
	CgroupV2Mount = "/sys/fs/cgroup/unified"
)

// MountPoints are the host paths a real kubelet, containerd and the CNI
// plugins use whatever they are told (or by default), and a node's
// mount namespace replaces by a directory of its own. The last one is
// the hostPath of the chart's gateway (its WireGuard key, charon's
// files): one per node.
var MountPoints = []string{
	"/var/lib/kubelet",    // pods' volumes, device-plugins, checkpoints
	"/var/lib/containerd", // images, snapshots
	"/run/containerd",     // containerd's socket, shims, runc's state, pod netns mounts
	"/opt/containerd",     // containerd's opt directory
	"/var/log/pods",       // container logs
	"/var/log/containers", // the kubelet's links to them
	"/var/lib/cni",        // host-local's leases, libcni's cache
	"/etc/cni/net.d",      // the CNI network
	"/var/lib/causeway/gateway",
}

// Config is one node as the real kubelet and containerd see it.
type Config struct {
	// NodeName is the Node's name; NodeIP its InternalIP (eth0),
	// ExternalIP (wan0 of a gateway node) its ExternalIP when valid.
	NodeName   string
	NodeIP     netip.Addr
	ExternalIP netip.Addr
	// PodCIDR is the node's pod slice: pods get addresses of it from
	// .2 up (host-local), .1 is the node side of every pod's veth.
	PodCIDR netip.Prefix
	// ClusterDNS is the cluster's DNS Service address.
	ClusterDNS netip.Addr
	// CgroupRoot is the kubelet's cgroup root (its kubepods below it) in
	// every cgroup v1 hierarchy, e.g. /causeway-lab/cwl-c1/n0.
	CgroupRoot string
	// SandboxImage is the pinned local pause image.
	SandboxImage string
	// ConfigDir holds the files the kubelet reads: kubelet.yaml,
	// kubeconfig, the cluster CA and the serving certificate.
	ConfigDir string
	// CACertFile, ServingCertFile and ServingKeyFile are in ConfigDir.
	CACertFile, ServingCertFile, ServingKeyFile string
}

// KubeletConfig is the kubelet's configuration file
// (kubelet.config.k8s.io/v1beta1). What this machine needs: cgroup v1
// (the host's hybrid layout) with the cgroupfs driver, swap tolerated,
// no iptables chains of the kubelet's own (kube-proxy's are enough); the
// kubelet API authenticates the API server by the cluster CA and
// authorizes every authenticated client.
func KubeletConfig(c Config) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"failCgroupV1":             false,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               c.CgroupRoot,
		"failSwapOn":               false,
		"makeIPTablesUtilChains":   false,
		"containerRuntimeEndpoint": "unix://" + ContainerdSocket,
		"address":                  c.NodeIP.String(),
		"port":                     10250,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              10248,
		"tlsCertFile":              c.ServingCertFile,
		"tlsPrivateKeyFile":        c.ServingKeyFile,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": c.CACertFile},
		},
		"authorization": map[string]any{"mode": "AlwaysAllow"},
		"clusterDomain": "cluster.local",
		"clusterDNS":    []string{c.ClusterDNS.String()},
		"resolvConf":    "/etc/resolv.conf",
		// The shared host's disk and memory are not this node's: no
		// evictions, no image garbage collection of the lab's images.
		"evictionHard":                map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"serializeImagePulls":         false,
	}
	return yaml.Marshal(cfg)
}

// ContainerdConfig is containerd's config.toml (version 3): the
// default paths (MountPoints make them the node's), the pinned sandbox
// image, runc with cgroupfs, CNI from CNIBinDir, pod network namespaces
// under the state directory (not the host's /run/netns), no NRI socket,
// and restrict_oom_score_adj: the lab's processes may not lower their
// OOM score (no CAP_SYS_RESOURCE here), without it runc fails with
// "can't get final child's PID from pipe".
func ContainerdConfig(c Config) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var b strings.Builder
	fmt.Fprintf(&b, "version = 3\n")
	fmt.Fprintf(&b, "root = %s\nstate = %s\n\n", q("/var/lib/containerd"), q("/run/containerd"))
	fmt.Fprintf(&b, "[grpc]\n  address = %s\n\n", q(ContainerdSocket))
	fmt.Fprintf(&b, "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n\n")
	fmt.Fprintf(&b, "[plugins.\"io.containerd.cri.v1.images\"]\n  snapshotter = \"overlayfs\"\n")
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.cri.v1.images\".pinned_images]\n    sandbox = %s\n\n", q(c.SandboxImage))
	fmt.Fprintf(&b, "[plugins.\"io.containerd.cri.v1.runtime\"]\n")
	fmt.Fprintf(&b, "  restrict_oom_score_adj = true\n  netns_mounts_under_state_dir = true\n  enable_cdi = false\n")
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.cri.v1.runtime\".cni]\n    bin_dirs = [%s]\n    conf_dir = %s\n    max_conf_num = 1\n",
		q(CNIBinDir), q("/etc/cni/net.d"))
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.cri.v1.runtime\".containerd]\n    default_runtime_name = \"runc\"\n")
	fmt.Fprintf(&b, "    [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]\n      runtime_type = \"io.containerd.runc.v2\"\n")
	fmt.Fprintf(&b, "      [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc.options]\n        BinaryName = %s\n        SystemdCgroup = false\n",
		q(RuncPath))
	return []byte(b.String())
}

// CNIConfig is the node's pod network: a routed veth per pod (ptp) with
// an address of the node's slice from .2 up (host-local, leases in
// /var/lib/cni), the pod's default route via .1 on the node side; the
// lab's node routes carry the slices between nodes, as for lab pods.
func CNIConfig(c Config) ([]byte, error) {
	first := c.PodCIDR.Addr().Next()
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "lab",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": false,
				"mtu":    1500,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": "/var/lib/cni/networks",
					"ranges": []any{[]any{map[string]any{
						"subnet":     c.PodCIDR.String(),
						"rangeStart": first.Next().String(),
						"gateway":    first.String(),
					}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// cniFile is the CNI network's file in /etc/cni/net.d.
const cniFile = "10-lab.conflist"

// configFiles are the files Config renders, by name in ConfigDir (the
// CNI network's goes to /etc/cni/net.d).
func configFiles(c Config) (map[string][]byte, error) {
	kubelet, err := KubeletConfig(c)
	if err != nil {
		return nil, err
	}
	cni, err := CNIConfig(c)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"kubelet.yaml":    kubelet,
		"containerd.toml": ContainerdConfig(c),
		"10-lab.conflist": cni,
	}, nil
}

// Binds maps every MountPoints entry to its directory below root, the
// node's: <root>/var-lib-kubelet and so on.
func Binds(root string) map[string]string {
	out := map[string]string{}
	for _, mp := range MountPoints {
		out[mp] = filepath.Join(root, strings.ReplaceAll(strings.TrimPrefix(mp, "/"), "/", "-"))
	}
	return out
}
