package gateway

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable"
)

// countingDriver is a cable.Driver whose Connections answers conns (or
// err); nothing else is called by the collector.
type countingDriver struct {
	cable.Driver
	conns []cable.Status
	err   error
}

func (d countingDriver) Connections(context.Context) ([]cable.Status, error) { return d.conns, d.err }

func TestTunnelCollector(t *testing.T) {
	hs := time.Unix(1767225600, 500e6) // 2026-01-01T00:00:00.5Z
	drv := countingDriver{conns: []cable.Status{
		// as the wireguard driver reports: bytes and a handshake, no packets
		{ClusterID: "c2", Connected: true, LastHandshake: hs, RxBytes: 1500, TxBytes: 2500, RxPackets: -1, TxPackets: -1},
		// as ipsec does: every counter
		{ClusterID: "c3", Connected: true, LastHandshake: hs.Add(time.Minute), RxBytes: 10, TxBytes: 20, RxPackets: 1, TxPackets: 2},
		// as vxlan does: nothing per remote, no handshake
		{ClusterID: "c4", Connected: true, RxBytes: -1, TxBytes: -1, RxPackets: -1, TxPackets: -1},
	}}
	// The verdicts come from Compute: c5 speaks another driver, c6's
	// Endpoint claims a subnet outside its Cluster's CIDRs; c1 (this
	// cluster) is no remote, c3 is valid.
	c5 := remote("c5", 1, cl("c5", []string{"10.246.0.0/16"}, []string{"10.98.0.0/16"}),
		ep("c5", "198.18.5.10", 4500, keyB, "10.246.0.0/16"))
	c5.Endpoint.CableDriver = "vxlan"
	c6 := remote("c6", 2, cl("c6", []string{"10.247.0.0/16"}, []string{"10.99.0.0/16"}),
		ep("c6", "198.18.6.10", 4500, "ivHFDEyeNKFbXCLqhxR5C6ig7mAXwEdPYcGRPdZSbmI=", "10.248.0.0/16"))
	d := Compute(local, []Remote{good3(), c5, c6,
		remote("c1", 0, cl("c1", []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}), ep("c1", "198.18.1.10", 4500, keyB, "10.244.0.0/16"))})

	var view termView
	view.setDriver(drv)
	view.setRefused(refusals("c1", d))
	c := newTunnelCollector(&view, "cw-gw", func() (deviceCounters, error) {
		return deviceCounters{RxBytes: 7000, TxBytes: 8000, RxPackets: 70, TxPackets: 80}, nil
	}, slog.New(slog.DiscardHandler))

	want := `
# HELP causeway_gateway_remote_refused 1 for each object (Cluster, Endpoint) of a remote cluster that the last sync refused, with the reason of its Valid condition.
# TYPE causeway_gateway_remote_refused gauge
causeway_gateway_remote_refused{kind="Endpoint",reason="DriverMismatch",remote_cluster="c5"} 1
causeway_gateway_remote_refused{kind="Endpoint",reason="InvalidCIDR",remote_cluster="c6"} 1
# HELP causeway_gateway_tunnel_device_receive_bytes_total Bytes the tunnel device received, every remote together (the kernel's counters; every driver).
# TYPE causeway_gateway_tunnel_device_receive_bytes_total counter
causeway_gateway_tunnel_device_receive_bytes_total{device="cw-gw"} 7000
# HELP causeway_gateway_tunnel_device_receive_packets_total Packets the tunnel device received, every remote together.
# TYPE causeway_gateway_tunnel_device_receive_packets_total counter
causeway_gateway_tunnel_device_receive_packets_total{device="cw-gw"} 70
# HELP causeway_gateway_tunnel_device_transmit_bytes_total Bytes the tunnel device sent, every remote together.
# TYPE causeway_gateway_tunnel_device_transmit_bytes_total counter
causeway_gateway_tunnel_device_transmit_bytes_total{device="cw-gw"} 8000
# HELP causeway_gateway_tunnel_device_transmit_packets_total Packets the tunnel device sent, every remote together.
# TYPE causeway_gateway_tunnel_device_transmit_packets_total counter
causeway_gateway_tunnel_device_transmit_packets_total{device="cw-gw"} 80
# HELP causeway_gateway_tunnel_last_handshake_timestamp_seconds Unix time of the tunnel's last handshake with each remote cluster (wireguard: the peer's; ipsec: when the IKE_SA was established).
# TYPE causeway_gateway_tunnel_last_handshake_timestamp_seconds gauge
causeway_gateway_tunnel_last_handshake_timestamp_seconds{remote_cluster="c2"} 1.7672256005e+09
causeway_gateway_tunnel_last_handshake_timestamp_seconds{remote_cluster="c3"} 1.7672256605e+09
# HELP causeway_gateway_tunnel_receive_bytes_total Bytes received through the tunnel from each remote cluster, as the cable driver counts them (wireguard, ipsec; restart when the peer is re-added or the SA rekeyed).
# TYPE causeway_gateway_tunnel_receive_bytes_total counter
causeway_gateway_tunnel_receive_bytes_total{remote_cluster="c2"} 1500
causeway_gateway_tunnel_receive_bytes_total{remote_cluster="c3"} 10
# HELP causeway_gateway_tunnel_receive_packets_total Packets received through the tunnel from each remote cluster, as the cable driver counts them (ipsec only).
# TYPE causeway_gateway_tunnel_receive_packets_total counter
causeway_gateway_tunnel_receive_packets_total{remote_cluster="c3"} 1
# HELP causeway_gateway_tunnel_transmit_bytes_total Bytes sent through the tunnel to each remote cluster, as the cable driver counts them (wireguard, ipsec).
# TYPE causeway_gateway_tunnel_transmit_bytes_total counter
causeway_gateway_tunnel_transmit_bytes_total{remote_cluster="c2"} 2500
causeway_gateway_tunnel_transmit_bytes_total{remote_cluster="c3"} 20
# HELP causeway_gateway_tunnel_transmit_packets_total Packets sent through the tunnel to each remote cluster, as the cable driver counts them (ipsec only).
# TYPE causeway_gateway_tunnel_transmit_packets_total counter
causeway_gateway_tunnel_transmit_packets_total{remote_cluster="c3"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	// A driver that does not answer costs the tunnels' series, not the
	// refusals or the device's.
	view.setDriver(countingDriver{err: errors.New("driver closed")})
	if n := testutil.CollectAndCount(c, "causeway_gateway_tunnel_receive_bytes_total", "causeway_gateway_remote_refused",
		"causeway_gateway_tunnel_device_receive_bytes_total"); n != 3 {
		t.Errorf("with a failing driver: %d series, want 2 refusals and 1 device counter", n)
	}

	// A passive candidate (the term ended) reports nothing.
	view.clear()
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("passive: %d series, want none", n)
	}
}

func TestRefusalsSkipValidAndOwn(t *testing.T) {
	d := Desired{Clusters: []ClusterState{
		{ClusterID: "c1", Cluster: &Verdict{Reason: "X"}, Endpoint: &Verdict{Reason: "Y"}},
		{ClusterID: "c2", Cluster: &Verdict{Valid: true}, Endpoint: &Verdict{Reason: v1alpha1.ReasonKeyInUse}},
		{ClusterID: "c3", Cluster: &Verdict{Reason: v1alpha1.ReasonCIDRNotAllowed}},
		{ClusterID: "c4", Cluster: &Verdict{Valid: true}, Endpoint: &Verdict{Valid: true}},
	}}
	got := refusals("c1", d)
	want := []refusal{{"c2", "Endpoint", v1alpha1.ReasonKeyInUse}, {"c3", "Cluster", v1alpha1.ReasonCIDRNotAllowed}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("refusals = %v, want %v", got, want)
	}
}
