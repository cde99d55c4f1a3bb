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
	egresses     prometheus.Gauge
	waiting      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "causeway", Subsystem: "globalnet_controller", Name: name, Help: help}
	}
	m := &metrics{
		syncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "causeway", Subsystem: "globalnet_controller", Name: "sync_duration_seconds",
			Help:    "Duration of one Service's or namespace's sync.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		syncFailures: prometheus.NewCounter(prometheus.CounterOpts(opts("sync_failures_total", "Service and namespace syncs that failed (retried with backoff)."))),
		lastSuccess:  prometheus.NewGauge(prometheus.GaugeOpts(opts("last_sync_success_timestamp_seconds", "Unix time of the last successful sync."))),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts(opts("api_writes_total", "GlobalIngress and GlobalEgress objects written, by operation.")),
			[]string{"op"}),
		ingresses: prometheus.NewGauge(prometheus.GaugeOpts(opts("global_ingresses", "Allocations (GlobalIngresses) held, released ones in quarantine included."))),
		egresses:  prometheus.NewGauge(prometheus.GaugeOpts(opts("global_egresses", "Namespace egress allocations (GlobalEgresses) held, released ones in quarantine included."))),
		waiting:   prometheus.NewGauge(prometheus.GaugeOpts(opts("pool_waiting", "Exported Services and namespaces with their own egress IPs waiting for room in this cluster's global CIDR."))),
	}
	if reg != nil {
		reg.MustRegister(m.syncDuration, m.syncFailures, m.lastSuccess, m.apiWrites, m.ingresses, m.egresses, m.waiting)
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

// poolCollector reports at scrape time how much of the global pool the
// allocator holds: the ingress range of this cluster's global CIDR,
// whose IPs carry the exports' IP:port pairs or are held whole by
// headless backing pods or as namespaces' egress IPs. Only the leader, once it has built its
// allocator, reports it (a standby replica, or a cluster whose gateway
// has claimed no global CIDR yet, reports none).
type poolCollector struct {
	alloc                          *allocation
	ips, ipsUsed, pairs, pairsUsed *prometheus.Desc
}

func newPoolCollector(alloc *allocation) *poolCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("causeway", "globalnet_controller", name), help, labels, nil)
	}
	return &poolCollector{
		alloc:     alloc,
		ips:       desc("pool_ips", "Global IPs of the pool: the ingress range of this cluster's global CIDR."),
		ipsUsed:   desc("pool_ips_used", "Global IPs of the pool in use, by use: carrying IP:port pairs of exported Services (pairs), held whole by a backing pod of a headless one (whole), a namespace's own egress IP (egress).", "use"),
		pairs:     desc("pool_pairs", "Global IP:port pairs of the pool (its IPs × ports per IP; IPs held whole carry none)."),
		pairsUsed: desc("pool_pairs_used", "Global IP:port pairs held by exported Services' ports."),
	}
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ips, c.ipsUsed, c.pairs, c.pairsUsed} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.alloc.mu.Lock()
	if c.alloc.pool == nil {
		c.alloc.mu.Unlock()
		return
	}
	u := c.alloc.pool.Usage()
	egress := 0
	for _, ips := range c.alloc.egress {
		egress += len(ips)
	}
	c.alloc.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.ips, prometheus.GaugeValue, float64(u.IPs))
	ch <- prometheus.MustNewConstMetric(c.ipsUsed, prometheus.GaugeValue, float64(u.PairIPs), "pairs")
	ch <- prometheus.MustNewConstMetric(c.ipsUsed, prometheus.GaugeValue, float64(u.WholeIPs-egress), "whole")
	ch <- prometheus.MustNewConstMetric(c.ipsUsed, prometheus.GaugeValue, float64(egress), "egress")
	ch <- prometheus.MustNewConstMetric(c.pairs, prometheus.GaugeValue, float64(u.Pairs))
	ch <- prometheus.MustNewConstMetric(c.pairsUsed, prometheus.GaugeValue, float64(u.PairsInUse))
}
