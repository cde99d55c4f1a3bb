package lab

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/causeway-net/causeway/pkg/controlplane"
	"github.com/causeway-net/causeway/pkg/lab/netlab"
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
// clusters' control planes, then per node the kubelet and kube-proxy.
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
			units = append(units, processUnit(h, c.Name+"/"+n.Name+"/kubelet", netlab.Process{
				Path:    s.Self,
				Args:    []string{"lab", "kubelet", "--dir", s.Dir, "--cluster", c.Name, "--node", n.Name},
				LogPath: filepath.Join(logDir, "kubelet.log"),
			}))
			kubeconfig, err := cp.KubeconfigAt("kube-proxy-"+n.Name, NodeAPIServer, "system:kube-proxy", nil)
			if err != nil {
				return nil, err
			}
			units = append(units, processUnit(h, c.Name+"/"+n.Name+"/kube-proxy", netlab.Process{
				Netns:  h.Names().Node(c.Name, n.Name),
				Cgroup: h.Cgroups().NodeSystem(c.Name, n.Name),
				Path:   filepath.Join(s.BinDir, "kube-proxy"),
				Args: []string{
					"--kubeconfig=" + kubeconfig,
					"--hostname-override=" + nodeName,
					"--cluster-cidr=" + c.PodCIDR.String(),
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
			units = append(units, s.daemonUnits(h, c, n)...)
		}
	}
	return units, nil
}

// DaemonBinary is the path of a Causeway daemon binary: next to the
// causewayctl the lab runs (`make build` puts them all in bin/).
func (s *State) DaemonBinary(name string) string {
	return filepath.Join(filepath.Dir(s.Self), name)
}

// MissingDaemons lists the daemon binaries not found next to causewayctl.
func (s *State) MissingDaemons() []string {
	var missing []string
	for _, d := range []string{"gateway", "route-agent", "mcs-controller"} {
		if _, err := os.Stat(s.DaemonBinary(d)); err != nil {
			missing = append(missing, d)
		}
	}
	return missing
}

// daemonUnits are the Causeway daemons of one node, run exactly as a
// DaemonSet would run them: inside the node's network namespace (host
// network), in the node's system cgroup, each with the kubeconfig of its
// own ServiceAccount (least-privilege roles of the chart's templates/rbac, written by
// installIdentities once the API server runs; until then the daemon exits
// and the supervisor restarts it) reaching the cluster through the
// kubelet's forwarder. Binaries that are missing are skipped (the
// supervisor log says so).
func (s *State) daemonUnits(h *netlab.Host, c netlab.Cluster, n netlab.Node) []Unit {
	common := []string{
		"--broker-kubeconfig=" + s.BrokerKubeconfig(c.Name),
		"--cluster-id=" + c.Name,
		"--node-name=" + s.NodeName(c.Name, n.Name),
		"--pod-cidrs=" + c.PodCIDR.String(),
		"--service-cidrs=" + c.ServiceCIDR.String(),
	}
	type daemon struct {
		name string
		args []string
	}
	cable := cables[s.CableDriver()]
	ds := []daemon{{"route-agent", []string{
		"--metrics-addr=127.0.0.1:9532",
		"--node-ip=" + n.Address.Addr().String(),
		"--tunnel-mtu=" + strconv.Itoa(cable.mtu),
		"--cgroup-root=" + h.Cgroups().Node(c.Name, n.Name),
		"--bpffs=" + s.BPFFS(),
		"--vip-pin-dir=" + s.VIPPinDir(c.Name, n.Name),
	}}}
	if n.Name == c.Nodes[0].Name {
		// One MCS controller per cluster, like a one-replica Deployment.
		ds = append(ds, daemon{"mcs-controller", []string{"--metrics-addr=127.0.0.1:9534"}})
	}
	if n.Gateway() {
		gw := []string{
			"--metrics-addr=127.0.0.1:9531",
			"--public-ip=" + n.WANAddress.Addr().String(),
			"--private-ip=" + n.Address.Addr().String(),
			"--cable-driver=" + s.CableDriver(),
			"--port=" + strconv.Itoa(int(cable.port)),
			// WireGuard UAPI sockets are machine-wide: the name
			// carries the lab prefix (ipsec uses charon's ipsec0).
			"--tunnel-device=" + s.Prefix + c.Name + n.Name,
			"--state-dir=" + filepath.Join(s.NodeStateDir(c.Name, n.Name), "gateway"),
		}
		if s.Globalnet {
			gw = append(gw, "--globalnet") // health checks from the global CIDR
		} else {
			gw = append(gw, "--health-check-ip="+firstHost(n.PodCIDR).String())
		}
		ds = append(ds, daemon{"gateway", gw})
	}
	var units []Unit
	logDir := filepath.Join(s.LogDir(), c.Name, n.Name)
	for _, d := range ds {
		path := s.DaemonBinary(d.name)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		kubeconfig := s.DaemonKubeconfig(c.Name, d.name)
		args := append(append([]string{"--kubeconfig=" + kubeconfig}, common...), d.args...)
		u := processUnit(h, c.Name+"/"+n.Name+"/"+d.name, netlab.Process{
			Netns:   h.Names().Node(c.Name, n.Name),
			Cgroup:  h.Cgroups().NodeSystem(c.Name, n.Name),
			Path:    path,
			Args:    args,
			LogPath: filepath.Join(logDir, d.name+".log"),
		})
		// Written by `lab up` once the identities exist: starting before
		// would only fail and back off.
		u.Needs = []string{kubeconfig, s.BrokerKubeconfig(c.Name)}
		units = append(units, u)
	}
	return units
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

// firstHost is the first address of a prefix (the node's pod slice .1,
// which netlab never gives to a pod).
func firstHost(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }
