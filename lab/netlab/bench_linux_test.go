package netlab

import (
	"fmt"
	"net/netip"
	"os/exec"
	"testing"
	"time"
)

// ipUpScript builds the same node as the benchmark with `ip` commands (a
// bridge namespace, one node, 20 routed pods): the baseline lab.md quotes.
const ipUpScript = `set -e
P=$1
ip netns add ${P}c1
ip -n ${P}c1 link set lo up
ip -n ${P}c1 link add br0 type bridge
ip -n ${P}c1 link set br0 up
ip netns add ${P}c1.n0
ip -n ${P}c1.n0 link set lo up
ip -n ${P}c1 link add n0 type veth peer name eth0 netns ${P}c1.n0
ip -n ${P}c1 link set n0 master br0 up
ip -n ${P}c1.n0 addr add 172.18.1.10/24 dev eth0
ip -n ${P}c1.n0 link set eth0 up
for i in $(seq 2 21); do
  ns=${P}c1.n0.default.p$i
  ip netns add $ns
  ip -n $ns link set lo up
  ip -n ${P}c1.n0 link add h$i address ee:ee:ee:ee:ee:ee type veth peer name eth0 netns $ns
  ip -n ${P}c1.n0 link set h$i up
  ip -n $ns addr add 10.244.0.$i/32 dev eth0
  ip -n $ns link set eth0 up
  ip -n $ns neigh replace 169.254.1.1 lladdr ee:ee:ee:ee:ee:ee dev eth0 nud permanent
  ip -n $ns route add 169.254.1.1 dev eth0 scope link
  ip -n $ns route add default via 169.254.1.1 dev eth0 onlink
  ip -n ${P}c1.n0 route add 10.244.0.$i/32 dev h$i
done
`

const ipDownScript = `set -e
for f in /run/netns/$1*; do ip netns del "$(basename "$f")"; done
`

// BenchmarkNodeWith20Pods measures building one node with 20 pods and
// tearing it down, with netlab and with `ip` commands in the same run.
// Reported: seconds up/down for each and netlab's time as a fraction of
// ip's.
func BenchmarkNodeWith20Pods(b *testing.B) {
	var labUp, labDown, ipUp, ipDown time.Duration
	for i := 0; i < b.N; i++ {
		h := newTestHost(b)
		c, err := NewCluster(ClusterSpec{Name: "c1", Index: 1, Nodes: 1})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := h.Apply(Topology{Prefix: h.prefix, Clusters: []Cluster{c}}); err != nil {
			b.Fatal(err)
		}
		for p := 2; p < 22; p++ {
			pod := Pod{Cluster: "c1", Node: "n0", Namespace: "default", Name: fmt.Sprintf("p%d", p), IP: netip.AddrFrom4([4]byte{10, 244, 0, byte(p)})}
			if err := h.EnsurePod(pod); err != nil {
				b.Fatal(err)
			}
		}
		labUp += time.Since(start)
		start = time.Now()
		if _, err := h.Teardown(); err != nil {
			b.Fatal(err)
		}
		labDown += time.Since(start)

		// Baseline with the same prefix scheme, cleaned up by the
		// test host's teardown as well.
		hb := newTestHost(b)
		start = time.Now()
		if out, err := exec.Command("bash", "-c", ipUpScript, "up", hb.prefix).CombinedOutput(); err != nil {
			b.Fatalf("ip baseline up: %v: %s", err, out)
		}
		ipUp += time.Since(start)
		start = time.Now()
		if out, err := exec.Command("bash", "-c", ipDownScript, "down", hb.prefix).CombinedOutput(); err != nil {
			b.Fatalf("ip baseline down: %v: %s", err, out)
		}
		ipDown += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(labUp.Seconds()/n, "s-up/op")
	b.ReportMetric(labDown.Seconds()/n, "s-down/op")
	b.ReportMetric(ipUp.Seconds()/n, "ip-s-up/op")
	b.ReportMetric(ipDown.Seconds()/n, "ip-s-down/op")
	b.ReportMetric(labUp.Seconds()/ipUp.Seconds(), "up-vs-ip")
	b.ReportMetric(labDown.Seconds()/ipDown.Seconds(), "down-vs-ip")
}

// BenchmarkApplyDefaultTopology measures building and tearing down the
// default three-cluster lab's plumbing (2 nodes per cluster, no pods).
func BenchmarkApplyDefaultTopology(b *testing.B) {
	var up, down time.Duration
	for i := 0; i < b.N; i++ {
		h := newTestHost(b)
		top, err := DefaultTopology(h.prefix, 2)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := h.Apply(top); err != nil {
			b.Fatal(err)
		}
		up += time.Since(start)
		start = time.Now()
		if _, err := h.Teardown(); err != nil {
			b.Fatal(err)
		}
		down += time.Since(start)
	}
	b.ReportMetric(up.Seconds()/float64(b.N), "s-up/op")
	b.ReportMetric(down.Seconds()/float64(b.N), "s-down/op")
}
