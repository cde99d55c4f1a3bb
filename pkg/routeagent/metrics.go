package routeagent

import "github.com/prometheus/client_golang/prometheus"

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
