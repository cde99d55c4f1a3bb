package ipsec

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
)

const testPort = IKEPort

// requireCharon skips when strongSwan's charon or its kernel-libipsec
// plugin is not installed on the machine.
func requireCharon(t testing.TB) {
	t.Helper()
	cabletest.RequireRoot(t)
	if _, err := os.Stat(Charon); err != nil {
		t.Skipf("strongSwan charon missing (%v): install strongswan-charon", err)
	}
	if _, err := os.Stat("/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"); err != nil {
		t.Skipf("kernel-libipsec plugin missing (%v): install libcharon-extra-plugins", err)
	}
}

func newTest(t testing.TB, tp *cabletest.Topo, side, stateDir string) *Driver {
	t.Helper()
	requireCharon(t)
	l := tp.Local(side, testPort, stateDir)
	l.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := newDriver(context.Background(), l)
	if err != nil {
		t.Fatalf("new ipsec %s: %v", side, err)
	}
	t.Cleanup(func() {
		d.Close()
		// Stop a charon the test left running (a failed test).
		if pid := charonPID(d.files); pid != 0 {
			stopCharon(pid)
		}
	})
	return d
}

func xfrm(t testing.TB, ns, what string) string {
	t.Helper()
	return strings.TrimSpace(cabletest.Run(t, "ip", "-n", ns, "xfrm", what))
}

