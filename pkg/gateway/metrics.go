package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// metrics are the gateway's Prometheus series (subsystem "gateway").
type metrics struct {
	active         prometheus.Gauge
	connStatus     *prometheus.GaugeVec
	rtt            *prometheus.HistogramVec
	probesLost     *prometheus.CounterVec
	sessionResets  *prometheus.CounterVec
	syncDuration   prometheus.Histogram
	syncFailures   prometheus.Counter
	lastSync       prometheus.Gauge
	remotes        *prometheus.GaugeVec
	leaderChanges  prometheus.Counter
	driverSetFails prometheus.Counter
	leaseRenewed   prometheus.Gauge
	unreachable    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "causeway", "gateway"
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "active",
			Help: "1 while this candidate is the cluster's active gateway."}),
		connStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "connection_status",
			Help: "1 for the current status (connecting, connected, error) of the tunnel to each remote cluster."},
			[]string{"remote_cluster", "status"}),
		rtt: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "health_check_rtt_seconds",
			Help:    "Round-trip time of health-check echoes through the tunnel.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16)}, []string{"remote_cluster"}),
		probesLost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "health_check_lost_total",
			Help: "Health-check echoes that got no answer."}, []string{"remote_cluster"}),
		sessionResets: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "tunnel_session_resets_total",
			Help: "Tunnel sessions restarted because the remote's health checks went unanswered (a new handshake)."}, []string{"remote_cluster"}),
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "sync_duration_seconds",
			Help: "Duration of one sync (publish, mirror, program the cable).", Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "sync_failures_total",
			Help: "Syncs that returned an error (retried)."}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "last_sync_success_timestamp_seconds",
			Help: "Unix time of the last successful sync."}),
		remotes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "remote_endpoints",
			Help: "Remote Endpoints by validity (valid, invalid)."}, []string{"validity"}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "leader_transitions_total",
			Help: "Times this candidate became the active gateway."}),
		driverSetFails: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "cable_set_failures_total",
			Help: "Cable driver Set calls that returned an error other than refused connections."}),
		leaseRenewed: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "lease_renewed_timestamp_seconds",
			Help: "Unix time at which this candidate sent its last successful write of the gateway Lease."}),
		unreachable: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "unreachable_remotes",
			Help: "Remote clusters this active gateway tells the route agents are unreachable (health checks silent)."}),
	}
	if reg != nil {
		reg.MustRegister(m.active, m.connStatus, m.rtt, m.probesLost, m.sessionResets, m.syncDuration, m.syncFailures,
			m.lastSync, m.remotes, m.leaderChanges, m.driverSetFails, m.leaseRenewed, m.unreachable)
	}
	return m
}

// setConnStatus makes status the only status reported for cluster.
func (m *metrics) setConnStatus(cluster string, status v1alpha1.ConnectionStatus) {
	for _, s := range []v1alpha1.ConnectionStatus{v1alpha1.Connecting, v1alpha1.Connected, v1alpha1.ConnError} {
		v := 0.0
		if s == status {
			v = 1
		}
		m.connStatus.WithLabelValues(cluster, string(s)).Set(v)
	}
}
