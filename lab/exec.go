package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab/netlab"
)

// Exec starts path with args inside a pod's network namespace and cgroup
// (the node's, for a hostNetwork pod) and returns the running command.
func (s *State) Exec(ctx context.Context, cluster, namespace, pod, path string, args []string, stdin io.Reader, stdout, stderr io.Writer) (*exec.Cmd, error) {
	cl, err := s.Client(cluster)
	if err != nil {
		return nil, err
	}
	p := &corev1.Pod{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: pod}, p); err != nil {
		return nil, fmt.Errorf("pod %s/%s/%s: %w", cluster, namespace, pod, err)
	}
	if p.Spec.NodeName == "" || p.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s/%s/%s is not running yet (phase %s)", cluster, namespace, pod, p.Status.Phase)
	}
	lp := netlab.Pod{Cluster: cluster, Node: p.Spec.NodeName, Namespace: namespace, Name: pod}
	return s.ExecIn(lp, p.Spec.HostNetwork, path, args, stdin, stdout, stderr)
}

// ExecIn is Exec in a pod already looked up (its node, and whether it
// runs in the host network): it needs no API server.
func (s *State) ExecIn(lp netlab.Pod, hostNetwork bool, path string, args []string, stdin io.Reader, stdout, stderr io.Writer) (*exec.Cmd, error) {
	h, err := s.Host()
	if err != nil {
		return nil, err
	}
	netns, cgroup := h.Names().PodOf(lp), h.Cgroups().PodOf(lp)
	if hostNetwork {
		netns, cgroup = h.Names().Node(lp.Cluster, lp.Node), h.Cgroups().NodeSystem(lp.Cluster, lp.Node)
	}
	// Pods share this machine's files but not its resolver: give the
	// command a private mount namespace where /etc/resolv.conf names the
	// cluster's DNS service, as a kubelet does for a container.
	resolv, err := s.resolvConf(lp.Cluster, lp.Namespace)
	if err != nil {
		return nil, err
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, err
	}
	script := `mount --bind "$0" /etc/resolv.conf && exec "$@"`
	return h.Start(netlab.Process{
		Netns: netns, Cgroup: cgroup,
		Path: unshare, Args: append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, resolv, path}, args...),
		Env:   os.Environ(),
		Stdin: stdin, Stdout: stdout, Stderr: stderr,
	})
}
