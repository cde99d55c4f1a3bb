package crinode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/lab/netlab"
)

// Node runs one lab node's containerd and kubelet.
type Node struct {
	Config
	Host *netlab.Host
	// Cluster and NodeID name the node in the lab (cgroups, namespace).
	Cluster, NodeID string
	// Binds are the node's mount namespace: mount point → host directory
	// (every MountPoints entry, the node's bpffs on /sys/fs/bpf, …). The
	// mount points must exist; the directories are created.
	Binds map[string]string
	// KubeletBin is the kubelet; ContainerdDir holds containerd,
	// containerd-shim-runc-v2 and ctr.
	KubeletBin, ContainerdDir string
	// Kubeconfig is the kubelet's identity (system:node:<NodeName>),
	// its server the API server forwarder inside the node.
	Kubeconfig string
	// Labels are the Node's labels besides the kubelet's own.
	Labels map[string]string
	// Images are image tarballs (docker save or OCI archives) imported
	// into containerd's k8s.io namespace before the kubelet starts.
	Images []string
	// LogDir receives containerd.log and kubelet.log.
	LogDir string
	// Forwards are the node's API server forwarders and egress.
	Forwards kubelet.Forwards
	// Client is an admin client of the cluster: it gives the Node its
	// pod CIDR (the lab's controller manager allocates none).
	Client kubernetes.Interface
	Log    *slog.Logger
}

// Run sets the node's mount namespace up and runs containerd and the
// kubelet until ctx ends or either exits (then it stops the other and
// returns; the supervisor starts it again). The process must run in a
// mount namespace of its own (netlab.Process.MountNS): Run refuses to
// mount anything in the host's. Pods keep running when Run returns.
func (n *Node) Run(ctx context.Context) error {
	if err := ownMountNamespace(); err != nil {
		return err
	}
	if err := n.mountBinds(); err != nil {
		return err
	}
	if err := n.Host.MkdirV1Node(n.Cluster, n.NodeID); err != nil {
		return err
	}
	if err := n.writeConfig(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()
	if err := n.Forwards.Serve(ctx, &bg); err != nil {
		return err
	}

	containerd, err := n.start("containerd", filepath.Join(n.ContainerdDir, "containerd"),
		"--config", filepath.Join(n.ConfigDir, "containerd.toml"))
	if err != nil {
		return err
	}
	defer containerd.stop()
	if err := n.waitContainerd(ctx, containerd); err != nil {
		return err
	}
	for _, img := range n.Images {
		if err := n.ctr(ctx, "images", "import", "--local", img); err != nil {
			return fmt.Errorf("import %s: %w", img, err)
		}
	}
	n.Log.Info("containerd up, images imported", "images", len(n.Images))

	args := []string{
		"--config=" + filepath.Join(n.ConfigDir, "kubelet.yaml"),
		"--kubeconfig=" + n.Kubeconfig,
		"--hostname-override=" + n.NodeName,
		"--node-ip=" + n.NodeIP.String(),
		"--cloud-provider=external", // initNode is the node's cloud provider
		"--v=1",
	}
	if len(n.Labels) > 0 {
		args = append(args, "--node-labels="+labels.Set(n.Labels).String())
	}
	// Before the kubelet: the DaemonSets' Pods (tolerating every taint)
	// are bound as soon as the Node exists, and the gateway takes its
	// public address from it when it starts.
	if err := n.initNode(ctx); err != nil {
		return fmt.Errorf("initialize the Node: %w", err)
	}
	kl, err := n.start("kubelet", n.KubeletBin, args...)
	if err != nil {
		return err
	}
	defer kl.stop()
	select {
	case <-ctx.Done():
		return nil
	case err := <-containerd.exited:
		return fmt.Errorf("containerd exited: %v (log %s)", err, containerd.log)
	case err := <-kl.exited:
		return fmt.Errorf("kubelet exited: %v (log %s)", err, kl.log)
	}
}

// ownMountNamespace fails unless this process's mount namespace differs
// from its parent's (the supervisor's, the host's).
func ownMountNamespace() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return err
	}
	if self == parent {
		return errors.New("not in a mount namespace of its own: refusing to bind-mount over the host's paths")
	}
	return nil
}

// mountBinds bind-mounts every host directory on its mount point,
// parents first.
func (n *Node) mountBinds() error {
	targets := make([]string, 0, len(n.Binds))
	for t := range n.Binds {
		targets = append(targets, t)
	}
	sort.Strings(targets)
	for _, t := range targets {
		src := n.Binds[t]
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(t); err != nil {
			return fmt.Errorf("mount point %s: %w", t, err)
		}
		if err := unix.Mount(src, t, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, t, err)
		}
		// Shared inside the node's namespace, which is all its peer
		// group: Bidirectional volume mounts (the route agent's bpffs)
		// need it.
		if err := unix.Mount("", t, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("make %s shared: %w", t, err)
		}
	}
	return nil
}