func TestIPsec(t *testing.T) {
	requireCharon(t)
	var pids []int
	var dirs []string
	var tp *cabletest.Topo
	cabletest.RunSuite(t, testPort, func(t testing.TB, topo *cabletest.Topo, side, stateDir string) cable.Driver {
		tp = topo
		d := newTest(t, topo, side, stateDir)
		pids = append(pids, d.Pid())
		dirs = append(dirs, d.files.Dir)
		return d
	})
	if t.Failed() {
		return
	}
	// After the suite's Cleanup: no charon, no state, no xfrm state.
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + itoa(pid)); err == nil {
			if comm, _ := os.ReadFile("/proc/" + itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "charon" {
				t.Errorf("charon %d still running after cleanup", pid)
			}
		}
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("state dir %s left after cleanup", dir)
		}
	}
	for _, ns := range []string{tp.GwA, tp.GwB} {
		for _, what := range []string{"policy", "state"} {
			if out := xfrm(t, ns, what); out != "" {
				t.Errorf("xfrm %s left in %s: %q", what, ns, out)
			}
		}
		if cabletest.LinkExists(ns, TUNName) {
			t.Errorf("tun device %s left in %s", TUNName, ns)
		}
		if out := cabletest.Run(t, "ip", "-n", ns, "rule"); strings.Contains(out, "0xca5e") {
			t.Errorf("charon's rule left in %s: %q", ns, out)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// The ESP data path is userspace: no xfrm state or policy in the kernel,
// kernel-libipsec's own routes sit in CharonTable behind a rule that never
// matches, the driver's proto-157 routes carry the traffic; status has
// handshake time and byte counts; a restarted driver adopts the same
// charon; a third key for the peer keeps the tunnel down; Cleanup removes charon's
// rule and routes.
func TestIPsecDetails(t *testing.T) {
	requireCharon(t)
	tp := cabletest.New(t)
	cabletest.EchoServer(t, tp.PodB, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort))
	cabletest.EchoServer(t, tp.PodA, netip.AddrPortFrom(cabletest.PodA, cabletest.EchoPort))
	ctx := context.Background()
	stateA := t.TempDir()
	a := newTest(t, tp, "a", stateA)
	b := newTest(t, tp, "b", t.TempDir())
	if a.Pid() == b.Pid() {
		t.Fatal("both gateways share one charon")
	}
	cabletest.Connect(t, a, b, testPort)
	cabletest.WaitTraffic(t, tp)

	// Both sides initiate and the duplicate IKE_SA is replaced, so the
	// status may settle a moment after traffic flows; send traffic over
	// whichever SA survives until it is counted.
	err := cabletest.Eventually(20*time.Second, func() error {
		if err := cabletest.DialEcho(tp.PodA, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort), "count me", 2*time.Second); err != nil {
			return err
		}
		st, err := a.Connections(ctx)
		if err != nil {
			return err
		}
		if len(st) != 1 || !st[0].Connected || st[0].LastHandshake.IsZero() || st[0].RxBytes <= 0 || st[0].TxBytes <= 0 ||
			st[0].RxPackets <= 0 || st[0].TxPackets <= 0 {
			return fmt.Errorf("status after traffic: %+v", st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The negotiated ESP algorithm: AES-GCM where the plugins provide it.
	log, err := os.ReadFile(a.files.Log)
	if err != nil {
		t.Fatal(err)
	}
	_, gcm := Plugins(PluginInstalled)
	if want := map[bool]string{true: "ESP:AES_GCM_16_128", false: "ESP:AES_CBC_128/HMAC_SHA2_256_128"}[gcm]; !strings.Contains(string(log), want) {
		t.Errorf("charon log does not show %s selected", want)
	}
	for _, what := range []string{"policy", "state"} {
		if out := xfrm(t, tp.GwA, what); out != "" {
			t.Errorf("kernel xfrm %s with userspace ESP: %q", what, out)
		}
	}
	if r := cabletest.OwnedRoutes(t, tp.GwA); !strings.Contains(r, cabletest.SubnetB.String()+" dev "+TUNName) {
		t.Errorf("driver route: %q", r)
	}
	charonRoutes := cabletest.Run(t, "ip", "-n", tp.GwA, "route", "show", "table", strconv.Itoa(CharonTable))
	if !strings.Contains(charonRoutes, cabletest.SubnetB.String()) {
		t.Errorf("kernel-libipsec routes not in table %d: %q", CharonTable, charonRoutes)
	}
	if rules := cabletest.Run(t, "ip", "-n", tp.GwA, "rule"); !strings.Contains(rules, "fwmark 0xca5e0157 lookup 51806") {
		t.Errorf("charon's rule not restricted to its mark: %q", rules)
	}

	// Restart: the new driver adopts the running charon.
	pid := a.Pid()
	a.Close()
	a = newTest(t, tp, "a", stateA)
	if a.Pid() != pid {
		t.Fatalf("restart started charon %d instead of adopting %d", a.Pid(), pid)
	}

	// Another public key for a on b's side (a third member's): b derives
	// another pre-shared key, the pair is re-keyed and never comes up.
	third, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	bad := cabletest.ConnTo("a", testPort, cable.Key(third.PublicKey().Bytes()))
	if err := b.Set(ctx, []cable.Connection{bad}); err != nil {
		t.Fatal(err)
	}
	if err := cabletest.DialEcho(tp.PodB, netip.AddrPortFrom(cabletest.PodA, cabletest.EchoPort), "x", 3*time.Second); err == nil {
		t.Fatal("traffic passed with mismatched pre-shared keys")
	}
	if st, _ := b.Connections(ctx); len(st) != 1 || st[0].Connected {
		t.Fatalf("status with a wrong key: %+v", st)
	}
	if err := b.Set(ctx, []cable.Connection{cabletest.ConnTo("a", testPort, a.PublicKey())}); err != nil {
		t.Fatal(err)
	}
	cabletest.WaitTraffic(t, tp)

	// A public key of low order (all zeroes) yields no pre-shared key.
	if _, _, errs := a.peers([]cable.Connection{cabletest.ConnTo("b", testPort, cable.Key{})}); len(errs) != 1 {
		t.Fatalf("connection with a low-order key: %v", errs)
	}

	for _, d := range []*Driver{a, b} {
		if err := d.Cleanup(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{tp.GwA, tp.GwB} {
		if out := cabletest.Run(t, "ip", "-n", ns, "rule"); strings.Contains(out, "0xca5e") {
			t.Errorf("charon's rule left in %s: %q", ns, out)
		}
		if out := strings.TrimSpace(cabletest.Run(t, "ip", "-n", ns, "route", "show", "table", "all")); strings.Contains(out, "10.2.0.0/24") && ns == tp.GwA {
			t.Errorf("route to the remote subnet left in %s: %q", ns, out)
		}
	}
	if _, err := os.Stat(filepath.Join(stateA, "ipsec")); err == nil {
		t.Error("state dir left after cleanup")
	}
	if charonPID(a.files) != 0 || unix.Kill(pid, 0) == nil {
		t.Error("charon still running after cleanup")
	}
}

// After charon is killed (its TUN, routes and SAs die with it, its rule
// stays), a new driver starts a fresh charon, Set reloads the connection
// and re-adds the routes, and Cleanup removes the stale rule.
func TestIPsecCharonCrash(t *testing.T) {
	requireCharon(t)
	tp := cabletest.New(t)
	cabletest.EchoServer(t, tp.PodB, netip.AddrPortFrom(cabletest.PodB, cabletest.EchoPort))
	cabletest.EchoServer(t, tp.PodA, netip.AddrPortFrom(cabletest.PodA, cabletest.EchoPort))
	ctx := context.Background()
	stateA := t.TempDir()
	a := newTest(t, tp, "a", stateA)
	b := newTest(t, tp, "b", t.TempDir())
	cabletest.Connect(t, a, b, testPort)
	cabletest.WaitTraffic(t, tp)

	pid := a.Pid()
	a.Close()
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cabletest.Eventually(10*time.Second, func() error {
		if unix.Kill(pid, 0) == nil || cabletest.LinkExists(tp.GwA, TUNName) {
			return fmt.Errorf("charon %d or its tun still there", pid)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a = newTest(t, tp, "a", stateA)
	if a.Pid() == pid {
		t.Fatal("adopted a dead charon")
	}
	if err := a.Set(ctx, []cable.Connection{cabletest.ConnTo("b", testPort, b.PublicKey())}); err != nil {
		t.Fatal(err)
	}
	cabletest.WaitTraffic(t, tp)
	if err := a.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if out := cabletest.Run(t, "ip", "-n", tp.GwA, "rule"); strings.Contains(out, "0xca5e") {
		t.Errorf("stale charon rule left after cleanup: %q", out)
	}
}

// TestIPsecIPv6Subnets: IPv6 subnets cross the IPsec cable over the
// IPv4 IKE_SA (cabletest.RunIPv6Suite): the CHILD_SA's traffic
// selectors mix both families, the driver routes them through charon's
// TUN, kernel-libipsec's own IPv6 routes sit in CharonTable behind the
// IPv6 rule that never matches; after Cleanup no charon and no rule or
// CharonTable route of either family.
func TestIPsecIPv6Subnets(t *testing.T) {
	requireCharon(t)
	var drivers []*Driver
	var tp *cabletest.Topo
	cabletest.RunIPv6Suite(t, testPort, func(t testing.TB, topo *cabletest.Topo, side, stateDir string) cable.Driver {
		tp = topo
		d := newTest(t, topo, side, stateDir)
		drivers = append(drivers, d)
		return d
	}, cabletest.IPv6Checks{
		Up: func(t *testing.T, tp *cabletest.Topo, routes string) {
			for _, p := range []netip.Prefix{cabletest.SubnetB, cabletest.SubnetB6} {
				if !strings.Contains(routes, p.String()+" dev "+TUNName) {
					t.Fatalf("gateway A's routes:\n%s\nwant %s dev %s", routes, p, TUNName)
				}
			}
			if r := cabletest.Run(t, "ip", "-n", tp.GwA, "-6", "route", "show", "table", strconv.Itoa(CharonTable)); !strings.Contains(r, cabletest.SubnetB6.String()) {
				t.Errorf("kernel-libipsec's IPv6 route not in table %d: %q", CharonTable, r)
			}
			if rules := cabletest.Run(t, "ip", "-n", tp.GwA, "-6", "rule"); !strings.Contains(rules, "fwmark 0xca5e0157 lookup 51806") {
				t.Errorf("charon's IPv6 rule not restricted to its mark: %q", rules)
			}
			for _, what := range []string{"policy", "state"} {
				if out := xfrm(t, tp.GwA, what); out != "" {
					t.Errorf("kernel xfrm %s with userspace ESP: %q", what, out)
				}
			}
		},
	})
	if t.Failed() {
		return
	}
	for _, d := range drivers {
		if charonPID(d.files) != 0 || unix.Kill(d.Pid(), 0) == nil {
			t.Errorf("charon %d still running after cleanup", d.Pid())
		}
	}
	for _, ns := range []string{tp.GwA, tp.GwB} {
		for _, fam := range []string{"-4", "-6"} {
			if out := cabletest.Run(t, "ip", "-n", ns, fam, "rule"); strings.Contains(out, "0xca5e") {
				t.Errorf("charon's rule left in %s: %q", ns, out)
			}
			if out := strings.TrimSpace(cabletest.Run(t, "ip", "-n", ns, fam, "route", "show", "table", strconv.Itoa(CharonTable))); out != "" {
				t.Errorf("routes of table %d left in %s: %q", CharonTable, ns, out)
			}
		}
	}
}

// Local traffic selectors no address of the namespace lies in (service
// CIDRs), of either family, get SourceAddr on charon's TUN — without it
// kernel-libipsec fails the CHILD_SA ("error installing route with
// policy", seen for IPv6 as for IPv4) — and the CHILD_SA with them
// installs: pods cross over both families. A selector the namespace
// already holds an address of (the pod subnets) gets none.
func TestIPsecSourceAddrs(t *testing.T) {
	requireCharon(t)
	tp := cabletest.New(t)
	tp.AddIPv6(t)
	svc := map[string][]netip.Prefix{
		"a": {netip.MustParsePrefix("10.96.1.0/24"), netip.MustParsePrefix("fd00:96:1::/112")},
		"b": {netip.MustParsePrefix("10.96.2.0/24"), netip.MustParsePrefix("fd00:96:2::/112")},
	}
	pod6 := map[string]netip.Prefix{"a": cabletest.SubnetA6, "b": cabletest.SubnetB6}
	ds := map[string]*Driver{}
	for _, side := range []string{"a", "b"} {
		l := tp.Local(side, testPort, t.TempDir())
		l.Subnets = append(l.Subnets, svc[side]...)
		d, err := newDriver(context.Background(), l)
		if err != nil {
			t.Fatalf("new ipsec %s: %v", side, err)
		}
		t.Cleanup(func() { d.Cleanup(context.Background()) })
		ds[side] = d
	}
	for side, peer := range map[string]string{"a": "b", "b": "a"} {
		c := cabletest.ConnTo(peer, testPort, ds[peer].PublicKey())
		c.Subnets = slices.Concat(c.Subnets, []netip.Prefix{pod6[peer]}, svc[peer])
		if err := ds[side].Set(context.Background(), []cable.Connection{c}); err != nil {
			t.Fatalf("set %s: %v", side, err)
		}
	}
	for _, s := range []struct {
		ns   string
		addr netip.Addr
	}{{tp.PodA, cabletest.PodA}, {tp.PodB, cabletest.PodB}, {tp.PodB, cabletest.PodB6}} {
		cabletest.EchoServer(t, s.ns, netip.AddrPortFrom(s.addr, cabletest.EchoPort))
	}
	to := netip.AddrPortFrom(cabletest.PodB6, cabletest.EchoPort)
	if err := cabletest.Eventually(20*time.Second, func() error { return cabletest.DialEcho(tp.PodA, to, "over ipv6", 2*time.Second) }); err != nil {
		t.Fatalf("pod a -> %s: %v", to, err)
	}
	cabletest.WaitTraffic(t, tp)
	cabletest.WaitConnected(t, ds["a"], ds["b"])
	addrs := cabletest.Run(t, "ip", "-n", tp.GwA, "addr", "show", "dev", TUNName)
	for _, want := range []string{"inet 10.96.1.255/32 ", "inet6 fd00:96:1::/128 "} {
		if !strings.Contains(addrs, want) {
			t.Errorf("%s of gateway a has no source address %s:\n%s", TUNName, want, addrs)
		}
	}
	if strings.Contains(addrs, cabletest.SubnetA6.Addr().String()+"/128") || strings.Contains(addrs, "10.1.0.255") {
		t.Errorf("%s of gateway a got a source address for a pod subnet pod0 holds an address of:\n%s", TUNName, addrs)
	}
}
