package ctl

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// parseServiceRef parses "<namespace>/<name>".
func parseServiceRef(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1035Label(name)) > 0 {
		return types.NamespacedName{}, fmt.Errorf("%q: want <namespace>/<service>", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// newExportCommand is `causewayctl export <ns>/<svc>`: create the
// ServiceExport (KEP-1645's whole opt-in) in one cluster.
func newExportCommand() *cobra.Command {
	cs := &clusterSetFlags{}
	var cluster string
	cmd := &cobra.Command{
		Use:   "export <namespace>/<service>",
		Short: "Export a Service to the ClusterSet (creates its ServiceExport)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := parseServiceRef(args[0])
			if err != nil {
				return err
			}
			c, err := cs.cluster(cluster)
			if err != nil {
				return err
			}
			se := &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}}
			err = c.Client.Create(cmd.Context(), se)
			switch {
			case apierrors.IsAlreadyExists(err):
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s already exported\n", c.Name, ref)
				return nil
			case err != nil:
				return fmt.Errorf("%s: export %s: %w", c.Name, ref, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: exported %s\n", c.Name, ref)
			return nil
		},
	}
	cs.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster to export from (needed when several are given)")
	return cmd
}

// newUnexportCommand is `causewayctl unexport <ns>/<svc>`.
func newUnexportCommand() *cobra.Command {
	cs := &clusterSetFlags{}
	var cluster string
	cmd := &cobra.Command{
		Use:   "unexport <namespace>/<service>",
		Short: "Withdraw a Service from the ClusterSet (deletes its ServiceExport)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := parseServiceRef(args[0])
			if err != nil {
				return err
			}
			c, err := cs.cluster(cluster)
			if err != nil {
				return err
			}
			err = c.Client.Delete(cmd.Context(), &mcsv1beta1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}})
			switch {
			case apierrors.IsNotFound(err):
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s was not exported\n", c.Name, ref)
				return nil
			case err != nil:
				return fmt.Errorf("%s: unexport %s: %w", c.Name, ref, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: unexported %s\n", c.Name, ref)
			return nil
		},
	}
	cs.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster to unexport from (needed when several are given)")
	return cmd
}

