package netlab

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestApplyRepairs damages a lab from outside and checks that Apply puts
// back exactly the described state, leaving foreign routes alone.
func TestApplyRepairs(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	names := h.Names()
	c, err := NewCluster(ClusterSpec{Name: "c1", Index: 1, Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	top := Topology{Prefix: h.prefix, Clusters: []Cluster{c}}
	mustApply(t, h, top)
	n1 := names.Node("c1", "n1")

	foreign := &netlink.Route{Dst: ipNet(netip.MustParsePrefix("10.50.0.0/16")), Scope: netlink.SCOPE_LINK, Protocol: 99}
	err = h.withHandle(n1, func(nh *netlink.Handle, _ netns.NsHandle) error {
		eth0, err := nh.LinkByName(NodeLink)
		if err != nil {
			return err
		}
		foreign.LinkIndex = eth0.Attrs().Index
		if err := nh.RouteAdd(foreign); err != nil {
			return err
		}
		// A stray address, a lab route removed, another one added.
		if err := nh.AddrAdd(eth0, &netlink.Addr{IPNet: ipNet(netip.MustParsePrefix("172.18.1.99/24"))}); err != nil {
			return err
		}
		if err := nh.RouteDel(&netlink.Route{Dst: ipNet(netip.MustParsePrefix("10.244.0.0/24")), LinkIndex: eth0.Attrs().Index, Protocol: RouteProtoLab}); err != nil {
			return err
		}
		return nh.RouteAdd(&netlink.Route{Dst: ipNet(netip.MustParsePrefix("10.99.0.0/16")), LinkIndex: eth0.Attrs().Index, Scope: netlink.SCOPE_LINK, Protocol: RouteProtoLab})
	})
	if err != nil {
		t.Fatal(err)
	}
	// Cut n2 off its switch.
	err = h.withHandle(names.Switch("c1"), func(nh *netlink.Handle, _ netns.NsHandle) error {
		l, err := nh.LinkByName(SwitchPort("n2"))
		if err != nil {
			return err
		}
		return nh.LinkDel(l)
	})
	if err != nil {
		t.Fatal(err)
	}

	mustApply(t, h, top)

	err = h.withHandle(n1, func(nh *netlink.Handle, _ netns.NsHandle) error {
		eth0, err := nh.LinkByName(NodeLink)
		if err != nil {
			return err
		}
		addrs, err := nh.AddrList(eth0, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].IPNet.String() != "172.18.1.11/24" {
			t.Errorf("n1 eth0 addresses %v, want only 172.18.1.11/24", addrs)
		}
		routes, err := nh.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		var got []string
		for _, r := range routes {
			got = append(got, r.Dst.String()+"/"+r.Protocol.String())
		}
		slices.Sort(got)
		want := []string{"10.244.0.0/24/76", "10.244.2.0/24/76", "10.50.0.0/16/99", "10.96.0.0/16/76", "172.18.1.0/24/kernel"}
		if !slices.Equal(got, want) {
			t.Errorf("n1 routes %v, want %v", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// n2 is reachable again from n1.
	l, err := h.Listen(names.Node("c1", "n2"), "tcp", "172.18.1.12:7000")
	if err != nil {
		t.Fatal(err)
	}
	serveIdentity(t, l, "n2")
	if got, err := ask(h, n1, "172.18.1.12:7000"); err != nil || !strings.HasPrefix(got, "n2 172.18.1.11:") {
		t.Errorf("n1 to n2 after repair: %q %v", got, err)
	}
}

// TestEnsurePodReaddress moves a pod to a new address.
func TestEnsurePodReaddress(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	c, err := NewCluster(ClusterSpec{Name: "c1", Index: 1, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, h, Topology{Prefix: h.prefix, Clusters: []Cluster{c}})
	p := Pod{Cluster: "c1", Node: "n0", Namespace: "default", Name: "p", IP: netip.MustParseAddr("10.244.0.2")}
	if err := h.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	p.IP = netip.MustParseAddr("10.244.0.7")
	if err := h.EnsurePod(p); err != nil {
		t.Fatal(err)
	}
	err = h.withHandle(h.Names().Node("c1", "n0"), func(nh *netlink.Handle, _ netns.NsHandle) error {
		rs, err := nh.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: RouteProtoPod}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return err
		}
		if len(rs) != 1 || rs[0].Dst.String() != "10.244.0.7/32" {
			t.Errorf("node pod routes %v, want only 10.244.0.7/32", rs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The node reaches the pod at its new address.
	l, err := h.Listen(h.Names().PodOf(p), "tcp", "10.244.0.7:80")
	if err != nil {
		t.Fatal(err)
	}
	serveIdentity(t, l, "p")
	if got, err := ask(h, h.Names().Node("c1", "n0"), "10.244.0.7:80"); err != nil || !strings.HasPrefix(got, "p 172.18.1.10:") {
		t.Errorf("node to pod: %q %v", got, err)
	}
}

// TestTeardownFindsStrays checks Leftovers and Teardown against objects
// not made by Apply: a process started with `ip netns exec` (outside the
// lab cgroups), a daemon in a node's system cgroup, a UAPI socket and a
// bpffs pin directory.
func TestTeardownFindsStrays(t *testing.T) {
	t.Parallel()
	wgDir := t.TempDir()
	bpfDir := t.TempDir()
	if err := unix.Mount("bpf", bpfDir, "bpf", 0, ""); err != nil {
		t.Fatalf("mount bpffs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(bpfDir, unix.MNT_DETACH) })
	h := newTestHost(t, func(c *Config) { c.WireGuardDir = wgDir; c.BPFFSDir = bpfDir })
	names := h.Names()
	c, err := NewCluster(ClusterSpec{Name: "c1", Index: 1, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, h, Topology{Prefix: h.prefix, Clusters: []Cluster{c}})

	stray := exec.Command("ip", "netns", "exec", names.Node("c1", "n0"), "sleep", "1000")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	strayDone := make(chan error, 1)
	go func() { strayDone <- stray.Wait() }()
	daemon, err := h.Start(Process{Netns: names.Node("c1", "n0"), Cgroup: h.Cgroups().NodeSystem("c1", "n0"), Path: "sleep", Args: []string{"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	daemonDone := make(chan error, 1)
	go func() { daemonDone <- daemon.Wait() }()

	sock := filepath.Join(wgDir, h.prefix+"c1n0.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ul.(*net.UnixListener).SetUnlinkOnClose(false)
	defer ul.Close()
	pin := filepath.Join(bpfDir, h.prefix+"route-agent")
	if err := os.Mkdir(pin, 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(bpfDir, "someone-else")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}

	// `ip netns exec` forks before sleep runs in the namespace: wait for it.
	var left Report
	for i := 0; i < 1000; i++ {
		left, err = h.Leftovers()
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(left.Processes, daemon.Process.Pid) && len(left.Processes) >= 2 {
			break
		}
		unix.Nanosleep(&unix.Timespec{Nsec: 10e6}, nil)
	}
	if len(left.Processes) < 2 || !slices.Contains(left.Processes, daemon.Process.Pid) ||
		!slices.Equal(left.Sockets, []string{sock}) || !slices.Equal(left.Pins, []string{pin}) || len(left.Namespaces) != 2 {
		t.Fatalf("leftovers before teardown: %s", left)
	}

	rep, err := h.Teardown()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Processes) < 2 || !slices.Equal(rep.Sockets, []string{sock}) || !slices.Equal(rep.Pins, []string{pin}) {
		t.Errorf("teardown report: %s", rep)
	}
	if err := <-daemonDone; err == nil {
		t.Error("daemon survived teardown")
	}
	if err := <-strayDone; err == nil {
		t.Error("ip netns exec process survived teardown")
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("teardown touched a foreign pin: %v", err)
	}
	if left, err := h.Leftovers(); err != nil || !left.Empty() {
		t.Errorf("after teardown: %s %v", left, err)
	}
}

// TestSyncPods replaces a node's pod set, including an orphan cgroup and
// a pod with a name too long to map back.
func TestSyncPods(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	names, cg := h.Names(), h.Cgroups()
	c, err := NewCluster(ClusterSpec{Name: "c1", Index: 1, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, h, Topology{Prefix: h.prefix, Clusters: []Cluster{c}})
	pod := func(name string, last byte) Pod {
		return Pod{Cluster: "c1", Node: "n0", Namespace: "default", Name: name, IP: netip.AddrFrom4([4]byte{10, 244, 0, last})}
	}
	long := pod(strings.Repeat("x", 240), 5)
	a, b, d := pod("a", 2), pod("b", 3), pod("d", 4)
	if err := h.SyncPods("c1", "n0", []Pod{a, b, long}); err != nil {
		t.Fatal(err)
	}
	sleeper, err := h.Start(Process{Netns: names.PodOf(b), Cgroup: cg.PodOf(b), Path: "sleep", Args: []string{"1000"}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	orphan := filepath.Join(cg.Node("c1", "n0"), "pod-gone.away")
	if err := os.Mkdir(orphan, 0o755); err != nil {
		t.Fatal(err)
	}

	if err := h.SyncPods("c1", "n0", []Pod{a, d}); err != nil {
		t.Fatal(err)
	}
	got, err := h.PodNetns("c1", "n0")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{names.PodOf(a), names.PodOf(d)}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("pod namespaces %v, want %v", got, want)
	}
	dirs, _ := readDirNames(cg.Node("c1", "n0"), "")
	if !slices.Equal(dirs, []string{"pod-default.a", "pod-default.d", "system"}) {
		t.Errorf("node cgroup children %v", dirs)
	}
	if err := <-done; err == nil {
		t.Error("process of removed pod b still ran to completion")
	}
	err = h.withHandle(names.Node("c1", "n0"), func(nh *netlink.Handle, _ netns.NsHandle) error {
		if _, err := nh.LinkByName(HostVeth("default", "b")); err == nil {
			t.Error("veth of removed pod b still there")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// d is reachable from a.
	l, err := h.Listen(names.PodOf(d), "tcp", "10.244.0.4:80")
	if err != nil {
		t.Fatal(err)
	}
	serveIdentity(t, l, "d")
	if got, err := ask(h, names.PodOf(a), "10.244.0.4:80"); err != nil || !strings.HasPrefix(got, "d 10.244.0.2:") {
		t.Errorf("a to d: %q %v", got, err)
	}
	// A pod of another node is refused.
	if err := h.SyncPods("c1", "n0", []Pod{{Cluster: "c1", Node: "n9", Namespace: "x", Name: "y", IP: netip.MustParseAddr("10.244.9.2")}}); err == nil {
		t.Error("SyncPods accepted a pod of another node")
	}
}

// TestForwardFromNode lets a node namespace reach a server listening on
// the root namespace's loopback (where the lab's control planes run).
func TestForwardFromNode(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	c, err := NewCluster(ClusterSpec{Name: "c1", Index: 1, Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, h, Topology{Prefix: h.prefix, Clusters: []Cluster{c}})
	node := h.Names().Node("c1", "n0")
	srv := echoUpper(t)
	ln, err := h.Listen(node, "tcp", "127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	runForward(t, ln, srv.Addr().String())
	// The server's own address is not reachable from the node directly...
	if c, err := h.Dial(node, "tcp", srv.Addr().String()); err == nil {
		c.Close()
		t.Fatalf("node reached root loopback %s without the forwarder", srv.Addr())
	}
	// ...but through the forwarder on the node's loopback.
	conn, err := h.Dial(node, "tcp", "127.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := roundTrip(t, conn, "from node"); got != "FROM NODE" {
		t.Errorf("got %q", got)
	}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
