package routeagent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causeway-net/causeway/pkg/vip"
)

// Metrics are the route agent's Prometheus metrics (subsystem
// causeway_route_agent).
type Metrics struct {
	SyncDuration       *prometheus.HistogramVec
	SyncFailures       prometheus.Counter
	RoutesProgrammed   prometheus.Gauge
	SkippedSubnets     prometheus.Gauge
	LastSuccess        prometheus.Gauge
	OutsideFlushes     prometheus.Counter
	GatewayChanges     prometheus.Counter
	ProgrammingLatency prometheus.Histogram
}

// NewMetrics creates the metrics and registers them on reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "causeway", "route_agent"
	m := &Metrics{
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "sync_duration_seconds", Help: "Duration of syncs of the node's routes, overlay and chains.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"mode"}),
		SyncFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "sync_failures_total", Help: "Syncs that failed (retried with backoff as full syncs)."}),
		RoutesProgrammed: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "routes_programmed", Help: "Routes to remote subnets the agent has programmed."}),
		SkippedSubnets: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "skipped_inputs", Help: "Remote subnets or Endpoints left out of the last desired state."}),
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "last_sync_success_timestamp_seconds", Help: "Unix time of the last successful sync."}),
		OutsideFlushes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "outside_flushes_total", Help: "Times the canary chain was found missing after the first sync."}),
		GatewayChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "gateway_changes_total", Help: "Times the local active gateway changed."}),
		ProgrammingLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "programming_latency_seconds", Help: "Time from an Endpoint event to the node state applied.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(m.SyncDuration, m.SyncFailures, m.RoutesProgrammed, m.SkippedSubnets, m.LastSuccess,
			m.OutsideFlushes, m.GatewayChanges, m.ProgrammingLatency)
	}
	return m
}

// VIPMetrics are the metrics of the route agent's VIP datapath
// (subsystem causeway_route_agent, names vip_*).
type VIPMetrics struct {
	services     prometheus.Gauge
	leftOut      prometheus.Gauge
	ignored      prometheus.Gauge
	withdrawn    prometheus.Gauge
	syncFailures prometheus.Counter
	lastSuccess  prometheus.Gauge
}

// NewVIPMetrics creates the VIP datapath's metrics, with the fill of
// table's maps read at scrape time, and registers them on reg (if not
// nil).
func NewVIPMetrics(reg prometheus.Registerer, table vip.Table) *VIPMetrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "causeway", Subsystem: "route_agent", Name: name, Help: help}
	}
	m := &VIPMetrics{
		services: prometheus.NewGauge(prometheus.GaugeOpts(opts("vip_services", "Clusterset VIP service ports in the eBPF datapath."))),
		leftOut: prometheus.NewGauge(prometheus.GaugeOpts(opts("vip_imports_left_out",
			"ServiceImports left out of the eBPF datapath because its maps are full (the newest, remote-only first)."))),
		ignored: prometheus.NewGauge(prometheus.GaugeOpts(opts("vip_inputs_ignored",
			"VIP inputs never programmed: addresses outside the VIP ranges or held by an older import, EndpointSlices not written by the MCS controller for their import, imports whose weights do not fit."))),
		withdrawn: prometheus.NewGauge(prometheus.GaugeOpts(opts("vip_backends_withdrawn",
			"Backends left out of the eBPF datapath because the active gateway's health checks found their cluster unreachable."))),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts(opts("vip_sync_failures_total",
			"Syncs of the eBPF VIP maps that failed (inputs not listed, or the maps not written; retried with backoff)."))),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts(opts("vip_last_sync_success_timestamp_seconds",
			"Unix time of the last successful sync of the eBPF VIP maps."))),
	}
	if reg != nil {
		reg.MustRegister(m.services, m.leftOut, m.ignored, m.withdrawn, m.syncFailures, m.lastSuccess, newVIPMapCollector(table))
	}
	return m
}

// observe records one VIP sync: what was left out or ignored (also by a
// sync that then failed to write), the services programmed by one that
// succeeded.
func (m *VIPMetrics) observe(st VIPState, err error) {
	m.leftOut.Set(float64(len(st.LeftOut)))
	m.ignored.Set(float64(st.Ignored))
	m.withdrawn.Set(float64(st.Withdrawn))
	if err != nil {
		m.syncFailures.Inc()
		return
	}
	m.services.Set(float64(len(st.Services)))
	m.lastSuccess.SetToCurrentTime()
}

// vipMapCollector reports at scrape time how full the two maps the agent
// writes are (vip_services, vip_backends: pkg/vip). The maps the
// programs fill themselves (vip_rev_nat and vip_affinity, LRU maps that
// evict their oldest entries; vip_peers, socket storage) are not
// counted: that would take a walk over up to 262 144 entries per scrape.
type vipMapCollector struct {
	table        vip.Table
	entries, max *prometheus.Desc
}

func newVIPMapCollector(table vip.Table) *vipMapCollector {
	return &vipMapCollector{
		table: table,
		entries: prometheus.NewDesc("causeway_route_agent_vip_map_entries",
			"Entries of the eBPF VIP maps the agent writes: vip_services (one per VIP port), vip_backends (one per backend of each).",
			[]string{"map"}, nil),
		max: prometheus.NewDesc("causeway_route_agent_vip_map_max_entries",
			"Size of those maps: what they hold at most.", []string{"map"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *vipMapCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.max
}

// Collect implements prometheus.Collector. A map without a limit (the
// fake's zero) has no size.
func (c *vipMapCollector) Collect(ch chan<- prometheus.Metric) {
	use, lim := c.table.Usage(), c.table.Limits()
	for _, m := range []struct {
		name     string
		use, lim uint32
	}{{"vip_services", use.Services, lim.Services}, {"vip_backends", use.Backends, lim.Backends}} {
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(m.use), m.name)
		if m.lim > 0 {
			ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(m.lim), m.name)
		}
	}
}
