package ctl

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// newShowGatewayCommands returns `show connections|endpoints|gateways`:
// the gateway engine's objects in causeway-system of every cluster given
// by the show group's cluster flags. The show command adds them with
// cmd.AddCommand(newShowGatewayCommands(cs, out)...).
func newShowGatewayCommands(cs *clusterSetFlags, out *outputFlags) []*cobra.Command {
	return []*cobra.Command{
		gwShowCommand(cs, out, "connections", "Tunnels of every cluster's gateways: status, RTT, loss, last handshake", showConnections),
		gwShowCommand(cs, out, "endpoints", "Endpoints mirrored in every cluster (every cluster's active gateway) with their Valid condition", showEndpoints),
		gwShowCommand(cs, out, "gateways", "Gateway candidates of every cluster: active or passive, published endpoint", showGateways),
	}
}

// gwNamespace holds Causeway's objects in every member cluster.
const gwNamespace = "causeway-system"

func gwShowCommand(cs *clusterSetFlags, out *outputFlags, use, short string,
	show func(ctx context.Context, w io.Writer, clusters []memberCluster, out *outputFlags) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			return show(cmd.Context(), cmd.OutOrStdout(), clusters, out)
		},
	}
}

func gwDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// GatewayRow is one Gateway candidate of `show gateways`.
type GatewayRow struct {
	Cluster     string                 `json:"cluster"`
	Node        string                 `json:"node,omitempty"`
	HAStatus    v1alpha1.HAStatus      `json:"haStatus,omitempty"`
	Endpoint    *v1alpha1.EndpointSpec `json:"localEndpoint,omitempty"`
	Connections []v1alpha1.Connection  `json:"connections,omitempty"`
	Error       string                 `json:"error,omitempty"`
}

func listGateways(ctx context.Context, clusters []memberCluster) []GatewayRow {
	var rows []GatewayRow
	for _, c := range clusters {
		var gws v1alpha1.GatewayList
		if err := c.Client.List(ctx, &gws, client.InNamespace(gwNamespace)); err != nil {
			rows = append(rows, GatewayRow{Cluster: c.Name, Error: err.Error()})
			continue
		}
		sort.Slice(gws.Items, func(i, j int) bool { return gws.Items[i].Name < gws.Items[j].Name })
		for _, g := range gws.Items {
			rows = append(rows, GatewayRow{Cluster: c.Name, Node: g.Name, HAStatus: g.Status.HAStatus,
				Endpoint: g.Status.LocalEndpoint, Connections: g.Status.Connections})
		}
	}
	return rows
}

func showGateways(ctx context.Context, w io.Writer, clusters []memberCluster, out *outputFlags) error {
	rows := listGateways(ctx, clusters)
	var cells [][]string
	for _, r := range rows {
		if r.Error != "" {
			cells = append(cells, errorCells(r.Cluster, r.Error, 7))
			continue
		}
		driver, public, conns := "-", "-", fmt.Sprint(len(r.Connections))
		if r.Endpoint != nil {
			driver, public = string(r.Endpoint.CableDriver), fmt.Sprintf("%s:%d", r.Endpoint.PublicIP, r.Endpoint.Port)
		}
		up := 0
		for _, c := range r.Connections {
			if c.Status == v1alpha1.Connected {
				up++
			}
		}
		if len(r.Connections) > 0 {
			conns = fmt.Sprintf("%d/%d", up, len(r.Connections))
		}
		cells = append(cells, []string{r.Cluster, r.Node, gwDash(string(r.HAStatus)), driver, public, conns, ""})
	}
	return out.print(w, rows, []string{"CLUSTER", "NODE", "HA", "DRIVER", "PUBLIC", "CONNECTED", "MESSAGE"}, cells)
}

// ConnectionRow is one tunnel of `show connections`.
type ConnectionRow struct {
	Cluster string `json:"cluster"`
	Gateway string `json:"gateway,omitempty"`
	v1alpha1.Connection
	Error string `json:"error,omitempty"`
}

