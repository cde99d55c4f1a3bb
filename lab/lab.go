// Package lab runs a whole ClusterSet on one Linux machine with no
// container runtime: every cluster is a real etcd + kube-apiserver +
// kube-controller-manager + kube-scheduler, one more control plane is the
// broker, every node and pod is a network namespace (package netlab), a
// lab kubelet per node runs pods as processes of built-in programs
// (package apps), and kube-proxy runs inside every node's namespace.
//
// `causeway-lab up` writes the lab's description to its state
// directory, builds the network, starts one detached supervisor process
// that starts and restarts the control planes, kubelets and kube-proxies,
// and installs Causeway into every cluster through its Helm chart, as
// `causewayctl join` does: the kubelets run the chart's Pods.
// `lab down` stops the supervisor and removes everything the lab made.
package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/kube"
)

// DefaultDir is where the lab keeps its state unless told otherwise.
const DefaultDir = "/var/lib/causeway/lab"

// Config is what `lab up` is asked for.
type Config struct {
	// Dir is the lab's state directory.
	Dir string
	// Prefix starts every kernel-visible name of the lab.
	Prefix string
	// Clusters is the number of member clusters (c1…cN).
	Clusters int
	// Nodes is the number of nodes per cluster.
	Nodes int
	// Gateways is how many of them (the first ones) are gateway
	// candidates; default 1.
	Gateways int
	// PodCIDRs and ServiceCIDRs override a cluster's defaults, by name.
	PodCIDRs, ServiceCIDRs map[string]string
	// BinDir holds the Kubernetes binaries.
	BinDir string
	// Self is the causeway-lab binary the lab's processes run (the
	// daemons and causewayctl are built next to it).
	Self string
	// NoDemo skips deploying the demo application.
	NoDemo bool
	// Cable is the gateways' cable driver: wireguard (default), ipsec or
	// vxlan.
	Cable string
	// NoGlobalnet runs the gateways without globalnet: clusters are then
	// reached through their pod and service CIDRs, and of two overlapping
	// clusters only the older is reachable from the others.
	NoGlobalnet bool
	// NoInstall brings the lab up without Causeway: no broker setup, no
	// chart, no gateway label on the nodes; JoinCommands say how to
	// install it as a user does.
	NoInstall bool
	// IPFamily is ipv4 (default) or dual: dual-stack clusters, cluster c
	// with the IPv6 pod and service CIDRs netlab.IPv6CIDRs(c).
	IPFamily string
	// Runtime is what runs the nodes' pods: RuntimeLab (default, the lab
	// kubelet) or RuntimeContainerd (a real kubelet and containerd per
	// node, running Causeway's image).
	Runtime string
	// ContainerdDir holds containerd, containerd-shim-runc-v2 and ctr
	// (RuntimeContainerd).
	ContainerdDir string
}

// IP families `lab up --ip-family` takes.
const (
	IPFamilyIPv4 = "ipv4"
	IPFamilyDual = "dual"
)

// cables are the cable drivers the lab can run (the chart's
// cable.driver; its ports and MTUs are the chart's defaults).
var cables = []string{"wireguard", "vxlan", "ipsec"}

// DefaultCable is the cable driver of a lab unless told otherwise.
const DefaultCable = "wireguard"

// State is the lab as written to <Dir>/lab.json by `lab up`; every other
// command and process of the lab reads it.
type State struct {
	Dir      string          `json:"dir"`
	Prefix   string          `json:"prefix"`
	BinDir   string          `json:"binDir"`
	Self     string          `json:"self"`
	Topology netlab.Topology `json:"topology"`
	Demo     bool            `json:"demo"`
	// Cable is the gateways' cable driver (empty in labs from before
	// the choice: wireguard).
	Cable string `json:"cable,omitempty"`
	// Globalnet: every cluster is reached through a global CIDR of
	// globalnet.DefaultSupernet.
	Globalnet bool `json:"globalnet"`
	// NoInstall: `lab up` installs no Causeway (`lab up --no-install`);
	// the user joins the clusters with causewayctl (JoinCommands).
	NoInstall bool              `json:"noInstall,omitempty"`
	Versions  map[string]string `json:"versions"`
	// Runtime is RuntimeLab (or empty, labs from before the choice) or
	// RuntimeContainerd, whose nodes run containerd from ContainerdDir,
	// Causeway's image and the lab image tagged ImageTag, and changed
	// HostChanges.
	Runtime       string       `json:"runtime,omitempty"`
	ContainerdDir string       `json:"containerdDir,omitempty"`
	ImageTag      string       `json:"imageTag,omitempty"`
	HostChanges   *HostChanges `json:"hostChanges,omitempty"`
}

