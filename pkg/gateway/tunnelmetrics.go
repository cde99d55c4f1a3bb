package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/causeway-net/causeway/pkg/cable"
)

// termView is what a scrape reads of the active term: its cable driver
// and the remote objects its last sync refused. The term sets it and
// clears it when it ends; the tunnel collector reads it at scrape time,
// so the tunnels' figures are the driver's own, not a copy kept here.
type termView struct {
	mu      sync.Mutex
	driver  cable.Driver
	refused []refusal
}

// refusal is one remote object the last sync refused.
type refusal struct {
	cluster, kind, reason string
}

func (v *termView) setDriver(d cable.Driver) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.driver = d
}

func (v *termView) setRefused(r []refusal) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.refused = r
}

// clear forgets the term: a passive candidate reports no tunnel.
func (v *termView) clear() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.driver, v.refused = nil, nil
}

func (v *termView) get() (cable.Driver, []refusal) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.driver, v.refused
}

// refusals lists the objects of remote clusters that d refuses (this
// cluster's own are not remotes).
func refusals(own string, d Desired) []refusal {
	var out []refusal
	for _, c := range d.Clusters {
		if c.ClusterID == own {
			continue
		}
		if c.Cluster != nil && !c.Cluster.Valid {
			out = append(out, refusal{cluster: c.ClusterID, kind: "Cluster", reason: c.Cluster.Reason})
		}
		if c.Endpoint != nil && !c.Endpoint.Valid {
			out = append(out, refusal{cluster: c.ClusterID, kind: "Endpoint", reason: c.Endpoint.Reason})
		}
	}
	return out
}

// deviceCounters are the kernel's counters of the tunnel device: every
// remote's traffic together.
type deviceCounters struct {
	RxBytes, TxBytes, RxPackets, TxPackets uint64
}

// scrapeTimeout bounds the driver's answer to one scrape.
const scrapeTimeout = 2 * time.Second

// tunnelCollector reports the active term's tunnels at scrape time, as
// the cable driver counts them (Driver.Connections: per remote cluster,
// what the driver can count) and as the kernel counts the tunnel device,
// and the remote objects the last sync refused. A passive candidate
// reports none of them.
type tunnelCollector struct {
	view *termView
	// device is the tunnel device, readDevice reads its counters.
	device     string
	readDevice func() (deviceCounters, error)
	log        *slog.Logger

	rxBytes, txBytes, rxPackets, txPackets, handshake  *prometheus.Desc
	devRxBytes, devTxBytes, devRxPackets, devTxPackets *prometheus.Desc
	refused                                            *prometheus.Desc
}

func newTunnelCollector(view *termView, device string, readDevice func() (deviceCounters, error), log *slog.Logger) *tunnelCollector {
	remote := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("causeway", "gateway", name), help, []string{"remote_cluster"}, nil)
	}
	dev := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("causeway", "gateway", name), help, []string{"device"}, nil)
	}
	return &tunnelCollector{
		view: view, device: device, readDevice: readDevice, log: log,
		rxBytes:   remote("tunnel_receive_bytes_total", "Bytes received through the tunnel from each remote cluster, as the cable driver counts them (wireguard, ipsec; restart when the peer is re-added or the SA rekeyed)."),
		txBytes:   remote("tunnel_transmit_bytes_total", "Bytes sent through the tunnel to each remote cluster, as the cable driver counts them (wireguard, ipsec)."),
		rxPackets: remote("tunnel_receive_packets_total", "Packets received through the tunnel from each remote cluster, as the cable driver counts them (ipsec only)."),
		txPackets: remote("tunnel_transmit_packets_total", "Packets sent through the tunnel to each remote cluster, as the cable driver counts them (ipsec only)."),
		handshake: remote("tunnel_last_handshake_timestamp_seconds", "Unix time of the tunnel's last handshake with each remote cluster (wireguard: the peer's; ipsec: when the IKE_SA was established)."),
		devRxBytes: dev("tunnel_device_receive_bytes_total",
			"Bytes the tunnel device received, every remote together (the kernel's counters; every driver)."),
		devTxBytes:   dev("tunnel_device_transmit_bytes_total", "Bytes the tunnel device sent, every remote together."),
		devRxPackets: dev("tunnel_device_receive_packets_total", "Packets the tunnel device received, every remote together."),
		devTxPackets: dev("tunnel_device_transmit_packets_total", "Packets the tunnel device sent, every remote together."),
		refused: prometheus.NewDesc("causeway_gateway_remote_refused",
			"1 for each object (Cluster, Endpoint) of a remote cluster that the last sync refused, with the reason of its Valid condition.",
			[]string{"remote_cluster", "kind", "reason"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *tunnelCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rxBytes, c.txBytes, c.rxPackets, c.txPackets, c.handshake,
		c.devRxBytes, c.devTxBytes, c.devRxPackets, c.devTxPackets, c.refused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A counter the driver cannot
// keep (-1) is left out; so are the tunnels when the driver does not
// answer (logged: the rest of the scrape stands).
func (c *tunnelCollector) Collect(ch chan<- prometheus.Metric) {
	drv, refused := c.view.get()
	for _, r := range refused {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.GaugeValue, 1, r.cluster, r.kind, r.reason)
	}
	if drv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	conns, err := drv.Connections(ctx)
	if err != nil {
		c.log.Warn("tunnel metrics: read the connections", "err", err)
	}
	for _, s := range conns {
		for _, m := range []struct {
			d *prometheus.Desc
			v int64
		}{{c.rxBytes, s.RxBytes}, {c.txBytes, s.TxBytes}, {c.rxPackets, s.RxPackets}, {c.txPackets, s.TxPackets}} {
			if m.v >= 0 {
				ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v), s.ClusterID)
			}
		}
		if !s.LastHandshake.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.handshake, prometheus.GaugeValue, float64(s.LastHandshake.UnixNano())/1e9, s.ClusterID)
		}
	}
	dev, err := c.readDevice()
	if err != nil {
		c.log.Warn("tunnel metrics: read the device counters", "err", err)
		return
	}
	for _, m := range []struct {
		d *prometheus.Desc
		v uint64
	}{{c.devRxBytes, dev.RxBytes}, {c.devTxBytes, dev.TxBytes}, {c.devRxPackets, dev.RxPackets}, {c.devTxPackets, dev.TxPackets}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.CounterValue, float64(m.v), c.device)
	}
}
