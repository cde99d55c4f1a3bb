package ctl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/nodeview"
	"github.com/causeway-net/causeway/pkg/routeagent"
	"github.com/causeway-net/causeway/pkg/vip"
)

// VIPRow is one VIP:port/proto of one node in `show vips`: what the node's
// pinned maps hold next to what the API says they should hold.
type VIPRow struct {
	// Node is "<cluster>/<node>".
	Node string `json:"node"`
	// Service is the ServiceImport "<namespace>/<name>" of the VIP, empty
	// when the API knows no import for it.
	Service string `json:"service,omitempty"`
	// VIP is "<ip>:<port>/<protocol>".
	VIP string `json:"vip,omitempty"`
	// Programmed is the node's map entry (nil: none), Expected what the
	// route agent computes from the API (nil: not a service there).
	Programmed *VIPEntry `json:"programmed,omitempty"`
	Expected   *VIPEntry `json:"expected,omitempty"`
	// Diff lists the differences; empty when the node is in sync.
	Diff  []string `json:"diff,omitempty"`
	Error string   `json:"error,omitempty"`
}

// VIPEntry is a service as the datapath translates it.
type VIPEntry struct {
	Backends []VIPBackend `json:"backends"`
	// AffinitySeconds is the ClientIP session affinity timeout (0: none).
	AffinitySeconds uint32 `json:"affinitySeconds,omitempty"`
}

// VIPBackend is one backend and its weight (the source cluster's ready
// endpoints).
type VIPBackend struct {
	Address string `json:"address"`
	Weight  uint32 `json:"weight"`
}

func (e *VIPEntry) cell() string {
	if e == nil {
		return "-"
	}
	parts := make([]string, 0, len(e.Backends))
	for _, b := range e.Backends {
		parts = append(parts, fmt.Sprintf("%s w%d", b.Address, b.Weight))
	}
	s := strings.Join(parts, ", ")
	if len(parts) == 0 {
		s = "(no backends)"
	}
	if e.AffinitySeconds > 0 {
		s += fmt.Sprintf(" [ClientIP %ds]", e.AffinitySeconds)
	}
	return s
}

func vipEntry(s vip.Service) *VIPEntry {
	e := &VIPEntry{Backends: []VIPBackend{}, AffinitySeconds: s.AffinitySeconds}
	for _, b := range vip.Canonical(s.Backends) {
		e.Backends = append(e.Backends, VIPBackend{Address: b.AddrPort().String(), Weight: b.Weight})
	}
	return e
}

// compareVIPs lines up a node's programmed services with the expected ones
// (names: the ServiceImport of each expected key), one row per key of
// either, sorted by VIP, and lists what differs.
func compareVIPs(node string, programmed, expected map[vip.ServiceKey]vip.Service, names map[vip.ServiceKey]string) []VIPRow {
	keys := map[vip.ServiceKey]bool{}
	for k := range programmed {
		keys[k] = true
	}
	for k := range expected {
		keys[k] = true
	}
	sorted := make([]vip.ServiceKey, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	slices.SortFunc(sorted, nodeview.CompareKeys)
	rows := make([]VIPRow, 0, len(sorted))
	for _, k := range sorted {
		r := VIPRow{Node: node, Service: names[k], VIP: k.String()}
		have, programmedOK := programmed[k]
		want, expectedOK := expected[k]
		if programmedOK {
			r.Programmed = vipEntry(have)
		}
		if expectedOK {
			r.Expected = vipEntry(want)
		}
		switch {
		case !programmedOK:
			r.Diff = []string{"not programmed"}
		case !expectedOK:
			r.Diff = []string{"not a service in the API"}
		default:
			r.Diff = entryDiff(r.Programmed, r.Expected)
		}
		rows = append(rows, r)
	}
	return rows
}

// entryDiff lists how have differs from want.
func entryDiff(have, want *VIPEntry) []string {
	var out []string
	weights := map[string]uint32{}
	for _, b := range have.Backends {
		weights[b.Address] = b.Weight
	}
	for _, b := range want.Backends {
		w, ok := weights[b.Address]
		switch {
		case !ok:
			out = append(out, "missing "+b.Address)
		case w != b.Weight:
			out = append(out, fmt.Sprintf("%s weight %d, want %d", b.Address, w, b.Weight))
		}
		delete(weights, b.Address)
	}
	for _, b := range have.Backends {
		if _, stale := weights[b.Address]; stale {
			out = append(out, "stale "+b.Address)
		}
	}
	if have.AffinitySeconds != want.AffinitySeconds {
		out = append(out, fmt.Sprintf("affinity %ds, want %ds", have.AffinitySeconds, want.AffinitySeconds))
	}
	return out
}

// expectedVIPs is the VIP table every node of cluster should hold, from
// its API server (routeagent.VIPDesired, the route agent's own function,
// with the VIP ranges of the ClusterSet policy the gateway mirrored there,
// the default ones before it has; a table too small for every import
// shows the imports it left out as not programmed), and the
// ServiceImport of each key.
func expectedVIPs(ctx context.Context, cluster string, c client.Client) (map[vip.ServiceKey]vip.Service, map[vip.ServiceKey]string, error) {
	var imports mcsv1beta1.ServiceImportList
	if err := c.List(ctx, &imports); err != nil {
		return nil, nil, fmt.Errorf("list ServiceImports: %w", err)
	}
	var slices discoveryv1.EndpointSliceList
	if err := c.List(ctx, &slices, client.HasLabels{mcsv1beta1.LabelServiceName}); err != nil {
		return nil, nil, fmt.Errorf("list EndpointSlices: %w", err)
	}
	is := make([]*mcsv1beta1.ServiceImport, len(imports.Items))
	for i := range imports.Items {
		is[i] = &imports.Items[i]
	}
	ss := make([]*discoveryv1.EndpointSlice, len(slices.Items))
	for i := range slices.Items {
		ss[i] = &slices.Items[i]
	}
	pol, err := clusterset.ReadMirror(ctx, c)
	if errors.Is(err, clusterset.ErrNoMirror) {
		pol, err = addrpolicy.DefaultPolicy(), nil
	}
	if err != nil {
		return nil, nil, err
	}
	desired := routeagent.VIPDesired(routeagent.VIPConfig{ClusterID: cluster, Ranges: []netip.Prefix{pol.VIPRange, pol.VIPRangeIPv6}}, is, ss).Services
	byVIP := map[netip.Addr]string{}
	for _, si := range is {
		for _, ip := range si.Spec.IPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				byVIP[a] = si.Namespace + "/" + si.Name
			}
		}
	}
	names := make(map[vip.ServiceKey]string, len(desired))
	for k := range desired {
		names[k] = byVIP[k.VIP]
	}
	return desired, names, nil
}