// Topology turns the config into the lab's description: c1 and c2 share
// pod CIDR 10.244.0.0/16 and service CIDR 10.96.0.0/16, c3 uses
// 10.245.0.0/16 and 10.97.0.0/16, clusters beyond get 10.(242+i).0.0/16
// and 10.(94+i).0.0/16; with IPFamily dual cluster ci also gets
// fd00:10:244:<i>::/64 and fd00:10:96:<i>::/112.
func (c Config) Topology() (netlab.Topology, error) {
	if c.Clusters < 1 || c.Clusters > 9 {
		return netlab.Topology{}, fmt.Errorf("--clusters %d: want 1 to 9", c.Clusters)
	}
	if c.Nodes < 1 || c.Nodes > 16 {
		return netlab.Topology{}, fmt.Errorf("--nodes %d: want 1 to 16", c.Nodes)
	}
	if c.Gateways == 0 {
		c.Gateways = 1
	}
	if c.Gateways < 1 || c.Gateways > c.Nodes {
		return netlab.Topology{}, fmt.Errorf("--gateways %d: want 1 to --nodes (%d)", c.Gateways, c.Nodes)
	}
	switch c.IPFamily {
	case "", IPFamilyIPv4, IPFamilyDual:
	default:
		return netlab.Topology{}, fmt.Errorf("--ip-family %q: want %s or %s", c.IPFamily, IPFamilyIPv4, IPFamilyDual)
	}
	known := map[string]bool{}
	t := netlab.Topology{Prefix: c.Prefix, WAN: netlab.DefaultWAN}
	for i := 1; i <= c.Clusters; i++ {
		name := fmt.Sprintf("c%d", i)
		known[name] = true
		spec := netlab.ClusterSpec{Name: name, Index: i, Nodes: c.Nodes, Gateways: c.Gateways,
			PodCIDR: netlab.DefaultPodCIDR, ServiceCIDR: netlab.DefaultServiceCIDR}
		if i >= 3 {
			spec.PodCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(242 + i), 0, 0}), 16)
			spec.ServiceCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(94 + i), 0, 0}), 16)
		}
		if c.IPFamily == IPFamilyDual {
			spec.PodCIDR6, spec.ServiceCIDR6 = netlab.IPv6CIDRs(i)
		}
		var err error
		if s, ok := c.PodCIDRs[name]; ok {
			if spec.PodCIDR, err = parseCIDR("--pod-cidr "+name, s); err != nil {
				return netlab.Topology{}, err
			}
		}
		if s, ok := c.ServiceCIDRs[name]; ok {
			if spec.ServiceCIDR, err = parseCIDR("--service-cidr "+name, s); err != nil {
				return netlab.Topology{}, err
			}
		}
		cl, err := netlab.NewCluster(spec)
		if err != nil {
			return netlab.Topology{}, fmt.Errorf("cluster %s: %w", name, err)
		}
		t.Clusters = append(t.Clusters, cl)
	}
	for _, m := range []map[string]string{c.PodCIDRs, c.ServiceCIDRs} {
		for name := range m {
			if !known[name] {
				return netlab.Topology{}, fmt.Errorf("CIDR given for unknown cluster %q (clusters are c1…c%d)", name, c.Clusters)
			}
		}
	}
	return t, t.Validate()
}

func parseCIDR(what, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("%s: %w", what, err)
	}
	if p != p.Masked() || !p.Addr().Is4() {
		return p, fmt.Errorf("%s %q: want an IPv4 network address like %s", what, s, p.Masked())
	}
	return p, nil
}

// ParseCIDRFlags turns ["c1=10.1.0.0/16", …] into a map.
func ParseCIDRFlags(flag string, vals []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vals {
		k, cidr, ok := strings.Cut(v, "=")
		if !ok {
			return nil, fmt.Errorf("%s %q: want CLUSTER=CIDR", flag, v)
		}
		out[k] = cidr
	}
	return out, nil
}

// CableDriver is the gateways' cable driver.
func (s *State) CableDriver() string {
	if s.Cable == "" {
		return DefaultCable
	}
	return s.Cable
}

// TunnelDevice is the name of the tunnel device on a gateway node: the
// lab prefix + cluster + node (machine-wide unique, for wireguard-go's
// UAPI sockets), or charon's TUN for ipsec.
func (s *State) TunnelDevice(cluster, node string) string {
	if s.CableDriver() == "ipsec" {
		return "ipsec0"
	}
	return s.Prefix + cluster + node
}