func (n *Node) writeConfig() error {
	files, err := configFiles(n.Config)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(n.ConfigDir, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		path := filepath.Join(n.ConfigDir, name)
		if name == cniFile {
			path = filepath.Join("/etc/cni/net.d", name)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// proc is a started containerd or kubelet.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan error
}

// start starts a program in the node's network namespace (and this
// process's mount namespace and cgroup), logging to LogDir/<name>.log.
func (n *Node) start(name, path string, args ...string) (*proc, error) {
	log := filepath.Join(n.LogDir, name+".log")
	cmd, err := n.Host.Start(netlab.Process{
		Netns: n.Forwards.NodeNS, Path: path, Args: args, LogPath: log,
		Env: append(os.Environ(), "PATH="+n.ContainerdDir+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
	})
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, log: log, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// stop ends the program: SIGTERM, SIGKILL after 2 s (the supervisor
// gives this process 3 s).
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(2 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}

// waitContainerd waits until containerd answers on its socket.
func (n *Node) waitContainerd(ctx context.Context, p *proc) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-p.exited:
			p.exited <- err
			return false, fmt.Errorf("containerd exited: %v (log %s)", err, p.log)
		default:
		}
		last = n.ctr(ctx, "version")
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("containerd not answering on %s (%v): %w", ContainerdSocket, last, err)
	}
	return nil
}

// ctr runs ctr against the node's containerd, namespace k8s.io (the
// CRI's).
func (n *Node) ctr(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.ContainerdDir, "ctr"),
		append([]string{"--address", ContainerdSocket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// initNode creates the Node before the kubelet registers (or finds it
// from an earlier start) and does for it what a cloud provider does (the
// kubelet runs with --cloud-provider=external, so it keeps what is set
// here): the Labels, the node's pod slice as spec.podCIDR(s) (the lab's
// controller manager allocates none), its addresses (InternalIP eth0,
// ExternalIP wan0 on a gateway node, which the gateway publishes as its
// public address; a kubelet reports only the first), and the
// uninitialized taint removed.
func (n *Node) initNode(ctx context.Context) error {
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		node, err := n.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			node, err = n.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.NodeName, Labels: n.Labels}}, metav1.CreateOptions{})
		}
		if err != nil {
			n.Log.Warn("read or create the Node", "err", err)
			return false, nil
		}
		if err := n.initSpec(ctx, node); err != nil {
			n.Log.Warn("initialize the Node's spec", "err", err)
			return false, nil
		}
		if err := n.initAddresses(ctx); err != nil {
			n.Log.Warn("set the Node's addresses", "err", err)
			return false, nil
		}
		n.Log.Info("node initialized", "node", n.NodeName, "podCIDR", n.PodCIDR, "addresses", n.addresses())
		return true, nil
	})
}

func (n *Node) initSpec(ctx context.Context, node *corev1.Node) error {
	taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(t corev1.Taint) bool { return t.Key == cloudTaint })
	labeled := true
	for k, v := range n.Labels {
		labeled = labeled && node.Labels[k] == v
	}
	if node.Spec.PodCIDR != "" && len(taints) == len(node.Spec.Taints) && labeled {
		return nil
	}
	// A kubelet applies --node-labels only to a Node it registers.
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	maps.Copy(node.Labels, n.Labels)
	if node.Spec.PodCIDR == "" {
		node.Spec.PodCIDR = n.PodCIDR.String()
		node.Spec.PodCIDRs = []string{n.PodCIDR.String()}
	}
	node.Spec.Taints = taints
	_, err := n.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	return err
}

func (n *Node) initAddresses(ctx context.Context) error {
	node, err := n.Client.CoreV1().Nodes().Get(ctx, n.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	want := n.addresses()
	if slices.Equal(node.Status.Addresses, want) {
		return nil
	}
	node.Status.Addresses = want
	_, err = n.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

func (n *Node) addresses() []corev1.NodeAddress {
	out := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.NodeIP.String()}}
	if n.ExternalIP.IsValid() {
		out = append(out, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: n.ExternalIP.String()})
	}
	return append(out, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.NodeName})
}

// cloudTaint is the taint a kubelet with --cloud-provider=external puts
// on its Node until the cloud provider initialized it.
const cloudTaint = "node.cloudprovider.kubernetes.io/uninitialized"