func showConnections(ctx context.Context, w io.Writer, clusters []memberCluster, out *outputFlags) error {
	var rows []ConnectionRow
	for _, g := range listGateways(ctx, clusters) {
		if g.Error != "" {
			rows = append(rows, ConnectionRow{Cluster: g.Cluster, Error: g.Error})
			continue
		}
		for _, c := range g.Connections {
			rows = append(rows, ConnectionRow{Cluster: g.Cluster, Gateway: g.Node, Connection: c})
		}
	}
	var cells [][]string
	for _, r := range rows {
		if r.Error != "" {
			cells = append(cells, errorCells(r.Cluster, r.Error, 8))
			continue
		}
		rtt, loss, hs := "-", "-", "-"
		if r.LatencyRTT != nil {
			rtt, loss = gwDash(r.LatencyRTT.Average), fmt.Sprintf("%d%%", r.LatencyRTT.LossPercent)
		}
		if r.LastHandshake != nil {
			hs = r.LastHandshake.UTC().Format("15:04:05")
		}
		cells = append(cells, []string{r.Cluster, r.Gateway, r.ClusterID,
			fmt.Sprintf("%s:%d", r.Endpoint.PublicIP, r.Endpoint.Port), string(r.Status), rtt, loss, hs + "  " + r.StatusMessage})
	}
	return out.print(w, rows, []string{"CLUSTER", "GATEWAY", "REMOTE", "REMOTE ENDPOINT", "STATUS", "RTT", "LOSS", "HANDSHAKE  MESSAGE"}, cells)
}

// EndpointRow is one mirrored Endpoint of `show endpoints`.
type EndpointRow struct {
	Cluster string                 `json:"cluster"`
	Name    string                 `json:"name,omitempty"`
	Spec    *v1alpha1.EndpointSpec `json:"spec,omitempty"`
	Valid   string                 `json:"valid,omitempty"`
	Reason  string                 `json:"reason,omitempty"`
	Message string                 `json:"message,omitempty"`
	Error   string                 `json:"error,omitempty"`
}

func showEndpoints(ctx context.Context, w io.Writer, clusters []memberCluster, out *outputFlags) error {
	var rows []EndpointRow
	for _, c := range clusters {
		var eps v1alpha1.EndpointList
		if err := c.Client.List(ctx, &eps, client.InNamespace(gwNamespace)); err != nil {
			rows = append(rows, EndpointRow{Cluster: c.Name, Error: err.Error()})
			continue
		}
		sort.Slice(eps.Items, func(i, j int) bool { return eps.Items[i].Name < eps.Items[j].Name })
		for i := range eps.Items {
			ep := &eps.Items[i]
			r := EndpointRow{Cluster: c.Name, Name: ep.Name, Spec: &ep.Spec, Valid: "Unknown"}
			if cond := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionValid); cond != nil {
				r.Valid, r.Reason, r.Message = string(cond.Status), cond.Reason, cond.Message
			}
			rows = append(rows, r)
		}
	}
	var cells [][]string
	for _, r := range rows {
		if r.Error != "" {
			cells = append(cells, errorCells(r.Cluster, r.Error, 8))
			continue
		}
		msg := ""
		if r.Valid != "True" {
			msg = r.Reason + ": " + r.Message
		}
		cells = append(cells, []string{r.Cluster, r.Name, gwDash(r.Spec.Hostname), string(r.Spec.CableDriver),
			fmt.Sprintf("%s:%d", r.Spec.PublicIP, r.Spec.Port), strings.Join(r.Spec.Subnets, ","), r.Valid, msg})
	}
	return out.print(w, rows, []string{"CLUSTER", "ENDPOINT", "GATEWAY", "DRIVER", "PUBLIC", "SUBNETS", "VALID", "MESSAGE"}, cells)
}

// PrintConnections writes the `show connections` table of the clusters
// given by name (the lab's status uses it).
func PrintConnections(ctx context.Context, w io.Writer, clusters map[string]client.Client) error {
	var members []memberCluster
	for _, name := range slices.Sorted(maps.Keys(clusters)) {
		members = append(members, memberCluster{Name: name, Client: clusters[name]})
	}
	return showConnections(ctx, w, members, &outputFlags{format: "table"})
}
