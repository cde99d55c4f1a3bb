package ctl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/nat"
	"github.com/causeway-net/causeway/pkg/nodeview"
	"github.com/causeway-net/causeway/pkg/routeagent"
)

// finding is one diagnose result.
type finding struct {
	ok          bool
	what, about string
}

func newDiagnoseCommand() *cobra.Command {
	cs := &clusterSetFlags{}
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Check the ClusterSet: gateways, tunnel health, refused remotes and records, and every node's forwarding, devices and chains",
		Long: `Check every cluster of the ClusterSet and print one line per check:
  - exactly one active gateway per cluster;
  - every tunnel connected, with less than half of its last ten health
    checks lost (one late echo of a busy gateway is not a fault);
  - remote Clusters and Endpoints refused by validation (with the reason);
  - remote export records refused by the MCS controller (with the reason);
and inside every node with a route agent (its inspect command, run in its
Pod through pods/exec): IP forwarding, the route agent's overlay device,
its iptables chains (MSS clamping, forwarding, NAT) jumped to from the
builtin chains, and on each active gateway's node the tunnel device and,
under globalnet, the globalnet nftables table. Exits non-zero when a check
fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			var fs []finding
			fs = append(fs, diagnoseAPI(cmd.Context(), clusters)...)
			fs = append(fs, diagnoseNodes(cmd.Context(), clusters)...)
			return report(cmd.OutOrStdout(), fs)
		},
	}
	cs.addFlags(cmd.Flags())
	return cmd
}

func report(w io.Writer, fs []finding) error {
	failed := 0
	for _, f := range fs {
		mark := "ok  "
		if !f.ok {
			mark, failed = "FAIL", failed+1
		}
		fmt.Fprintf(w, "%s %-40s %s\n", mark, f.what, f.about)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(fs))
	}
	fmt.Fprintf(w, "all %d checks passed\n", len(fs))
	return nil
}

func diagnoseAPI(ctx context.Context, clusters []memberCluster) []finding {
	var fs []finding
	refused := map[[2]string]string{} // {by, whom} → reason
	var refusals []finding
	for _, c := range clusters {
		var eps v1alpha1.EndpointList
		if err := c.Client.List(ctx, &eps, client.InNamespace(gwNamespace)); err != nil {
			fs = append(fs, finding{false, c.Name + ": endpoints", err.Error()})
			continue
		}
		for _, e := range eps.Items {
			for _, cond := range e.Status.Conditions {
				if cond.Type == v1alpha1.ConditionValid && cond.Status != "True" {
					// A refused remote is the validation working, not a
					// fault; say it so the user knows why there is no tunnel.
					refusals = append(refusals, finding{true, c.Name + ": remote " + e.Name + " refused", cond.Reason + ": " + cond.Message})
					refused[[2]string{c.Name, e.Name}] = cond.Reason
				}
			}
		}
	}
	gws := gatewaysByCluster(ctx, clusters)
	for _, c := range clusters {
		for _, f := range gws[c.Name] {
			for k, reason := range refused {
				if !f.ok && strings.HasSuffix(f.what, "→ "+k[0]) && k[1] == c.Name {
					f.about += fmt.Sprintf(" (%s refuses %s: %s)", k[0], c.Name, reason)
				}
			}
			fs = append(fs, f)
		}
	}
	fs = append(fs, refusals...)
	return append(fs, diagnoseRecords(ctx, clusters)...)
}

// diagnoseRecords lists the remote export records each cluster's MCS
// controller refused (pkg/addrpolicy.CheckRecord): the ServiceImports'
// RemoteRecordRefused conditions, and, for Services of which every
// record was refused (no import), the Warning Events on the refused
// cluster's Endpoint mirror. Like a refused remote, a refused record is
// the policy working: reported, not failed.
func diagnoseRecords(ctx context.Context, clusters []memberCluster) []finding {
	var fs []finding
	for _, c := range clusters {
		var sis mcsv1beta1.ServiceImportList
		if err := c.Client.List(ctx, &sis); err != nil {
			fs = append(fs, finding{false, c.Name + ": service imports", err.Error()})
			continue
		}
		for _, si := range sis.Items {
			cond := meta.FindStatusCondition(si.Status.Conditions, mcs.ConditionRemoteRecordRefused)
			if cond != nil && cond.Status == metav1.ConditionTrue {
				fs = append(fs, finding{true, fmt.Sprintf("%s: import %s/%s: record refused", c.Name, si.Namespace, si.Name), cond.Message})
			}
		}
		var evs eventsv1.EventList
		if err := c.Client.List(ctx, &evs, client.InNamespace(gwNamespace)); err != nil {
			fs = append(fs, finding{false, c.Name + ": events", err.Error()})
			continue
		}
		for _, ev := range evs.Items {
			if ev.Reason == mcs.EventRemoteRecordRefused && ev.Regarding.Kind == "Endpoint" {
				fs = append(fs, finding{true, fmt.Sprintf("%s: remote %s: record refused", c.Name, ev.Regarding.Name),
					fmt.Sprintf("%s (Event, %s ago)", ev.Note, time.Since(eventTime(ev)).Round(time.Second))})
			}
		}
	}
	return fs
}

// eventTime is when an Event was last seen.
func eventTime(ev eventsv1.Event) time.Time {
	if ev.Series != nil {
		return ev.Series.LastObservedTime.Time
	}
	return ev.EventTime.Time
}

// diagnoseLossLimit is the health-check loss (percent of the last ten
// echoes, one second at the default interval) from which a connected
// tunnel is a finding. An echo is lost when its answer takes more than
// two intervals, so one scheduling stall of a busy gateway costs 10–20 %
// without anything being wrong with the path.
const diagnoseLossLimit = 50

// checkTunnel is the finding on one gateway's connection to a remote
// cluster (pure): connected, with less than diagnoseLossLimit loss.
func checkTunnel(cluster, node string, c v1alpha1.Connection) finding {
	loss := int32(0)
	if c.LatencyRTT != nil {
		loss = c.LatencyRTT.LossPercent
	}
	about := fmt.Sprintf("%s, loss %d%%", c.Status, loss)
	if c.StatusMessage != "" {
		about += ": " + c.StatusMessage
	}
	return finding{c.Status == v1alpha1.Connected && loss < diagnoseLossLimit, fmt.Sprintf("%s: tunnel %s → %s", cluster, node, c.ClusterID), about}
}

func gatewaysByCluster(ctx context.Context, clusters []memberCluster) map[string][]finding {
	out := map[string][]finding{}
	active := map[string]int{}
	for _, g := range listGateways(ctx, clusters) {
		if g.Error != "" {
			out[g.Cluster] = append(out[g.Cluster], finding{false, g.Cluster + ": gateways", g.Error})
			continue
		}
		if g.HAStatus == v1alpha1.HAStatusActive {
			active[g.Cluster]++
		}
		for _, c := range g.Connections {
			out[g.Cluster] = append(out[g.Cluster], checkTunnel(g.Cluster, g.Node, c))
		}
	}
	for _, c := range clusters {
		n := active[c.Name]
		out[c.Name] = append([]finding{{n == 1, c.Name + ": active gateway", fmt.Sprintf("%d active", n)}}, out[c.Name]...)
	}
	return out
}

// diagnoseNodes checks inside every node that runs a route agent, from
// its node view (route-agent inspect through pods/exec): IP forwarding,
// the overlay device, the route agent's iptables chains jumped to from
// the builtin chains, and on the active gateway's node its tunnel device
// and, under globalnet, the globalnet nftables table.
func diagnoseNodes(ctx context.Context, clusters []memberCluster) []finding {
	var fs []finding
	for _, c := range clusters {
		nodes, err := selectNodes(ctx, []memberCluster{c}, "")
		if err != nil {
			fs = append(fs, finding{false, c.Name + ": route agents", err.Error()})
			continue
		}
		gateways, globalnet, err := activeGateways(ctx, c)
		if err != nil {
			fs = append(fs, finding{false, c.Name + ": gateways", err.Error()})
		}
		for _, n := range nodes {
			v, err := n.inspect(ctx)
			if err != nil {
				fs = append(fs, finding{false, n.String() + ": node view", err.Error()})
				continue
			}
			fs = append(fs, checkNode(n.String()+": ", v, overlayDevice(n.pod), gateways[n.Node], globalnet)...)
		}
	}
	return fs
}

// checkNode is diagnose's verdict on one node's view. tunnelDevice is the
// device of the node's active gateway ("" when the node has none).
func checkNode(where string, v *nodeview.Node, overlay, tunnelDevice string, globalnet bool) []finding {
	fwd := v.Sysctls["net.ipv4.ip_forward"]
	fs := []finding{{fwd == "1", where + "ip forwarding", fwd}}
	l, ok := v.Link(overlay)
	fs = append(fs, finding{ok && l.Up, where + "overlay " + overlay, linkState(l, ok)})
	for _, chain := range []string{routeagent.ChainMSS, routeagent.ChainForward, routeagent.ChainNAT} {
		fs = append(fs, finding{v.JumpsTo(chain), where + "chain " + chain, "jumped to from the builtin chains"})
	}
	if tunnelDevice != "" {
		l, ok := v.Link(tunnelDevice)
		fs = append(fs, finding{ok && l.Up, where + "tunnel device " + tunnelDevice, linkState(l, ok)})
		if globalnet {
			_, ok := v.Nft("ip", nat.TableName)
			fs = append(fs, finding{ok, where + "globalnet table ip " + nat.TableName, "translating global IP:port pairs"})
		}
	}
	for _, e := range v.Errors {
		fs = append(fs, finding{false, where + "node view", e})
	}
	return fs
}

func linkState(l nodeview.Link, ok bool) string {
	switch {
	case !ok:
		return "missing"
	case !l.Up:
		return fmt.Sprintf("down, mtu %d", l.MTU)
	}
	return fmt.Sprintf("up, mtu %d", l.MTU)
}

// overlayDevice is the route agent's --vxlan-device (its default
// otherwise).
func overlayDevice(pod *corev1.Pod) string {
	for _, a := range pod.Spec.Containers[0].Args {
		if d, ok := strings.CutPrefix(a, "--vxlan-device="); ok {
			return d
		}
	}
	return routeagent.DefaultDevice
}

// activeGateways maps the nodes of c's active gateways to their tunnel
// devices, and says whether c runs globalnet (its Cluster has global
// CIDRs).
func activeGateways(ctx context.Context, c memberCluster) (map[string]string, bool, error) {
	var gws v1alpha1.GatewayList
	if err := c.Client.List(ctx, &gws, client.InNamespace(gwNamespace)); err != nil {
		return nil, false, err
	}
	out := map[string]string{}
	for _, g := range gws.Items {
		if g.Status.HAStatus == v1alpha1.HAStatusActive && g.Status.TunnelDevice != "" {
			out[g.Name] = g.Status.TunnelDevice
		}
	}
	id, err := about.ClusterID(ctx, c.Client)
	if err != nil {
		id = c.Name
	}
	var cl v1alpha1.Cluster
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: gwNamespace, Name: id}, &cl); err != nil {
		return out, false, fmt.Errorf("cluster %s: %w", id, err)
	}
	return out, len(cl.Spec.GlobalCIDRs) > 0, nil
}