// ExportRow is one ServiceExport in `show exports`.
type ExportRow struct {
	Cluster    string             `json:"cluster"`
	Namespace  string             `json:"namespace"`
	Name       string             `json:"name"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Global is the Service's globalnet allocation (its GlobalIngress),
	// when the cluster runs globalnet.
	Global *GlobalRow `json:"global,omitempty"`
	Error  string     `json:"error,omitempty"`
}

// GlobalRow is an export's global addresses.
type GlobalRow struct {
	// State is Allocated, the reason of Allocated=False (e.g.
	// GlobalPoolExhausted), or Released (in quarantine).
	State string `json:"state"`
	// Ports are "<name>:<port>/<protocol>=<global IP>:<global port>".
	Ports []string `json:"ports,omitempty"`
	// Pods are "<pod IP>=<global IP>" (headless Services).
	Pods []string `json:"pods,omitempty"`
}

func (g *GlobalRow) cell() string {
	if g == nil {
		return "-"
	}
	parts := []string{}
	if g.State != string(causewayv1alpha1.ConditionAllocated) {
		parts = append(parts, g.State)
	}
	parts = append(parts, g.Ports...)
	if len(g.Pods) > 0 {
		parts = append(parts, fmt.Sprintf("%d pods (%s)", len(g.Pods), strings.Join(firstN(g.Pods, 3), ",")))
	}
	return strings.Join(parts, " ")
}

func globalRow(gi *causewayv1alpha1.GlobalIngress) *GlobalRow {
	r := &GlobalRow{State: causewayv1alpha1.ConditionAllocated}
	if c := meta.FindStatusCondition(gi.Status.Conditions, causewayv1alpha1.ConditionAllocated); c != nil && c.Status != metav1.ConditionTrue {
		r.State = c.Reason
	}
	if gi.Spec.ReleasedAt != nil {
		r.State = "Released"
	}
	for _, p := range gi.Spec.Ports {
		name := ""
		if p.Name != "" {
			name = p.Name + ":"
		}
		r.Ports = append(r.Ports, fmt.Sprintf("%s%d/%s=%s:%d", name, p.Port, p.Protocol, gi.Spec.IP, p.GlobalPort))
	}
	for _, p := range gi.Spec.Pods {
		r.Pods = append(r.Pods, p.PodIP+"="+p.GlobalIP)
	}
	return r
}

// firstN is the first n items, then "+k more".
func firstN(in []string, n int) []string {
	if len(in) <= n {
		return in
	}
	return append(slices.Clone(in[:n]), fmt.Sprintf("+%d more", len(in)-n))
}

func newShowExportsCommand(cs *clusterSetFlags, out *outputFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "exports",
		Short: "ServiceExports of every cluster with their Valid, Ready and Conflict conditions and global addresses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			rows := collectExports(cmd.Context(), clusters)
			var cells [][]string
			for _, r := range rows {
				if r.Error != "" {
					cells = append(cells, errorCells(r.Cluster, r.Error, 8))
					continue
				}
				var msgs []string
				for _, t := range []string{"Valid", "Ready", "Conflict"} {
					if c := meta.FindStatusCondition(r.Conditions, t); c != nil && !healthy(c) && c.Message != "" {
						msgs = append(msgs, c.Message)
					}
				}
				cells = append(cells, []string{r.Cluster, r.Namespace, r.Name,
					condCell(r.Conditions, "Valid"), condCell(r.Conditions, "Ready"), condCell(r.Conditions, "Conflict"), r.Global.cell(), strings.Join(msgs, "; ")})
			}
			return out.print(cmd.OutOrStdout(), rows, []string{"CLUSTER", "NAMESPACE", "NAME", "VALID", "READY", "CONFLICT", "GLOBAL", "MESSAGE"}, cells)
		},
	}
}

func collectExports(ctx context.Context, clusters []memberCluster) []ExportRow {
	rows := []ExportRow{}
	for _, c := range clusters {
		var list mcsv1beta1.ServiceExportList
		if err := c.Client.List(ctx, &list); err != nil {
			rows = append(rows, ExportRow{Cluster: c.Name, Error: err.Error()})
			continue
		}
		// GlobalIngresses exist only where globalnet runs; without them (or
		// without the rights to read them) the column stays empty.
		globals := map[types.NamespacedName]*causewayv1alpha1.GlobalIngress{}
		var gis causewayv1alpha1.GlobalIngressList
		if err := c.Client.List(ctx, &gis); err == nil {
			for i := range gis.Items {
				globals[client.ObjectKeyFromObject(&gis.Items[i])] = &gis.Items[i]
			}
		}
		for _, se := range list.Items {
			r := ExportRow{Cluster: c.Name, Namespace: se.Namespace, Name: se.Name, Conditions: se.Status.Conditions}
			if gi := globals[client.ObjectKeyFromObject(&se)]; gi != nil {
				r.Global = globalRow(gi)
			}
			rows = append(rows, r)
		}
	}
	sortByService(rows, func(r ExportRow) (string, string, string) { return r.Namespace, r.Name, r.Cluster })
	return rows
}

// healthy tells whether a ServiceExport condition is in its good state:
// Valid and Ready True, Conflict False.
func healthy(c *metav1.Condition) bool {
	if c.Type == string(mcsv1beta1.ServiceExportConditionConflict) {
		return c.Status == metav1.ConditionFalse
	}
	return c.Status == metav1.ConditionTrue
}

// condCell is the status, with the reason when not healthy; "-" when unset.
func condCell(conds []metav1.Condition, t string) string {
	c := meta.FindStatusCondition(conds, t)
	if c == nil {
		return "-"
	}
	if healthy(c) {
		return string(c.Status)
	}
	return string(c.Status) + " (" + c.Reason + ")"
}

// ImportRow is one ServiceImport in `show imports`.
type ImportRow struct {
	Cluster   string   `json:"cluster"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	IPs       []string `json:"ips,omitempty"`
	Ports     []string `json:"ports,omitempty"`
	// Sources are the exporting clusters (status.clusters).
	Sources []string `json:"sources,omitempty"`
	// Endpoints counts the multi-cluster slices' endpoints per source
	// cluster: ready and total.
	Endpoints map[string]EndpointCount `json:"endpoints,omitempty"`
	// Via is, per source cluster, the addresses this cluster reaches it
	// at ("<address> <port name>:<port>,…"): its ClusterIP or pod IPs, or
	// under globalnet a remote cluster's global addresses.
	Via map[string][]string `json:"via,omitempty"`
	// Unreachable is, per source cluster whose endpoints are not reachable
	// from here, why (from the ServiceImport's Reachable condition).
	Unreachable map[string]string `json:"unreachable,omitempty"`
	Error       string            `json:"error,omitempty"`
}

// EndpointCount is ready out of total endpoints.
type EndpointCount struct {
	Ready int `json:"ready"`
	Total int `json:"total"`
}