func newShowVIPsCommand(cs *clusterSetFlags, out *outputFlags) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:   "vips",
		Short: "Every clusterset VIP:port a node's eBPF maps translate, with backends and weights, next to what the API says; differences marked",
		Long: `show vips reads the pinned BPF maps of the VIP datapath on every node (or the
one --node <cluster>/<node> names) and lines every VIP:port/protocol up with
what the route agent computes from its cluster's ServiceImports and
multicluster EndpointSlices: backends with their weights (the source
cluster's ready endpoints) and ClientIP affinity.

The maps are read on the node by the route agent's inspect command, run in
its Pod through pods/exec: the user needs create on pods/exec in
causeway-system, no access to the node.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			nodes, err := selectNodes(cmd.Context(), clusters, node)
			if err != nil {
				return err
			}
			rows := collectVIPs(cmd.Context(), nodes)
			var cells [][]string
			for _, r := range rows {
				if r.Error != "" {
					cells = append(cells, errorCells(r.Node, r.Error, 6))
					continue
				}
				status := "ok"
				if len(r.Diff) > 0 {
					status = "DIFF: " + strings.Join(r.Diff, "; ")
				}
				cells = append(cells, []string{r.Node, dash(r.Service), r.VIP, r.Programmed.cell(), r.Expected.cell(), status})
			}
			return out.print(cmd.OutOrStdout(), rows, []string{"NODE", "SERVICE", "VIP", "NODE MAPS (BACKEND wWEIGHT)", "API", "STATUS"}, cells)
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "only this node, as <cluster>/<node>")
	return cmd
}

// collectVIPs reads every node's maps and its cluster's expectation.
func collectVIPs(ctx context.Context, nodes []nodeRef) []VIPRow {
	type expectation struct {
		services map[vip.ServiceKey]vip.Service
		names    map[vip.ServiceKey]string
		err      error
	}
	expected := map[string]expectation{}
	var rows []VIPRow
	for _, n := range nodes {
		e, ok := expected[n.cluster.Name]
		if !ok {
			e.services, e.names, e.err = expectedVIPs(ctx, n.cluster.Name, n.cluster.Client)
			expected[n.cluster.Name] = e
		}
		if e.err != nil {
			rows = append(rows, VIPRow{Node: n.String(), Error: e.err.Error()})
			continue
		}
		programmed, err := programmedVIPs(ctx, n)
		if err != nil {
			rows = append(rows, VIPRow{Node: n.String(), Error: err.Error()})
			continue
		}
		rows = append(rows, compareVIPs(n.String(), programmed, e.services, e.names)...)
	}
	return rows
}

// programmedVIPs is the VIP table pinned on node n.
func programmedVIPs(ctx context.Context, n nodeRef) (map[vip.ServiceKey]vip.Service, error) {
	v, err := n.inspect(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range v.Errors {
		if strings.HasPrefix(e, "vip maps:") {
			return nil, fmt.Errorf("%s: %s", n, e)
		}
	}
	return v.Services()
}
