package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Prometheus metrics, subsystem "mcs".
type metrics struct {
	syncDuration *prometheus.HistogramVec
	syncFailures prometheus.Counter
	lastSuccess  prometheus.Gauge
	exports      prometheus.Gauge
	imports      prometheus.Gauge
	slices       prometheus.Gauge
	clusters     *prometheus.GaugeVec
	renewals     *prometheus.CounterVec
	apiWrites    *prometheus.CounterVec
	refused      prometheus.Gauge
	overQuota    *prometheus.GaugeVec
	tokenExpiry  prometheus.Gauge
	tokenFailed  prometheus.Counter
	queueDepth   prometheus.GaugeFunc
}

// newMetrics registers the controller's metrics in reg (nil: none);
// queueDepth reads its work queue's length.
func newMetrics(reg prometheus.Registerer, queueDepth func() int) *metrics {
	m := &metrics{
		syncDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "sync_duration_seconds",
			Help:    "Duration of one Service's sync (export, merge, VIP, import, slices), by result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"result"}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "sync_failures_total",
			Help: "Service syncs that failed (retried with backoff).",
		}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "last_sync_success_timestamp_seconds",
			Help: "Unix time of the last successful Service sync.",
		}),
		exports: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "exports",
			Help: "ServiceExports of this cluster published to the broker.",
		}),
		imports: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "imports",
			Help: "ServiceImports this controller maintains in this cluster.",
		}),
		slices: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "endpoint_slices",
			Help: "Multi-cluster EndpointSlices this controller maintains in this cluster.",
		}),
		clusters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "clusters",
			Help: "Member clusters seen through their liveness Leases, by state (alive, dead).",
		}, []string{"state"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "liveness_renewals_total",
			Help: "Renewals of this cluster's liveness Lease in the broker, by result.",
		}, []string{"result"}),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "api_writes_total",
			Help: "Objects written, by kind and operation.",
		}, []string{"kind", "op"}),
		overQuota: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "remote_record_objects_over_quota",
			Help: "A remote cluster's ServiceExportRecord objects beyond its quota of records or backends: not imported, their specs not kept.",
		}, []string{"cluster"}),
		refused: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "remote_records_refused",
			Help: "Remote export records refused (address policy, incomplete set, quota; one per Service and cluster); they contribute nothing.",
		}),
		tokenExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "broker_token_expiry_timestamp_seconds",
			Help: "Unix time the broker token last stored in Secret causeway-broker expires (rotated at half its lifetime).",
		}),
		tokenFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "broker_token_rotation_failures_total",
			Help: "Failed attempts to rotate the broker token (retried; the current token stays valid until it expires).",
		}),
		queueDepth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "causeway", Subsystem: "mcs", Name: "queue_depth",
			Help: "Services waiting in the controller's work queue for a sync now (not those in a retry backoff, nor those being synced).",
		}, func() float64 { return float64(queueDepth()) }),
	}
	if reg != nil {
		reg.MustRegister(m.syncDuration, m.syncFailures, m.lastSuccess, m.exports, m.imports, m.slices, m.clusters, m.renewals, m.apiWrites, m.refused, m.overQuota, m.tokenExpiry, m.tokenFailed, m.queueDepth)
	}
	return m
}

func (m *metrics) observe(d time.Duration, err error) {
	if err != nil {
		m.syncDuration.WithLabelValues("error").Observe(d.Seconds())
		m.syncFailures.Inc()
		return
	}
	m.syncDuration.WithLabelValues("success").Observe(d.Seconds())
	m.lastSuccess.SetToCurrentTime()
}