func newShowImportsCommand(cs *clusterSetFlags, out *outputFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "imports",
		Short: "ServiceImports of every cluster: clusterset VIPs, ports, exporting clusters, their endpoints and the addresses they are reached at",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			rows := collectImports(cmd.Context(), clusters)
			var cells [][]string
			for _, r := range rows {
				if r.Error != "" {
					cells = append(cells, errorCells(r.Cluster, r.Error, 8))
					continue
				}
				var eps, via []string
				for _, src := range r.Sources {
					n := r.Endpoints[src]
					eps = append(eps, fmt.Sprintf("%s %d/%d", src, n.Ready, n.Total))
					if v := r.Via[src]; len(v) > 0 {
						cell := src + " " + strings.Join(firstN(v, 3), "; ")
						if why, ok := r.Unreachable[src]; ok {
							cell += " UNREACHABLE: " + why
						}
						via = append(via, cell)
					}
				}
				cells = append(cells, []string{r.Cluster, r.Namespace, r.Name, r.Type, dash(strings.Join(r.IPs, ",")),
					dash(strings.Join(r.Ports, ",")), dash(strings.Join(eps, ", ")), dash(strings.Join(via, " | "))})
			}
			return out.print(cmd.OutOrStdout(), rows, []string{"CLUSTER", "NAMESPACE", "NAME", "TYPE", "IP", "PORTS", "ENDPOINTS (READY/TOTAL)", "VIA"}, cells)
		},
	}
}

func collectImports(ctx context.Context, clusters []memberCluster) []ImportRow {
	rows := []ImportRow{}
	for _, c := range clusters {
		var list mcsv1beta1.ServiceImportList
		if err := c.Client.List(ctx, &list); err != nil {
			rows = append(rows, ImportRow{Cluster: c.Name, Error: err.Error()})
			continue
		}
		var slices discoveryv1.EndpointSliceList
		if err := c.Client.List(ctx, &slices, client.HasLabels{mcsv1beta1.LabelServiceName}); err != nil {
			rows = append(rows, ImportRow{Cluster: c.Name, Error: err.Error()})
			continue
		}
		counts := map[types.NamespacedName]map[string]EndpointCount{}
		via := map[types.NamespacedName]map[string][]string{}
		for _, s := range slices.Items {
			k := types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[mcsv1beta1.LabelServiceName]}
			if counts[k] == nil {
				counts[k] = map[string]EndpointCount{}
				via[k] = map[string][]string{}
			}
			src := s.Labels[mcsv1beta1.LabelSourceCluster]
			n := counts[k][src]
			var ports []string
			for _, p := range s.Ports {
				if p.Port != nil {
					ports = append(ports, fmt.Sprintf("%s:%d", ptrString(p.Name), *p.Port))
				}
			}
			for _, e := range s.Endpoints {
				n.Total++
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					n.Ready++
				}
				if len(e.Addresses) > 0 {
					via[k][src] = append(via[k][src], strings.TrimSpace(e.Addresses[0]+" "+strings.Join(ports, ",")))
				}
			}
			counts[k][src] = n
		}
		for _, si := range list.Items {
			r := ImportRow{Cluster: c.Name, Namespace: si.Namespace, Name: si.Name, Type: string(si.Spec.Type), IPs: si.Spec.IPs,
				Endpoints: counts[types.NamespacedName{Namespace: si.Namespace, Name: si.Name}]}
			for _, p := range si.Spec.Ports {
				s := strconv.Itoa(int(p.Port)) + "/" + string(p.Protocol)
				if p.Name != "" {
					s = p.Name + ":" + s
				}
				r.Ports = append(r.Ports, s)
			}
			r.Via = via[types.NamespacedName{Namespace: si.Namespace, Name: si.Name}]
			reach := meta.FindStatusCondition(si.Status.Conditions, mcs.ConditionReachable)
			for _, cl := range si.Status.Clusters {
				r.Sources = append(r.Sources, cl.Cluster)
				if reach == nil || reach.Status != metav1.ConditionFalse {
					continue
				}
				// The message is one "; "-separated part per unreachable
				// cluster, each naming it ("cluster <id> …").
				for _, part := range strings.Split(reach.Message, "; ") {
					if strings.Contains(part+" ", "cluster "+cl.Cluster+" ") || strings.Contains(part, "cluster "+cl.Cluster+":") {
						if r.Unreachable == nil {
							r.Unreachable = map[string]string{}
						}
						r.Unreachable[cl.Cluster] = part
					}
				}
			}
			rows = append(rows, r)
		}
	}
	sortByService(rows, func(r ImportRow) (string, string, string) { return r.Namespace, r.Name, r.Cluster })
	return rows
}

// sortByService orders rows by namespace, name, then cluster.
func sortByService[T any](rows []T, key func(T) (namespace, name, cluster string)) {
	slices.SortStableFunc(rows, func(a, b T) int {
		an, am, ac := key(a)
		bn, bm, bc := key(b)
		return cmp.Or(cmp.Compare(an, bn), cmp.Compare(am, bm), cmp.Compare(ac, bc))
	})
}

// errorCells is a table row of n columns for a cluster that could not be
// read: its name, dashes, and the error in the last column.
func errorCells(cluster, err string, n int) []string {
	cells := []string{cluster}
	for len(cells) < n-1 {
		cells = append(cells, "-")
	}
	return append(cells, "error: "+err)
}

func ptrString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
