package lab

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab/crinode"
	"github.com/causeway-net/causeway/lab/kubelet"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/install"
	"github.com/causeway-net/causeway/pkg/kube"
)

// ChartValues are the values the lab installs the Helm chart with in
// cluster c, over the chart's defaults: the cluster's ID and CIDRs (both
// families in a dual-stack cluster, as join discovers them), the
// lab's cable and globalnet setting, and for the gateways a tunnel
// device name unique on the machine (every lab node shares one kernel,
// and wireguard-go's UAPI sockets are machine-wide: <prefix><cluster>
// <node>, the node from the Pod's NODE_NAME) and, without globalnet, the
// cluster's health-check address (the first host of its first node's pod
// slice, which netlab never gives a pod; every candidate uses it while
// active, as under globalnet the global CIDR's).
func (s *State) ChartValues(c netlab.Cluster) map[string]any {
	var gwArgs []any
	if s.CableDriver() != "ipsec" { // ipsec: charon's ipsec0
		gwArgs = append(gwArgs, "--tunnel-device="+s.Prefix+c.Name+"$(NODE_NAME)")
	}
	if !s.Globalnet {
		gwArgs = append(gwArgs, "--health-check-ip="+firstHost(c.Nodes[0].PodCIDR).String())
	}
	cable := map[string]any{"driver": s.CableDriver()}
	values := map[string]any{
		"clusterID":    c.Name,
		"podCIDRs":     prefixValues(c.PodCIDRs()),
		"serviceCIDRs": prefixValues(c.ServiceCIDRs()),
		"namespace":    map[string]any{"create": true},
		"cable":        cable,
		"globalnet":    map[string]any{"enabled": s.Globalnet},
		"gateway":      map[string]any{"extraArgs": gwArgs},
	}
	if s.containerd() { // Causeway's image as the nodes imported it; the hybrid layout's cgroup v2
		values["image"] = map[string]any{"tag": s.ImageTag}
		values["routeAgent"] = map[string]any{"cgroupHostPath": crinode.CgroupV2Mount}
	}
	return values
}

// renderChart renders the chart with the lab's values of a cluster.
func (s *State) renderChart(cluster string) ([]*unstructured.Unstructured, error) {
	c, ok := s.Topology.Cluster(cluster)
	if !ok {
		return nil, fmt.Errorf("no cluster %q in the lab", cluster)
	}
	objs, err := chart.Render(s.ChartValues(c))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	return objs, nil
}

// installCauseway installs Causeway into every cluster the way
// `causewayctl join` does (pkg/install): it claims the cluster's ID in
// the broker with the member identity of ids, stores that identity as
// Secret causeway-system/causeway-broker (its server the broker's
// forwarder at netlab.APIAddress:6444, which every node and pod
// reaches; the MCS controller rotates its token there), applies the CRDs
// and the chart rendered with ChartValues, and writes the About API's
// ClusterProperties. The kubelets run the Pods.
func (s *State) installCauseway(ctx context.Context, ids map[string][]byte) error {
	return forEach(s.Members(), func(name string) error {
		objs, err := s.renderChart(name)
		if err != nil {
			return err
		}
		rc, err := s.RESTConfig(name)
		if err != nil {
			return err
		}
		cl, err := s.Client(name)
		if err != nil {
			return err
		}
		if err := install.Claim(ctx, cl, name, ids[name]); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		member, err := broker.WithServer(ids[name], brokerServer())
		if err != nil {
			return err
		}
		if err := install.StoreBrokerSecret(ctx, cl, kube.Namespace, member); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		if err := install.Apply(ctx, rc, cl, objs); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		if err := about.Ensure(ctx, cl, name, about.DefaultClusterSet); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		return nil
	})
}

// waitCauseway waits, at most timeout, until every workload of the chart
// has its Pods Ready in every cluster (install.WaitReady, as join
// waits); the error names the Pods that are not, with the last lines of
// their containers' logs.
func (s *State) waitCauseway(ctx context.Context, clients map[string]client.Client, timeout time.Duration) error {
	return forEach(s.Members(), func(name string) error {
		objs, err := s.renderChart(name)
		if err != nil {
			return err
		}
		if err := install.WaitReady(ctx, clients[name], objs, timeout, func(string) {}); err != nil {
			return fmt.Errorf("cluster %s: %w%s", name, err, s.notReadyLogs(ctx, clients[name], name))
		}
		return nil
	})
}

// notReadyLogs shows the last log lines of every container of the Pods
// in causeway-system of a cluster that are not Ready.
func (s *State) notReadyLogs(ctx context.Context, cl client.Client, cluster string) string {
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(kube.Namespace)); err != nil {
		return "\n(list Pods: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, p := range pods.Items {
		if kube.PodReady(&p) || p.Spec.NodeName == "" {
			continue
		}
		for _, c := range p.Spec.Containers {
			log := kubelet.ContainerLog(s.NodeStateDir(cluster, p.Spec.NodeName), p.Namespace, p.Name, c.Name)
			fmt.Fprintf(&b, "\n%s/%s on %s: last lines of %s:\n%s", cluster, p.Name, p.Spec.NodeName, log, lastLines(log, 5))
		}
	}
	return b.String()
}

// firstHost is the first address of a prefix (a node's pod slice .1,
// which netlab never gives to a pod).
func firstHost(p netip.Prefix) netip.Addr { return p.Masked().Addr().Next() }

// brokerServer is where processes inside a node's namespace and its
// pods reach the broker: the node's kubelet forwards port 6444 of every
// node address to the broker's API server.
func brokerServer() string {
	return "https://" + netip.AddrPortFrom(netlab.APIAddress, kubelet.BrokerPort).String()
}

// prefixValues are ps as a chart list value.
func prefixValues(ps []netip.Prefix) []any {
	out := make([]any, len(ps))
	for i, s := range prefixStrings(ps) {
		out[i] = s
	}
	return out
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
