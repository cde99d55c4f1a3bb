package netlab

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func mustCluster(t *testing.T, s ClusterSpec) Cluster {
	t.Helper()
	c, err := NewCluster(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewClusterAddressPlan(t *testing.T) {
	c := mustCluster(t, ClusterSpec{Name: "c2", Index: 2, Nodes: 3, Gateways: 1})
	if c.NodeCIDR.String() != "172.18.2.0/24" || c.PodCIDR != DefaultPodCIDR || c.ServiceCIDR != DefaultServiceCIDR {
		t.Errorf("cluster CIDRs %s %s %s", c.NodeCIDR, c.PodCIDR, c.ServiceCIDR)
	}
	want := []Node{
		{Name: "n0", Address: netip.MustParsePrefix("172.18.2.10/24"), PodCIDR: netip.MustParsePrefix("10.244.0.0/24"), WANAddress: netip.MustParsePrefix("198.18.2.10/15")},
		{Name: "n1", Address: netip.MustParsePrefix("172.18.2.11/24"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24")},
		{Name: "n2", Address: netip.MustParsePrefix("172.18.2.12/24"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")},
	}
	if len(c.Nodes) != len(want) {
		t.Fatalf("%d nodes", len(c.Nodes))
	}
	for i := range want {
		if c.Nodes[i] != want[i] {
			t.Errorf("node %d = %+v, want %+v", i, c.Nodes[i], want[i])
		}
	}
	if !c.Nodes[0].Gateway() || c.Nodes[1].Gateway() {
		t.Error("gateway flags wrong")
	}
	top := Topology{Prefix: "cwl-", WAN: DefaultWAN, Clusters: []Cluster{c}}
	if err := top.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestNewClusterCustomCIDRs(t *testing.T) {
	c := mustCluster(t, ClusterSpec{Name: "c3", Index: 3, Nodes: 2, PodCIDR: netip.MustParsePrefix("10.245.0.0/16"), ServiceCIDR: netip.MustParsePrefix("10.97.0.0/16"), NodePodBits: 26})
	if c.Nodes[1].PodCIDR.String() != "10.245.0.64/26" {
		t.Errorf("node 1 pod CIDR %s", c.Nodes[1].PodCIDR)
	}
	for _, bad := range []ClusterSpec{
		{Name: "x", Index: 0, Nodes: 1},
		{Name: "x", Index: 255, Nodes: 1},
		{Name: "x", Index: 1, Nodes: 1, Gateways: 2},
		{Name: "x", Index: 1, Nodes: 5, PodCIDR: netip.MustParsePrefix("10.0.0.0/23"), NodePodBits: 24},
	} {
		if _, err := NewCluster(bad); err == nil {
			t.Errorf("NewCluster(%+v) succeeded", bad)
		}
	}
}

func TestSubnet(t *testing.T) {
	for _, tc := range []struct {
		p       string
		bits, i int
		want    string
	}{
		{"10.244.0.0/16", 24, 0, "10.244.0.0/24"},
		{"10.244.0.0/16", 24, 255, "10.244.255.0/24"},
		{"10.244.0.0/16", 20, 3, "10.244.48.0/20"},
		{"10.0.0.0/8", 16, 200, "10.200.0.0/16"},
		{"192.168.1.7/24", 32, 9, "192.168.1.9/32"},
	} {
		got, err := Subnet(netip.MustParsePrefix(tc.p), tc.bits, tc.i)
		if err != nil || got.String() != tc.want {
			t.Errorf("Subnet(%s, %d, %d) = %s, %v; want %s", tc.p, tc.bits, tc.i, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		p       string
		bits, i int
	}{{"10.244.0.0/16", 24, 256}, {"10.244.0.0/16", 15, 0}, {"10.244.0.0/16", 24, -1}, {"fd00::/64", 72, 0}} {
		if got, err := Subnet(netip.MustParsePrefix(tc.p), tc.bits, tc.i); err == nil {
			t.Errorf("Subnet(%s, %d, %d) = %s, want error", tc.p, tc.bits, tc.i, got)
		}
	}
}

func TestAllocatePodIP(t *testing.T) {
	p := netip.MustParsePrefix("10.244.3.0/24")
	used := map[netip.Addr]bool{}
	a, err := AllocatePodIP(p, used)
	if err != nil || a.String() != "10.244.3.2" {
		t.Fatalf("first = %s, %v", a, err)
	}
	used[a] = true
	used[netip.MustParseAddr("10.244.3.3")] = true
	a, _ = AllocatePodIP(p, used)
	if a.String() != "10.244.3.4" {
		t.Errorf("next = %s, want 10.244.3.4", a)
	}
	// Fill a /29: .2 … .6 usable (5 addresses).
	small := netip.MustParsePrefix("10.0.0.8/29")
	used = map[netip.Addr]bool{}
	for i := 0; i < 5; i++ {
		a, err := AllocatePodIP(small, used)
		if err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		if a == small.Addr() || a == small.Addr().Next() || a.String() == "10.0.0.15" || !small.Contains(a) {
			t.Fatalf("allocated reserved or foreign address %s", a)
		}
		used[a] = true
	}
	if _, err := AllocatePodIP(small, used); !errors.Is(err, ErrPoolExhausted) {
		t.Errorf("exhausted pool: %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	good := func() Topology {
		c1 := mustCluster(t, ClusterSpec{Name: "c1", Index: 1, Nodes: 2, Gateways: 1})
		c2 := mustCluster(t, ClusterSpec{Name: "c2", Index: 2, Nodes: 2, Gateways: 1})
		return Topology{Prefix: "cwl-", WAN: DefaultWAN, Clusters: []Cluster{c1, c2}}
	}
	if err := good().Validate(); err != nil {
		t.Fatalf("good topology: %v", err)
	}
	for name, mutate := range map[string]func(*Topology){
		"bad prefix":          func(t *Topology) { t.Prefix = "CW" },
		"reserved name":       func(t *Topology) { t.Clusters[0].Name = "wan" },
		"dotted cluster":      func(t *Topology) { t.Clusters[0].Name = "c.1" },
		"duplicate cluster":   func(t *Topology) { t.Clusters[1].Name = "c1" },
		"dotted node":         func(t *Topology) { t.Clusters[0].Nodes[0].Name = "n.0" },
		"duplicate node":      func(t *Topology) { t.Clusters[0].Nodes[1].Name = "n0" },
		"node outside net":    func(t *Topology) { t.Clusters[0].Nodes[0].Address = netip.MustParsePrefix("172.19.1.10/24") },
		"duplicate node addr": func(t *Topology) { t.Clusters[0].Nodes[1].Address = t.Clusters[0].Nodes[0].Address },
		"overlapping slices":  func(t *Topology) { t.Clusters[0].Nodes[1].PodCIDR = netip.MustParsePrefix("10.244.0.0/25") },
		"slice outside":       func(t *Topology) { t.Clusters[0].Nodes[1].PodCIDR = netip.MustParsePrefix("10.245.0.0/24") },
		"pod overlaps svc":    func(t *Topology) { t.Clusters[0].ServiceCIDR = netip.MustParsePrefix("10.244.128.0/20") },
		"duplicate WAN addr":  func(t *Topology) { t.Clusters[1].Nodes[0].WANAddress = t.Clusters[0].Nodes[0].WANAddress },
		"WAN addr outside":    func(t *Topology) { t.Clusters[1].Nodes[0].WANAddress = netip.MustParsePrefix("203.0.113.1/15") },
		"gateway without WAN": func(t *Topology) { t.WAN = netip.Prefix{} },
	} {
		top := good()
		mutate(&top)
		if err := top.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", name)
		}
	}
}

func TestNodeRoutes(t *testing.T) {
	c := mustCluster(t, ClusterSpec{Name: "c1", Index: 1, Nodes: 3})
	got := c.NodeRoutes("n1")
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.0.0/24"), Via: netip.MustParseAddr("172.18.1.10"), Dev: "eth0"},
		{Dst: netip.MustParsePrefix("10.244.2.0/24"), Via: netip.MustParseAddr("172.18.1.12"), Dev: "eth0"},
		{Dst: netip.MustParsePrefix("10.96.0.0/16"), Dev: "eth0", Src: netip.MustParseAddr("172.18.1.11")},
	}
	if len(got) != len(want) {
		t.Fatalf("routes %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("route %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if c.NodeRoutes("nope") != nil {
		t.Error("routes for unknown node")
	}
}

func TestNames(t *testing.T) {
	n := Names{Prefix: "cwl-"}
	if n.Switch("c1") != "cwl-c1" || n.WAN() != "cwl-wan" || n.Node("c1", "n0") != "cwl-c1.n0" || n.Pod("c1", "n0", "kubecon", "whereami-1") != "cwl-c1.n0.kubecon.whereami-1" {
		t.Errorf("names: %s %s %s %s", n.Switch("c1"), n.WAN(), n.Node("c1", "n0"), n.Pod("c1", "n0", "kubecon", "whereami-1"))
	}
	long := strings.Repeat("a", 253)
	p1, p2 := n.Pod("c1", "n0", "ns", long), n.Pod("c1", "n0", "ns", long+"b")
	if len(p1) > maxNetnsName || len(p2) > maxNetnsName || p1 == p2 || !strings.HasPrefix(p1, n.Node("c1", "n0")+".") {
		t.Errorf("long pod names %q %q", p1, p2)
	}
	hv := HostVeth("kubecon", "whereami-1")
	if len(hv) != 15 || !strings.HasPrefix(hv, "cw") || hv == HostVeth("kubecon", "whereami-2") || hv != HostVeth("kubecon", "whereami-1") {
		t.Errorf("host veth %q", hv)
	}
	if SwitchPort("n0") != "n0" || WANPort("c1", "n0") != "c1.n0" {
		t.Errorf("ports %q %q", SwitchPort("n0"), WANPort("c1", "n0"))
	}
	lp := WANPort("cluster-number-one", "node-number-one")
	if len(lp) > 15 || !strings.Contains(lp, "_") || lp == WANPort("cluster-number-one", "node-number-two") {
		t.Errorf("long port %q", lp)
	}
	l := CgroupLayout{Root: "/sys/fs/cgroup/unified", Prefix: "cwl-"}
	if l.Node("c1", "n0") != "/sys/fs/cgroup/unified/causeway-lab/cwl-c1/n0" ||
		l.NodeSystem("c1", "n0") != "/sys/fs/cgroup/unified/causeway-lab/cwl-c1/n0/system" ||
		l.Pod("c1", "n0", "kubecon", "w") != "/sys/fs/cgroup/unified/causeway-lab/cwl-c1/n0/pod-kubecon.w" {
		t.Errorf("cgroups %s %s %s", l.Node("c1", "n0"), l.NodeSystem("c1", "n0"), l.Pod("c1", "n0", "kubecon", "w"))
	}
}

func TestFindCgroup2Mount(t *testing.T) {
	hybrid := `24 31 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
32 24 0:27 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
33 32 0:28 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
36 32 0:31 / /sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,cpu
`
	if got := FindCgroup2Mount(hybrid); got != "/sys/fs/cgroup/unified" {
		t.Errorf("hybrid: %q", got)
	}
	unified := "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n"
	if got := FindCgroup2Mount(unified); got != "/sys/fs/cgroup" {
		t.Errorf("unified: %q", got)
	}
	escaped := "40 23 0:40 / /mnt/my\\040cg rw - cgroup2 none rw\n"
	if got := FindCgroup2Mount(escaped); got != "/mnt/my cg" {
		t.Errorf("escaped: %q", got)
	}
	if got := FindCgroup2Mount("36 32 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"); got != "" {
		t.Errorf("v1 only: %q", got)
	}
}

func TestDefaultTopology(t *testing.T) {
	top, err := DefaultTopology(DefaultPrefix, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Clusters) != 3 {
		t.Fatalf("%d clusters", len(top.Clusters))
	}
	c1, c2, c3 := top.Clusters[0], top.Clusters[1], top.Clusters[2]
	if c1.PodCIDR != c2.PodCIDR || c1.ServiceCIDR != c2.ServiceCIDR {
		t.Error("c1 and c2 must share pod and service CIDRs")
	}
	if c3.PodCIDR.Overlaps(c1.PodCIDR) || c3.ServiceCIDR.Overlaps(c1.ServiceCIDR) {
		t.Error("c3 must not overlap c1")
	}
	if c1.NodeCIDR == c2.NodeCIDR || c2.NodeCIDR == c3.NodeCIDR {
		t.Error("node networks must differ")
	}
	for _, c := range top.Clusters {
		if !c.Nodes[0].Gateway() || c.Nodes[1].Gateway() {
			t.Errorf("%s: want exactly the first node as gateway", c.Name)
		}
	}
	if _, err := DefaultTopology(DefaultPrefix, 0); err == nil {
		t.Error("zero nodes accepted")
	}
}

func TestDualStackAddressPlan(t *testing.T) {
	pod6, svc6 := IPv6CIDRs(2)
	if pod6.String() != "fd00:10:244:2::/64" || svc6.String() != "fd00:10:96:2::/112" {
		t.Fatalf("IPv6CIDRs(2) = %s, %s", pod6, svc6)
	}
	c := mustCluster(t, ClusterSpec{Name: "c2", Index: 2, Nodes: 2, PodCIDR6: pod6, ServiceCIDR6: svc6})
	if !c.DualStack() || c.NodeCIDR6.String() != "fd00:172:18:2::/64" {
		t.Fatalf("cluster IPv6 plan: dual %v node %s", c.DualStack(), c.NodeCIDR6)
	}
	n1 := c.Nodes[1]
	if n1.Address6.String() != "fd00:172:18:2::11/64" || n1.PodCIDR6.String() != "fd00:10:244:2::100/120" {
		t.Errorf("node n1 IPv6 %s pod %s", n1.Address6, n1.PodCIDR6)
	}
	for ip, want := range map[string]string{"10.244.1.2": "fd00:10:244:2::102", "10.244.1.254": "fd00:10:244:2::1fe", "10.244.0.2": ""} {
		got := n1.PodIP6(netip.MustParseAddr(ip))
		if (want == "" && got.IsValid()) || (want != "" && got.String() != want) {
			t.Errorf("PodIP6(%s) = %s, want %q", ip, got, want)
		}
	}
	if (Node{PodCIDR: netip.MustParsePrefix("10.244.0.0/24")}).PodIP6(netip.MustParseAddr("10.244.0.2")).IsValid() {
		t.Error("IPv4-only node has a pod IPv6 address")
	}
	got := c.NodeRoutes("n1")
	want := []Route{
		{Dst: netip.MustParsePrefix("10.244.0.0/24"), Via: netip.MustParseAddr("172.18.2.10"), Dev: "eth0"},
		{Dst: netip.MustParsePrefix("10.96.0.0/16"), Dev: "eth0", Src: netip.MustParseAddr("172.18.2.11")},
		{Dst: netip.MustParsePrefix("fd00:10:244:2::/120"), Via: netip.MustParseAddr("fd00:172:18:2::10"), Dev: "eth0"},
		{Dst: svc6, Dev: "eth0", Src: netip.MustParseAddr("fd00:172:18:2::11")},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("routes\n%v\nwant\n%v", got, want)
	}
	if err := (Topology{Prefix: "cwl-", Clusters: []Cluster{c}}).Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(*Cluster){
		"node outside":   func(c *Cluster) { c.Nodes[0].Address6 = netip.MustParsePrefix("fd00:1::10/64") },
		"slice overlaps": func(c *Cluster) { c.Nodes[1].PodCIDR6 = c.Nodes[0].PodCIDR6 },
		"slice size":     func(c *Cluster) { c.Nodes[0].PodCIDR6 = netip.MustParsePrefix("fd00:10:244:2::/112") },
		"v6 in v4-only": func(c *Cluster) {
			c.PodCIDR6, c.NodeCIDR6, c.ServiceCIDR6 = netip.Prefix{}, netip.Prefix{}, netip.Prefix{}
		},
		"service in pod": func(c *Cluster) { c.ServiceCIDR6 = netip.MustParsePrefix("fd00:10:244:2::/112") },
	} {
		bad := c
		bad.Nodes = append([]Node(nil), c.Nodes...)
		mutate(&bad)
		if err := (Topology{Prefix: "cwl-", Clusters: []Cluster{bad}}).Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, bad)
		}
	}
	if _, err := NewCluster(ClusterSpec{Name: "x", Index: 1, Nodes: 1, PodCIDR6: pod6}); err == nil {
		t.Error("NewCluster accepted an IPv6 pod CIDR without a service CIDR")
	}
}
