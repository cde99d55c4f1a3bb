package lab

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/netlab"
)

// processUnit is a unit running p.
func processUnit(h *netlab.Host, name string, p netlab.Process) Unit {
	return Unit{
		Name:  name,
		Spec:  strings.Join(append([]string{p.Netns, p.Cgroup, p.Path}, p.Args...), " "),
		Start: func() (*exec.Cmd, error) { return h.Start(p) },
	}
}

// NodeAPIServer is where processes inside a node's namespace reach their
// cluster's API server: the node's kubelet forwards it to the control
// plane on the root namespace's loopback.
const NodeAPIServer = "https://127.0.0.1:6443"

// Units are every process of the lab, in start order: the broker's and the
// clusters' control planes, then per node the kubelet and kube-proxy. The
// Causeway daemons are no units: they are the chart's Pods (install.go),
// run by the kubelets.
func (s *State) Units(h *netlab.Host) ([]Unit, error) {
	var units []Unit
	for _, name := range append([]string{"broker"}, s.Members()...) {
		cfg, err := s.ControlPlaneConfig(name)
		if err != nil {
			return nil, err
		}
		_, procs, err := controlplane.Prepare(cfg)
		if err != nil {
			return nil, err
		}
		for _, pc := range procs {
			units = append(units, processUnit(h, pc.Name, netlab.Process{Path: pc.Path, Args: pc.Args, LogPath: pc.LogFile}))
		}
	}
	for _, c := range s.Topology.Clusters {
		cp, err := s.ControlPlane(c.Name)
		if err != nil {
			return nil, err
		}
		for _, n := range c.Nodes {
			nodeName := s.NodeName(c.Name, n.Name)
			logDir := filepath.Join(s.LogDir(), c.Name, n.Name)
			if s.containerd() {
				units = append(units, s.containerdUnit(h, c.Name, n.Name))
			} else {
				units = append(units, processUnit(h, c.Name+"/"+n.Name+"/kubelet", netlab.Process{
					Path:    s.Self,
					Args:    []string{"kubelet", "--dir", s.Dir, "--cluster", c.Name, "--node", n.Name},
					LogPath: filepath.Join(logDir, "kubelet.log"),
				}))
			}
			kubeconfig, err := cp.KubeconfigAt("kube-proxy-"+n.Name, NodeAPIServer, "system:kube-proxy", nil)
			if err != nil {
				return nil, err
			}
			clusterCIDR := c.PodCIDR.String()
			if c.DualStack() { // kube-proxy programs ip6tables too
				clusterCIDR += "," + c.PodCIDR6.String()
			}
			units = append(units, processUnit(h, c.Name+"/"+n.Name+"/kube-proxy", netlab.Process{
				Netns:  h.Names().Node(c.Name, n.Name),
				Cgroup: h.Cgroups().NodeSystem(c.Name, n.Name),
				Path:   filepath.Join(s.BinDir, "kube-proxy"),
				Args: []string{
					"--kubeconfig=" + kubeconfig,
					"--hostname-override=" + nodeName,
					"--cluster-cidr=" + clusterCIDR,
					"--proxy-mode=iptables",
					"--metrics-bind-address=127.0.0.1:10249",
					"--healthz-bind-address=127.0.0.1:10256",
					// Conntrack sysctls are per host, not per
					// namespace: leave them alone.
					"--conntrack-max-per-core=0",
					"--conntrack-tcp-timeout-established=0",
					"--conntrack-tcp-timeout-close-wait=0",
				},
				LogPath: filepath.Join(logDir, "kube-proxy.log"),
			}))
		}
	}
	return units, nil
}

// DaemonBinary is the path of a Causeway daemon binary: next to the
// causeway-lab the lab runs (`make build` puts them all in bin/).
func (s *State) DaemonBinary(name string) string {
	return filepath.Join(filepath.Dir(s.Self), name)
}

// MissingDaemons lists the daemon binaries not found next to causeway-lab.
func (s *State) MissingDaemons() []string {
	var missing []string
	for _, d := range []string{"gateway", "route-agent", "mcs-controller", "globalnet"} {
		if _, err := os.Stat(s.DaemonBinary(d)); err != nil {
			missing = append(missing, d)
		}
	}
	return missing
}

// NodeName is the Kubernetes Node name of a lab node: the node's name in
// the topology ("n0"), so a pod's spec.nodeName names its namespace.
func (s *State) NodeName(cluster, node string) string { return node }

// APIServerHostPort is the host:port of a control plane's API server.
func APIServerHostPort(cp *controlplane.ControlPlane) (string, error) {
	u, err := url.Parse(cp.URL)
	if err != nil {
		return "", fmt.Errorf("control plane URL %q: %w", cp.URL, err)
	}
	return u.Host, nil
}
