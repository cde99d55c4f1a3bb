package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/imagebuild"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/crinode"
	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/lab/netlab"
)

// Runtimes `lab up --runtime` takes: the lab's own kubelet (pods as
// processes of the lab's binaries), or a real kubelet with containerd
// (pods as containers of real images).
const (
	RuntimeLab        = "lab"
	RuntimeContainerd = "containerd"
)

// ContainerdVersion is the containerd hack/k8s-binaries.sh builds.
const ContainerdVersion = "v2.4.2"

// DefaultContainerdDir is where hack/k8s-binaries.sh puts containerd,
// containerd-shim-runc-v2 and ctr ($CAUSEWAY_CONTAINERD_BIN overrides).
func DefaultContainerdDir() string {
	if d := os.Getenv("CAUSEWAY_CONTAINERD_BIN"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(controlplane.DefaultBinDir()), "containerd-"+ContainerdVersion)
}

// kubeletSysctls are the host-wide sysctls a real kubelet sets at start
// (its kernel tunables); `lab up --runtime containerd` records them
// first and `lab down` writes them back.
var kubeletSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// HostChanges are what a lab with real kubelets changes on the host
// outside its own names, to be undone by `lab down`.
type HostChanges struct {
	// Sysctls are the kubeletSysctls' values before the lab.
	Sysctls map[string]string `json:"sysctls"`
	// Created are the mount points (crinode.MountPoints and their
	// parents) the lab created, parents first.
	Created []string `json:"created,omitempty"`
}

// RuntimeName is the lab's container runtime (RuntimeLab for labs from
// before the choice).
func (s *State) RuntimeName() string {
	if s.Runtime == "" {
		return RuntimeLab
	}
	return s.Runtime
}

// containerd tells whether the lab's nodes run a real kubelet and
// containerd.
func (s *State) containerd() bool { return s.RuntimeName() == RuntimeContainerd }

// causewayImageTarball is Causeway's image as `make image` writes it,
// next to causeway-lab (bin/); labImageTarball is the lab image beside
// it: Causeway's image plus causeway-lab.
func (s *State) causewayImageTarball() string {
	return filepath.Join(filepath.Dir(s.Self), "causeway-image.tar")
}
func (s *State) labImageTarball() string {
	return filepath.Join(filepath.Dir(s.Self), "causeway-lab-image.tar")
}

// labImagesTarball holds every image a containerd lab's nodes import.
func (s *State) labImagesTarball() string { return filepath.Join(s.Dir, "images", "lab.tar") }

// causewayImage is the image reference of Causeway's image in a
// containerd lab (its `make image` tag), the chart's workloads' image;
// labImage the lab image's, the demo Pods' and the sandbox (pause) image.
func (s *State) causewayImage() string { return ImageCauseway + ":" + s.ImageTag }
func (s *State) labImage() string      { return imagebuild.LabRepository + ":" + s.ImageTag }

// prepareContainerd checks what a containerd lab needs on the host,
// records the host's state the kubelets change (once: a repairing
// `lab up` keeps the first record), creates the mount points and writes
// the lab's images.
func (s *State) prepareContainerd(old *State) error {
	var missing []string
	need := []string{filepath.Join(s.BinDir, "kubelet"), crinode.RuncPath, filepath.Join(crinode.CNIBinDir, "ptp"),
		filepath.Join(crinode.CNIBinDir, "host-local"), filepath.Join(crinode.CNIBinDir, "loopback")}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		need = append(need, filepath.Join(s.ContainerdDir, b))
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("--runtime containerd needs %s (hack/k8s-binaries.sh builds kubelet and containerd; hack/host-setup.sh installs runc and containernetworking-plugins)",
			strings.Join(missing, ", "))
	}
	h, err := s.Host()
	if err != nil {
		return err
	}
	if h.Cgroups().Root != crinode.CgroupV2Mount {
		return fmt.Errorf("--runtime containerd needs the hybrid cgroup layout (cgroup v2 at %s, v1 hierarchies beside it); cgroup v2 is at %s here",
			crinode.CgroupV2Mount, h.Cgroups().Root)
	}
	for _, f := range []string{s.causewayImageTarball(), s.labImageTarball()} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("--runtime containerd runs Causeway's image and the lab image: %w (run `make image`)", err)
		}
	}
	if old != nil && old.HostChanges != nil {
		s.HostChanges = old.HostChanges
	} else {
		s.HostChanges = &HostChanges{Sysctls: map[string]string{}}
		for _, k := range kubeletSysctls {
			v, err := os.ReadFile(sysctlPath(k))
			if err != nil {
				return fmt.Errorf("read sysctl %s: %w", k, err)
			}
			s.HostChanges.Sysctls[k] = strings.TrimSpace(string(v))
		}
	}
	for _, mp := range crinode.MountPoints {
		created, err := mkdirAllCreated(mp)
		if err != nil {
			return err
		}
		s.HostChanges.Created = append(s.HostChanges.Created, created...)
	}
	return s.writeLabImages()
}

