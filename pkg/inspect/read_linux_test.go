package inspect

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/wireguard"
	"github.com/causeway-net/causeway/pkg/nodeview"
	"github.com/causeway-net/causeway/pkg/vip"
)

// deadSocket leaves a unix socket file at path that nothing listens on.
func deadSocket(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	t.Cleanup(func() { _ = os.Remove(path) })
}

// TestRead builds in a fresh network namespace one of everything a node
// view reports — a veth with an address, a VXLAN device with an FDB
// entry, a neighbour, a route in table 100 and an unreachable fallback,
// a fwmark rule, a WireGuard device with a peer (beside a dead UAPI
// socket of another process), a CAUSEWAY- iptables
// chain jumped to from FORWARD, a causeway nftables table, and a VIP
// datapath with one service pinned on a private bpffs — and checks Read
// returns each of them, from inside the namespace, and nothing of the
// host's.
func TestRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating network namespaces and loading BPF programs needs root; make test runs as root")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("cwinsp%d", os.Getpid()%100000)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	in := func(args ...string) { t.Helper(); run(t, append([]string{"ip", "netns", "exec", ns}, args...)...) }
	in("sysctl", "-qw", "net.ipv4.ip_forward=1")
	in("ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1")
	in("ip", "addr", "add", "10.1.0.1/24", "dev", "v0")
	in("ip", "link", "set", "v0", "up")
	in("ip", "link", "set", "v1", "up")
	in("ip", "link", "add", "vx-test", "type", "vxlan", "id", "42", "dstport", "4799", "dev", "v0", "local", "10.1.0.1")
	in("bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vx-test", "dst", "10.1.0.2")
	in("ip", "neigh", "add", "10.1.0.9", "lladdr", "02:00:00:00:00:09", "dev", "v0")
	in("ip", "route", "add", "10.99.0.0/16", "via", "10.1.0.2", "table", "100", "proto", "148")
	in("ip", "route", "add", "unreachable", "10.98.0.0/16", "metric", "4096", "proto", "148")
	in("ip", "rule", "add", "fwmark", "0x10/0xff", "table", "100", "pref", "100")
	// The WireGuard cable driver: a kernel device where the kernel has
	// WireGuard, the embedded wireguard-go otherwise.
	wg, err := wireguard.New(context.Background(), cable.LocalEndpoint{Interface: "wg-test", Netns: "/run/netns/" + ns, StateDir: t.TempDir(), Port: 51821})
	if err != nil {
		t.Fatalf("wireguard device: %v", err)
	}
	t.Cleanup(func() { _ = wg.Close() })
	peer, err := cable.ParseKey("xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=")
	if err != nil {
		t.Fatal(err)
	}
	if err := wg.Set(context.Background(), []cable.Connection{{ClusterID: "c2", Endpoint: netip.MustParseAddrPort("10.1.0.2:51820"),
		PublicKey: peer, Subnets: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")}}}); err != nil {
		t.Fatalf("wireguard peer: %v", err)
	}
	// A dead UAPI socket of some other process (a wireguard-go killed
	// with SIGKILL leaves its socket behind) must not hide this
	// namespace's devices.
	deadSocket(t, fmt.Sprintf("/var/run/wireguard/cwinsp-dead%d.sock", os.Getpid()%100000))
	in("iptables", "-N", "CAUSEWAY-TEST")
	in("iptables", "-A", "CAUSEWAY-TEST", "-j", "ACCEPT")
	in("iptables", "-A", "FORWARD", "-j", "CAUSEWAY-TEST")
	in("iptables", "-A", "FORWARD", "-j", "ACCEPT") // not Causeway's
	in("nft", "add table ip causeway-test; add chain ip causeway-test c; add rule ip causeway-test c counter")

	pinDir := newBPFFS(t)
	k, err := vip.Open(vip.Config{PinDir: pinDir, CgroupPath: newCgroup(t), MaxServices: 16, MaxBackends: 64, MaxReverseNAT: 16})
	if err != nil {
		t.Fatalf("open the VIP datapath: %v", err)
	}
	t.Cleanup(func() { _ = k.Cleanup() })
	key80 := vip.ServiceKey{VIP: netip.MustParseAddr("243.0.0.1"), Port: 80, Proto: vip.TCP}
	want := map[vip.ServiceKey]vip.Service{key80: {AffinitySeconds: 30, Backends: []vip.Backend{
		{Addr: netip.MustParseAddr("10.244.1.5"), Port: 8080, Weight: 2}, {Addr: netip.MustParseAddr("10.244.2.7"), Port: 8080, Weight: 1}}}}
	if err := k.Set(context.Background(), want); err != nil {
		t.Fatalf("set the VIP table: %v", err)
	}

	var n *nodeview.Node
	if err := netnsx.Do("/run/netns/"+ns, func() error { n = Read(pinDir); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(n.Errors) > 0 {
		t.Errorf("errors: %q", n.Errors)
	}
	if n.Sysctls["net.ipv4.ip_forward"] != "1" {
		t.Errorf("sysctls %v, want ip_forward 1", n.Sysctls)
	}
	if l, ok := n.Link("v0"); !ok || l.Kind != "veth" || !l.Up || !slices.Contains(l.Addrs, "10.1.0.1/24") {
		t.Errorf("link v0: %+v %v", l, ok)
	}
	if l, ok := n.Link("vx-test"); !ok || l.Kind != "vxlan" || l.VNI != 42 || l.Port != 4799 {
		t.Errorf("link vx-test: %+v %v", l, ok)
	}
	if len(n.Links) != 5 { // lo, v0, v1, vx-test, wg-test: none of the host's
		t.Errorf("%d links, want 5: %+v", len(n.Links), n.Links)
	}
	has(t, "route", n.Routes, func(r nodeview.Route) bool {
		return r.Table == 100 && r.Dst == "10.99.0.0/16" && r.Gw == "10.1.0.2" && r.Dev == "v0" && r.Proto == 148
	})
	has(t, "unreachable route", n.Routes, func(r nodeview.Route) bool {
		return r.Type == "unreachable" && r.Dst == "10.98.0.0/16" && r.Metric == 4096
	})
	has(t, "rule", n.Rules, func(r nodeview.Rule) bool { return r.Priority == 100 && r.Table == 100 && r.Mark == "0x10/0xff" })
	has(t, "neighbour", n.Neighbours, func(e nodeview.Neighbour) bool {
		return e.Dev == "v0" && e.IP == "10.1.0.9" && e.MAC == "02:00:00:00:00:09" && e.State == "permanent"
	})
	has(t, "fdb entry", n.FDB, func(e nodeview.FDBEntry) bool { return e.Dev == "vx-test" && e.Dst == "10.1.0.2" })
	has(t, "wireguard device", n.WireGuard, func(d nodeview.WireGuardDevice) bool {
		return d.Name == "wg-test" && d.ListenPort == 51821 && len(d.Peers) == 1 && d.Peers[0].PublicKey == peer.String() &&
			d.Peers[0].Endpoint == "10.1.0.2:51820" && slices.Equal(d.Peers[0].AllowedIPs, []string{"10.99.0.0/16"}) && d.Peers[0].HandshakeAgeSeconds == -1
	})
	if !n.JumpsTo("CAUSEWAY-TEST") {
		t.Errorf("no jump to CAUSEWAY-TEST in %+v", n.Iptables)
	}
	has(t, "iptables chain", n.Iptables, func(c nodeview.IptablesChain) bool {
		return c.Family == "ipv4" && c.Table == "filter" && c.Chain == "CAUSEWAY-TEST" && len(c.Rules) == 1 && strings.HasSuffix(c.Rules[0], "-A CAUSEWAY-TEST -j ACCEPT")
	})
	for _, c := range n.Iptables {
		for _, r := range c.Rules {
			if !strings.Contains(r, "CAUSEWAY-") {
				t.Errorf("rule not Causeway's in the view: %s", r)
			}
		}
	}
	if tb, ok := n.Nft("ip", "causeway-test"); !ok || !strings.Contains(tb.Text, "counter packets 0 bytes 0") {
		t.Errorf("nft table causeway-test: %+v %v", tb, ok)
	}
	got, err := n.Services()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[key80].AffinitySeconds != 30 || !slices.Equal(vip.Canonical(got[key80].Backends), vip.Canonical(want[key80].Backends)) {
		t.Errorf("VIP table %+v, want %+v", got, want)
	}
}

func has[T any](t *testing.T, what string, items []T, match func(T) bool) {
	t.Helper()
	if !slices.ContainsFunc(items, match) {
		t.Errorf("no such %s in %+v", what, items)
	}
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newBPFFS mounts a private bpffs on a temporary directory (unmounted at
// cleanup) and returns the VIP pin directory in it.
func newBPFFS(t *testing.T) string {
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, ""); err != nil {
		t.Fatalf("mount bpffs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return vip.PinDir(dir)
}

// newCgroup is a fresh cgroup v2 directory to attach the VIP programs
// to, in a cgroup2 mount of the test's own (the host may mount cgroup v2
// anywhere, or v1 at /sys/fs/cgroup).
func newCgroup(t *testing.T) string {
	mnt := t.TempDir()
	if err := unix.Mount("cgroup2", mnt, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mount cgroup2 on %s: %v", mnt, err)
	}
	dir, err := os.MkdirTemp(mnt, "causeway-inspect-test-")
	if err != nil {
		t.Fatalf("create a cgroup: %v", err)
	}
	t.Cleanup(func() {
		_ = os.Remove(dir)
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	})
	return dir
}
