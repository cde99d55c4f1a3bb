package kubelet

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/causeway-net/causeway/lab/netlab"
)

// TestDualStackStatus: on a dual-stack node the Node reports both
// InternalIPs and a Pod both pod and host IPs, IPv4 first; an IPv4-only
// node reports one of each.
func TestDualStackStatus(t *testing.T) {
	pod6, svc6 := netlab.IPv6CIDRs(1)
	dual, err := netlab.NewCluster(netlab.ClusterSpec{Name: "c1", Index: 1, Nodes: 2, Gateways: 1, PodCIDR6: pod6, ServiceCIDR6: svc6})
	if err != nil {
		t.Fatal(err)
	}
	v4, err := netlab.NewCluster(netlab.ClusterSpec{Name: "c1", Index: 1, Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node                   netlab.Node
		addrs, podIPs, hostIPs string
	}{
		{dual.Nodes[1], "[{InternalIP 172.18.1.11} {InternalIP fd00:172:18:1::11} {Hostname n1}]",
			"[{10.244.1.2} {fd00:10:244:1::102}]", "[{172.18.1.11} {fd00:172:18:1::11}]"},
		{v4.Nodes[1], "[{InternalIP 172.18.1.11} {Hostname n1}]", "[{10.244.1.2}]", "[{172.18.1.11}]"},
	} {
		k := &Kubelet{cfg: Config{Node: tc.node}}
		if got := fmt.Sprint(k.nodeAddresses()); got != tc.addrs {
			t.Errorf("node %v: addresses %s, want %s", tc.node.Address6, got, tc.addrs)
		}
		w := &worker{k: k, state: &podState{IP: "10.244.1.2"}, sandboxReady: true}
		st := w.buildStatus(&corev1.Pod{})
		if got := fmt.Sprint(st.PodIPs); got != tc.podIPs || st.PodIP != "10.244.1.2" {
			t.Errorf("node %v: pod IPs %s (%s), want %s", tc.node.Address6, got, st.PodIP, tc.podIPs)
		}
		if got := fmt.Sprint(st.HostIPs); got != tc.hostIPs || st.HostIP != "172.18.1.11" {
			t.Errorf("node %v: host IPs %s (%s), want %s", tc.node.Address6, got, st.HostIP, tc.hostIPs)
		}
		if p := w.netlabPod(); p.IP6 != tc.node.PodIP6(netip.MustParseAddr("10.244.1.2")) {
			t.Errorf("node %v: netlab pod IP6 %s", tc.node.Address6, p.IP6)
		}
	}
}
