package lab

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/kubelet"
)

// RunKubelet runs one node (the hidden `causeway-lab kubelet`, a unit
// of the supervisor) until ctx ends: the lab kubelet, or in a lab of
// RuntimeContainerd the node's containerd and real kubelet.
func RunKubelet(ctx context.Context, dir, cluster, node string) error {
	st, err := Load(dir)
	if err != nil {
		return err
	}
	c, ok := st.Topology.Cluster(cluster)
	if !ok {
		return fmt.Errorf("no cluster %q in the lab", cluster)
	}
	n, ok := c.Node(node)
	if !ok {
		return fmt.Errorf("no node %q in cluster %s", node, cluster)
	}
	cp, err := st.ControlPlane(cluster)
	if err != nil {
		return err
	}
	rc, err := cp.RESTConfig()
	if err != nil {
		return err
	}
	apiserver, err := APIServerHostPort(cp)
	if err != nil {
		return err
	}
	bcp, err := st.ControlPlane("broker")
	if err != nil {
		return err
	}
	broker, err := APIServerHostPort(bcp)
	if err != nil {
		return err
	}
	h, err := st.Host()
	if err != nil {
		return err
	}
	ips := []net.IP{n.Address.Addr().AsSlice()}
	if n.Gateway() {
		ips = append(ips, n.WANAddress.Addr().AsSlice())
	}
	cert, key, err := cp.KubeletServingCert(st.NodeName(cluster, node), ips)
	if err != nil {
		return err
	}
	// The kubelet of the cluster's first node serves the API server's
	// egress, through which it reaches every kubelet API.
	var egress string
	if n.Name == c.Nodes[0].Name {
		egress = cp.EgressSocket()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "lab-kubelet", "cluster", cluster, "node", node)
	if st.containerd() {
		return st.runContainerdNode(ctx, nodeContext{
			cluster: c, node: n, cp: cp, admin: rc, host: h, cert: cert, key: key,
			forwards: kubelet.Forwards{Host: h, NodeNS: h.Names().Node(cluster, node), APIServer: apiserver, Broker: broker,
				EgressSocket: egress, Log: log},
		})
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	labels := map[string]string{}
	// Without the lab's install, `causewayctl join --gateway-node`
	// labels the gateways (and uninstall removes the label).
	if n.Gateway() && !st.NoInstall {
		labels[v1alpha1.LabelGatewayNode] = "true"
	}
	reg := apps.NewRegistry(st.Self)
	st.registerCoreDNS(reg, cluster)
	st.registerCauseway(reg)
	k, err := kubelet.New(kubelet.Config{
		Client:  kc,
		Host:    h,
		Cluster: c,
		Node:    n,
		Apps:    reg,
		Labels:  labels,
		// Pods resolve through the cluster's CoreDNS, as on a real node.
		ClusterDNS:       DNSServiceIP(c.ServiceCIDR),
		APIServerForward: apiserver,
		BrokerForward:    broker,
		Serving: &kubelet.Serving{
			CertFile: cert, KeyFile: key,
			ClientCAFile: cp.CACertFile(), ClientUser: controlplane.KubeletClientUser,
		},
		EgressSocket: egress,
		// The chart's hostPaths: the node's own state directory (the
		// gateway's keys, charon's files), cgroup (where the route agent
		// attaches its VIP programs: the node's, not the host's root) and
		// bpffs directory.
		HostPaths: map[string]string{
			"/var/lib/causeway": st.NodeStateDir(cluster, node),
			"/sys/fs/cgroup":    h.Cgroups().Node(cluster, node),
			"/sys/fs/bpf":       st.NodeBPFFS(cluster, node),
		},
		StateDir: st.NodeStateDir(cluster, node),
		Log:      log,
	})
	if err != nil {
		return err
	}
	return k.Run(ctx)
}
