package nat

import "github.com/prometheus/client_golang/prometheus"

// Metrics are globalnet's table metrics (subsystem causeway_globalnet).
type Metrics struct {
	SyncDuration   *prometheus.HistogramVec
	SyncFailures   prometheus.Counter
	Elements       prometheus.Gauge
	LastSuccess    prometheus.Gauge
	OutsideFlushes prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "causeway", "globalnet"
	m := &Metrics{
		SyncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "sync_duration_seconds", Help: "Duration of syncs of the globalnet nftables table.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"mode"}),
		SyncFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "sync_failures_total", Help: "Syncs that failed (invalid config or nft error; the next sync is full)."}),
		Elements: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "elements", Help: "Set and map elements of the globalnet table after the last successful sync."}),
		LastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "last_sync_success_timestamp_seconds", Help: "Unix time of the last successful sync."}),
		OutsideFlushes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "outside_flushes_total", Help: "Times the table was found gone after the first sync."}),
	}
	if reg != nil {
		reg.MustRegister(m.SyncDuration, m.SyncFailures, m.Elements, m.LastSuccess, m.OutsideFlushes)
	}
	return m
}
