package ctl

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/lab"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/nat"
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
		Short: "Check the ClusterSet: gateways, tunnel health, refused remotes and records, and in the lab each node's MTU and firewall",
		Long: `Check every cluster of the ClusterSet and print one line per check:
  - exactly one active gateway per cluster;
  - every tunnel connected, with no health-check loss;
  - remote Clusters and Endpoints refused by validation (with the reason);
  - remote export records refused by the MCS controller (with the reason);
and, for the local lab, inside every node: IP forwarding, the route agent's
overlay device and its MTU against the tunnel's, and Causeway's iptables
chains (MSS clamping, forwarding). Exits non-zero when a check fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			var fs []finding
			fs = append(fs, diagnoseAPI(cmd.Context(), clusters)...)
			dir := lab.DefaultDir
			if d := os.Getenv("CAUSEWAY_LAB_DIR"); d != "" {
				dir = d
			}
			if st, err := lab.Load(dir); err == nil && len(cs.kubeconfigs)+len(cs.contexts) == 0 {
				fs = append(fs, diagnoseLab(st)...)
			}
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
			what := fmt.Sprintf("%s: tunnel %s → %s", g.Cluster, g.Node, c.ClusterID)
			loss := int32(0)
			if c.LatencyRTT != nil {
				loss = c.LatencyRTT.LossPercent
			}
			ok := c.Status == v1alpha1.Connected && loss == 0
			about := fmt.Sprintf("%s, loss %d%%", c.Status, loss)
			if c.StatusMessage != "" {
				about += ": " + c.StatusMessage
			}
			out[g.Cluster] = append(out[g.Cluster], finding{ok, what, about})
		}
	}
	for _, c := range clusters {
		n := active[c.Name]
		out[c.Name] = append([]finding{{n == 1, c.Name + ": active gateway", fmt.Sprintf("%d active", n)}}, out[c.Name]...)
	}
	return out
}

// diagnoseLab looks inside every node namespace of the lab.
func diagnoseLab(st *lab.State) []finding {
	var fs []finding
	for _, c := range st.Topology.Clusters {
		for _, n := range c.Nodes {
			ns := st.Prefix + c.Name + "." + n.Name
			where := c.Name + "/" + n.Name + ": "
			fwd, err := nsRun(ns, "cat", "/proc/sys/net/ipv4/ip_forward")
			fs = append(fs, finding{err == nil && strings.TrimSpace(fwd) == "1", where + "ip forwarding", strings.TrimSpace(fwd)})
			link, err := nsRun(ns, "ip", "-o", "link", "show", "vx-causeway")
			mtu := fieldAfter(link, "mtu")
			fs = append(fs, finding{err == nil && mtu != "", where + "overlay vx-causeway", "mtu " + mtu})
			rules, err := nsRun(ns, "iptables-save")
			for _, chain := range []string{"CAUSEWAY-MSS", "CAUSEWAY-FORWARD", "CAUSEWAY-POSTROUTING"} {
				fs = append(fs, finding{err == nil && strings.Contains(rules, "-j "+chain), where + "chain " + chain, "jumped to from the builtin chains"})
			}
			if n.Gateway() {
				dev := st.TunnelDevice(c.Name, n.Name)
				link, err := nsRun(ns, "ip", "-o", "link", "show", dev)
				fs = append(fs, finding{err == nil, where + "tunnel device " + dev, "mtu " + fieldAfter(link, "mtu")})
				if st.Globalnet {
					// Listing a chain does not load the maps' elements.
					_, err := nsRun(ns, "nft", "list", "chain", "ip", nat.TableName, nat.ChainIngress)
					fs = append(fs, finding{err == nil, where + "globalnet table ip " + nat.TableName, "translating global IP:port pairs"})
				}
			}
		}
	}
	return fs
}

func nsRun(ns string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// fieldAfter returns the word after key in s ("mtu 1450" → "1450").
func fieldAfter(s, key string) string {
	f := strings.Fields(s)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == key {
			return f[i+1]
		}
	}
	return ""
}