// writeLabImages writes labImagesTarball: Causeway's image and the lab
// image, both under the tag of one `make image`.
func (s *State) writeLabImages() error {
	img, tag, err := imagebuild.ReadTarball(s.causewayImageTarball())
	if err != nil {
		return err
	}
	if tag.Context().Name() != ImageCauseway {
		return fmt.Errorf("%s holds %s, not %s", s.causewayImageTarball(), tag, ImageCauseway)
	}
	s.ImageTag = tag.TagStr()
	labImg, labTag, err := imagebuild.ReadTarball(s.labImageTarball())
	if err != nil {
		return err
	}
	if labTag.String() != s.labImage() {
		return fmt.Errorf("%s holds %s, not %s (the lab image of %s): run `make image`", s.labImageTarball(), labTag, s.labImage(), tag)
	}
	if err := os.MkdirAll(filepath.Dir(s.labImagesTarball()), 0o755); err != nil {
		return err
	}
	return imagebuild.WriteTarballs(s.labImagesTarball(), map[name.Tag]v1.Image{tag: img, labTag: labImg})
}

// mkdirAllCreated is os.MkdirAll returning the directories it created,
// parents first.
func mkdirAllCreated(dir string) ([]string, error) {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		created = append([]string{d}, created...)
	}
	return created, os.MkdirAll(dir, 0o755)
}

func sysctlPath(key string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
}

// restoreHost undoes HostChanges: the sysctls' values before the lab,
// the mount points the lab created removed (children first, only when
// empty).
func restoreHost(hc *HostChanges) error {
	if hc == nil {
		return nil
	}
	var errs []error
	for k, v := range hc.Sysctls {
		if err := os.WriteFile(sysctlPath(k), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	created := slices.Clone(hc.Created)
	slices.Sort(created)
	for i := len(created) - 1; i >= 0; i-- {
		if err := unix.Rmdir(created[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove %s: %w", created[i], err))
		}
	}
	return errors.Join(errs...)
}

// containerdUnit is a node of a containerd lab: `causeway-lab
// kubelet` in a mount namespace of its own, which runs the node's
// containerd and real kubelet (crinode).
func (s *State) containerdUnit(h *netlab.Host, cluster, node string) Unit {
	return processUnit(h, cluster+"/"+node+"/kubelet", netlab.Process{
		Cgroup:  h.Cgroups().NodeSystem(cluster, node),
		MountNS: true,
		Path:    s.Self,
		Args:    []string{"kubelet", "--dir", s.Dir, "--cluster", cluster, "--node", node},
		LogPath: filepath.Join(s.LogDir(), cluster, node, "node.log"),
	})
}

// runContainerdNode runs a node's containerd and real kubelet.
func (s *State) runContainerdNode(ctx context.Context, nc nodeContext) error {
	cluster, node := nc.cluster.Name, nc.node.Name
	nodeName := s.NodeName(cluster, node)
	cfgDir := filepath.Join(s.NodeStateDir(cluster, node), "config")
	kubeconfig, err := nc.cp.KubeconfigAt("kubelet-"+cluster+"-"+node, NodeAPIServer, "system:node:"+nodeName, []string{"system:nodes"})
	if err != nil {
		return err
	}
	labels := map[string]string{}
	if nc.node.Gateway() && !s.NoInstall {
		labels[v1alpha1.LabelGatewayNode] = "true"
	}
	binds := map[string]string{
		"/sys/fs/bpf":         s.NodeBPFFS(cluster, node),
		crinode.CgroupV2Mount: nc.host.Cgroups().Node(cluster, node),
	}
	for mp, dir := range crinode.Binds(filepath.Join(s.NodeStateDir(cluster, node), "root")) {
		binds[mp] = dir
	}
	// The gateway's state as the lab kubelet maps it.
	binds["/var/lib/causeway/gateway"] = filepath.Join(s.NodeStateDir(cluster, node), "gateway")
	kc, err := kubernetes.NewForConfig(nc.admin)
	if err != nil {
		return err
	}
	n := &crinode.Node{
		Config: crinode.Config{
			NodeName: nodeName, NodeIP: nc.node.Address.Addr(), PodCIDR: nc.node.PodCIDR,
			ExternalIP:   nc.node.WANAddress.Addr(), // invalid unless a gateway node
			ClusterDNS:   DNSServiceIP(nc.cluster.ServiceCIDR),
			CgroupRoot:   nc.host.Cgroups().RelNode(cluster, node),
			SandboxImage: s.labImage(),
			ConfigDir:    cfgDir,
			CACertFile:   nc.cp.CACertFile(), ServingCertFile: nc.cert, ServingKeyFile: nc.key,
		},
		Host: nc.host, Cluster: cluster, NodeID: node,
		Binds:      binds,
		KubeletBin: filepath.Join(s.BinDir, "kubelet"), ContainerdDir: s.ContainerdDir,
		Kubeconfig: kubeconfig,
		Labels:     labels,
		Images:     []string{s.labImagesTarball()},
		LogDir:     filepath.Join(s.LogDir(), cluster, node),
		Forwards:   nc.forwards,
		Client:     kc,
		Log:        slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "lab-node", "cluster", cluster, "node", node),
	}
	return n.Run(ctx)
}

// nodeContext is what both kinds of node get from RunKubelet.
type nodeContext struct {
	cluster   netlab.Cluster
	node      netlab.Node
	cp        *controlplane.ControlPlane
	admin     *rest.Config
	host      *netlab.Host
	cert, key string // the kubelet API's serving certificate
	forwards  kubelet.Forwards
}
