package routeagent

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/vip"
)

// staticVIPSource answers ListVIPInputs with fixed inputs, or err.
type staticVIPSource struct {
	imports []*mcsv1beta1.ServiceImport
	slices  []*discoveryv1.EndpointSlice
	err     error
}

func (s staticVIPSource) ListVIPInputs(context.Context) ([]*mcsv1beta1.ServiceImport, []*VIPSlice, error) {
	return s.imports, parseVIPSlices(s.slices), s.err
}

// filledVIPTable is a vip.Table with limits that counts what it holds as
// the kernel's maps do: a service entry per VIP port, a backend slot per
// distinct backend of each.
type filledVIPTable struct {
	limits vip.Limits
	held   map[vip.ServiceKey]vip.Service
}

func (f *filledVIPTable) Set(_ context.Context, desired map[vip.ServiceKey]vip.Service) error {
	if err := vip.Validate(desired, f.limits); err != nil {
		return err
	}
	f.held = desired
	return nil
}

func (f *filledVIPTable) Limits() vip.Limits { return f.limits }

func (f *filledVIPTable) Usage() vip.Limits {
	u := vip.Limits{Services: uint32(len(f.held))}
	for _, s := range f.held {
		u.Backends += uint32(len(vip.Canonical(s.Backends)))
	}
	return u
}

func (f *filledVIPTable) Close() error { return nil }

// The VIP metrics after real syncs into a table with room for two
// services and four backend slots: the local import's two ports fill it,
// the remote-only one is left out; a failed sync counts and keeps the
// maps' figures.
func TestVIPMetrics(t *testing.T) {
	http := mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	echo := mcsv1beta1.ServicePort{Name: "echo", Protocol: corev1.ProtocolUDP, Port: 8080}
	two := map[string]*bool{"10.244.1.5": ptr.To(true), "10.244.2.7": ptr.To(true)}
	src := staticVIPSource{
		imports: []*mcsv1beta1.ServiceImport{
			testImport("demo", "whereami", "243.0.0.10", mcsv1beta1.ClusterSetIP, http, echo),
			testImport("demo", "remote", "243.0.0.11", mcsv1beta1.ClusterSetIP, http),
		},
		slices: []*discoveryv1.EndpointSlice{
			slice("demo", "whereami", "c1", map[string]int32{"http": 8080}, corev1.ProtocolTCP, two),
			slice("demo", "whereami", "c1-udp", map[string]int32{"echo": 8080}, corev1.ProtocolUDP, two),
			slice("demo", "remote", "c2", map[string]int32{"http": 8080}, corev1.ProtocolTCP, map[string]*bool{"10.245.1.5": ptr.To(true)}),
		},
	}
	// The UDP slice is c1's too.
	src.slices[1].Labels[LabelSourceCluster] = "c1"
	src.slices[1].Name = "whereami-c1-udp"

	table := &filledVIPTable{limits: vip.Limits{Services: 2, Backends: 4}}
	reg := prometheus.NewRegistry()
	m := NewVIPMetrics(reg, table)
	sync := func(src VIPSource) {
		st, err := SyncVIPs(context.Background(), vipConfig, src, table)
		m.observe(st, err)
	}
	names := []string{"causeway_route_agent_vip_services", "causeway_route_agent_vip_imports_left_out",
		"causeway_route_agent_vip_inputs_ignored", "causeway_route_agent_vip_sync_failures_total",
		"causeway_route_agent_vip_map_entries", "causeway_route_agent_vip_map_max_entries"}
	expect := func(services, leftOut, failures int) string {
		return `
# HELP causeway_route_agent_vip_imports_left_out ServiceImports left out of the eBPF datapath because its maps are full (the newest, remote-only first).
# TYPE causeway_route_agent_vip_imports_left_out gauge
causeway_route_agent_vip_imports_left_out ` + strconv.Itoa(leftOut) + `
# HELP causeway_route_agent_vip_inputs_ignored VIP inputs never programmed: addresses outside the VIP ranges or held by an older import, EndpointSlices not written by the MCS controller for their import, imports whose weights do not fit.
# TYPE causeway_route_agent_vip_inputs_ignored gauge
causeway_route_agent_vip_inputs_ignored 0
# HELP causeway_route_agent_vip_map_entries Entries of the eBPF VIP maps the agent writes: vip_services (one per VIP port), vip_backends (one per backend of each).
# TYPE causeway_route_agent_vip_map_entries gauge
causeway_route_agent_vip_map_entries{map="vip_backends"} 4
causeway_route_agent_vip_map_entries{map="vip_services"} 2
# HELP causeway_route_agent_vip_map_max_entries Size of those maps: what they hold at most.
# TYPE causeway_route_agent_vip_map_max_entries gauge
causeway_route_agent_vip_map_max_entries{map="vip_backends"} 4
causeway_route_agent_vip_map_max_entries{map="vip_services"} 2
# HELP causeway_route_agent_vip_services Clusterset VIP service ports in the eBPF datapath.
# TYPE causeway_route_agent_vip_services gauge
causeway_route_agent_vip_services ` + strconv.Itoa(services) + `
# HELP causeway_route_agent_vip_sync_failures_total Syncs of the eBPF VIP maps that failed (inputs not listed, or the maps not written; retried with backoff).
# TYPE causeway_route_agent_vip_sync_failures_total counter
causeway_route_agent_vip_sync_failures_total ` + strconv.Itoa(failures) + `
`
	}

	sync(src)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expect(2, 1, 0)), names...); err != nil {
		t.Error(err)
	}
	synced := testutil.ToFloat64(m.lastSuccess)
	if synced == 0 {
		t.Error("no last-success time after a successful sync")
	}

	sync(staticVIPSource{err: errors.New("cache not synced")})
	// The maps hold what the last successful sync wrote.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expect(2, 0, 1)), names...); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(m.lastSuccess); got != synced {
		t.Errorf("a failed sync moved the last-success time from %v to %v", synced, got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
