package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Prometheus metrics, subsystem
// causeway_globalnet_controller.
type metrics struct {
	syncDuration prometheus.Histogram
	syncFailures prometheus.Counter
	lastSuccess  prometheus.Gauge
	apiWrites    *prometheus.CounterVec
	ingresses    prometheus.Gauge
	waiting      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "causeway", Subsystem: "globalnet_controller", Name: name, Help: help}
	}
	m := &metrics{
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "causeway", Subsystem: "globalnet_controller", Name: "sync_duration_seconds",
			Help:    "Duration of one Service's sync.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts(opts("sync_failures_total", "Service syncs that failed (retried with backoff)."))),
		lastSuccess:  prometheus.NewGauge(prometheus.GaugeOpts(opts("last_sync_success_timestamp_seconds", "Unix time of the last successful sync."))),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts(opts("api_writes_total", "GlobalIngress objects written, by operation.")),
			[]string{"op"}),
		ingresses: prometheus.NewGauge(prometheus.GaugeOpts(opts("global_ingresses", "Allocations (GlobalIngresses) held, released ones in quarantine included."))),
		waiting:   prometheus.NewGauge(prometheus.GaugeOpts(opts("pool_waiting", "Exported Services waiting for room in this cluster's global CIDR."))),
	}
	if reg != nil {
		reg.MustRegister(m.syncDuration, m.syncFailures, m.lastSuccess, m.apiWrites, m.ingresses, m.waiting)
	}
	return m
}

func (m *metrics) observe(d time.Duration, err error) {
	m.syncDuration.Observe(d.Seconds())
	if err != nil {
		m.syncFailures.Inc()
		return
	}
	m.lastSuccess.SetToCurrentTime()
}
