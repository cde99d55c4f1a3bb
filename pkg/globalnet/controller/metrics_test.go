package controller

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/globalnet"
)

// The pool's use after real allocations in a /28 (eleven ingress IPs of
// 64 512 ports each): a two-port Service on one IP, two headless pods on
// two whole IPs, a namespace's two egress IPs; none before the leader
// has an allocator.
func TestPoolCollector(t *testing.T) {
	alloc := allocation{egress: map[string][]string{}}
	c := newPoolCollector(&alloc)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("without an allocator: %d series, want none", n)
	}

	a, err := globalnet.NewIngressAllocator(netip.MustParsePrefix("242.0.0.0/28"))
	if err != nil {
		t.Fatal(err)
	}
	ports := []causewayv1alpha1.GlobalIngressPort{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 53}}
	if _, err := globalnet.AssignIngress(a, "demo", "web", causewayv1alpha1.GlobalIngressSpec{},
		globalnet.IngressWant{ClusterIP: netip.MustParseAddr("10.96.0.10"), Ports: ports}); err != nil {
		t.Fatal(err)
	}
	if _, err := globalnet.AssignIngress(a, "demo", "db", causewayv1alpha1.GlobalIngressSpec{},
		globalnet.IngressWant{Pods: []netip.Addr{netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("10.244.0.3")}}); err != nil {
		t.Fatal(err)
	}
	ips, err := globalnet.AssignEgress(a, "blue", nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	alloc.pool, alloc.egress["blue"] = a, ips

	want := `
# HELP causeway_globalnet_controller_pool_ips Global IPs of the pool: the ingress range of this cluster's global CIDR.
# TYPE causeway_globalnet_controller_pool_ips gauge
causeway_globalnet_controller_pool_ips 11
# HELP causeway_globalnet_controller_pool_ips_used Global IPs of the pool in use, by use: carrying IP:port pairs of exported Services (pairs), held whole by a backing pod of a headless one (whole), a namespace's own egress IP (egress).
# TYPE causeway_globalnet_controller_pool_ips_used gauge
causeway_globalnet_controller_pool_ips_used{use="egress"} 2
causeway_globalnet_controller_pool_ips_used{use="pairs"} 1
causeway_globalnet_controller_pool_ips_used{use="whole"} 2
# HELP causeway_globalnet_controller_pool_pairs Global IP:port pairs of the pool (its IPs × ports per IP; IPs held whole carry none).
# TYPE causeway_globalnet_controller_pool_pairs gauge
causeway_globalnet_controller_pool_pairs 709632
# HELP causeway_globalnet_controller_pool_pairs_used Global IP:port pairs held by exported Services' ports.
# TYPE causeway_globalnet_controller_pool_pairs_used gauge
causeway_globalnet_controller_pool_pairs_used 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