// Paths.
func (s *State) file() string                       { return filepath.Join(s.Dir, "lab.json") }
func (s *State) statusFile() string                 { return filepath.Join(s.Dir, "status.json") }
func (s *State) supervisorPID() string              { return filepath.Join(s.Dir, "supervisor.pid") }
func (s *State) LogDir() string                     { return filepath.Join(s.Dir, "logs") }
func (s *State) controlPlaneDir(name string) string { return filepath.Join(s.Dir, name) }

// Members lists the cluster names.
func (s *State) Members() []string {
	var out []string
	for _, c := range s.Topology.Clusters {
		out = append(out, c.Name)
	}
	return out
}

// ControlPlaneConfig is the controlplane configuration of a cluster or of
// the broker ("broker").
func (s *State) ControlPlaneConfig(name string) (controlplane.Config, error) {
	// Pods reach the API servers through their node's kubelet at
	// netlab.APIAddress.
	cfg := controlplane.Config{Name: name, Dir: s.controlPlaneDir(name), BinDir: s.BinDir, Detach: true,
		ServingIPs: []net.IP{netlab.APIAddress.AsSlice()}}
	if name == "broker" {
		cfg.ServiceCIDR = "10.255.0.0/24"
		// Its quota controller enforces the members' ResourceQuotas
		// (pkg/broker.Quota), as a real cluster's does.
		cfg.Components = []controlplane.Component{controlplane.ControllerManager}
		return cfg, nil
	}
	c, ok := s.Topology.Cluster(name)
	if !ok {
		return cfg, fmt.Errorf("no cluster %q in the lab (have %s, broker)", name, strings.Join(s.Members(), ", "))
	}
	cfg.ServiceCIDR = c.ServiceCIDR.String()
	cfg.ClusterCIDR = c.PodCIDR.String()
	if s.containerd() {
		// A real kubelet gives pods the `kubernetes` Service's address
		// (KubernetesEndpoints): the certificate must name it.
		cfg.ServingIPs = append(cfg.ServingIPs, c.ServiceCIDR.Addr().Next().AsSlice())
	}
	if c.DualStack() {
		// Dual-stack API server: Services get an IPv4 and an IPv6
		// ClusterIP (ipFamilyPolicy PreferDualStack or RequireDualStack).
		cfg.ServiceCIDR += "," + c.ServiceCIDR6.String()
		cfg.ClusterCIDR += "," + c.PodCIDR6.String()
	}
	cfg.Components = []controlplane.Component{controlplane.ControllerManager, controlplane.Scheduler}
	// The API server reaches the kubelets (logs, exec, port-forward)
	// through the egress proxy the kubelet of the cluster's first node
	// serves.
	cfg.ClusterEgress = true
	return cfg, nil
}

// ControlPlane returns a handle on a running cluster's or the broker's
// control plane.
func (s *State) ControlPlane(name string) (*controlplane.ControlPlane, error) {
	cfg, err := s.ControlPlaneConfig(name)
	if err != nil {
		return nil, err
	}
	return controlplane.Adopt(cfg)
}

// ErrNoLab is returned when no lab is up in the directory.
var ErrNoLab = errors.New("no lab is up (run `causeway-lab up`)")

// Load reads the state of the lab in dir.
func Load(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, "lab.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoLab
	} else if err != nil {
		return nil, err
	}
	s := &State{}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("parse %s/lab.json: %w", dir, err)
	}
	return s, nil
}

func (s *State) save() error {
	if err := os.MkdirAll(s.LogDir(), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(s.file(), b, 0o644)
}

// Host is the netlab host of the lab.
func (s *State) Host() (*netlab.Host, error) {
	return netlab.NewHost(netlab.Config{Prefix: s.Prefix})
}

// RESTConfig is an admin REST config of a cluster's (or the broker's) API
// server.
func (s *State) RESTConfig(name string) (*rest.Config, error) {
	cp, err := s.ControlPlane(name)
	if err != nil {
		return nil, err
	}
	return cp.RESTConfig()
}

// Client is an admin client of a cluster's (or the broker's) API server.
func (s *State) Client(name string) (client.Client, error) {
	rc, err := s.RESTConfig(name)
	if err != nil {
		return nil, err
	}
	return client.New(rc, client.Options{Scheme: kube.NewScheme()})
}
