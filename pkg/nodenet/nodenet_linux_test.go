package nodenet

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// testNS is a fresh network namespace with a veth pair veth-a/veth-b (veth-a is
// 10.0.0.1/24 and fd00::1/64, both up) and a netlink handle in it.
type testNS struct {
	name, path string
	h          *netlink.Handle
	a, b       netlink.Link
}

// newNS creates the namespace; cleanup removes it. Without root the test
// is skipped; as root every failure fails.
func newNS(t *testing.T) *testNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "nodenet-" + hex.EncodeToString(b[:])
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("delete netns %s: %v: %s", name, err, out)
		}
	})
	ns := &testNS{name: name, path: "/run/netns/" + name}
	run(t, "ip", "-n", name, "link", "add", "veth-a", "type", "veth", "peer", "name", "veth-b")
	run(t, "ip", "-n", name, "addr", "add", "10.0.0.1/24", "dev", "veth-a")
	run(t, "ip", "-n", name, "addr", "add", "fd00::1/64", "dev", "veth-a", "nodad")
	for _, l := range []string{"lo", "veth-a", "veth-b"} {
		run(t, "ip", "-n", name, "link", "set", l, "up")
	}
	h, err := netnsx.Handle(ns.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	ns.h = h
	if ns.a, err = h.LinkByName("veth-a"); err != nil {
		t.Fatal(err)
	}
	if ns.b, err = h.LinkByName("veth-b"); err != nil {
		t.Fatal(err)
	}
	return ns
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ip runs `ip` in the namespace.
func (ns *testNS) ip(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"-n", ns.name}, args...)...)
}

// replay applies states in several random orders (seeded; the seed is
// logged), each followed by check. Every sync must converge, whatever
// state (or damage done by check) came before.
func replay[S any](t *testing.T, states []S, apply func(t *testing.T, s S), check func(t *testing.T, s S)) {
	t.Helper()
	seed := mrand.Uint64()
	t.Logf("seed %d", seed)
	r := mrand.New(mrand.NewPCG(seed, 0))
	for round := range 4 {
		order := r.Perm(len(states))
		for _, i := range order {
			t.Run(fmt.Sprintf("round%d/state%d", round, i), func(t *testing.T) {
				apply(t, states[i])
				check(t, states[i])
			})
			if t.Failed() {
				t.FailNow()
			}
		}
	}
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func sortRoutes(rs []Route) []Route {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b Route) int { return strings.Compare(a.String(), b.String()) })
	return rs
}

// routeStates are desired route sets on links a and b: device routes,
// on-link next hops, a preferred source, unreachable routes, IPv6, a
// default route, re-pointed and retyped destinations, one destination
// with two metrics (a route over an unreachable fallback, as the route
// agent holds them) and a changed metric.
func routeStates(a, b int) [][]Route {
	return [][]Route{
		nil,
		{{Dst: pfx("10.1.0.0/16"), Via: addr("10.0.0.2"), Link: a}},
		{{Dst: pfx("10.1.0.0/16"), Via: addr("10.0.0.3"), Link: a}, {Dst: pfx("10.2.0.0/16"), Link: a}},
		{{Dst: pfx("10.1.0.0/16"), Link: b}, {Dst: pfx("10.2.0.0/16"), Link: a, Src: addr("10.0.0.1")}},
		{{Dst: pfx("10.1.0.0/16")}, {Dst: pfx("10.3.0.0/16")}},
		{{Dst: pfx("0.0.0.0/0"), Via: addr("10.0.0.254"), Link: a}, {Dst: pfx("10.3.0.0/16"), Via: addr("241.0.0.1"), Link: b}},
		{{Dst: pfx("fd01::/64"), Link: a}, {Dst: pfx("fd02::/64"), Via: addr("fd00::2"), Link: a}, {Dst: pfx("10.2.0.0/16"), Link: a}},
		{{Dst: pfx("10.1.0.0/16"), Via: addr("10.0.0.2"), Link: a}, {Dst: pfx("10.1.0.0/16"), Metric: 4096},
			{Dst: pfx("fd01::/64"), Link: a}, {Dst: pfx("fd01::/64"), Metric: 4096}},
		{{Dst: pfx("10.1.0.0/16"), Metric: 4096}, {Dst: pfx("fd01::/64"), Metric: 4096}},
		{{Dst: pfx("10.1.0.0/16"), Via: addr("10.0.0.2"), Link: a, Metric: 50}, {Dst: pfx("fd01::/64"), Link: a, Metric: 50}},
	}
}

// withMetric gives the routes of rs without a metric of their own metric m
// (the route agent's 100).
func withMetric(rs []Route, m int) []Route {
	out := slices.Clone(rs)
	for i := range out {
		if out[i].Metric == 0 {
			out[i].Metric = m
		}
	}
	return out
}

// onLink keeps the routes out of link (an owner with a Link has no
// unreachable routes).
func onLink(rs []Route, link int) []Route {
	return slices.DeleteFunc(slices.Clone(rs), func(r Route) bool { return r.Link != link })
}

// foreign installs routes that are not o's: another protocol with the
// same destinations, o's protocol in another table, and o's protocol on
// the other link. It returns what `ip route show table all` lists for
// them, which every sync must leave as is.
func (ns *testNS) foreign(t *testing.T) string {
	t.Helper()
	ns.ip(t, "route", "add", "10.1.0.0/16", "dev", "veth-a", "proto", "99", "metric", "7")
	ns.ip(t, "route", "add", "10.9.0.0/16", "via", "10.0.0.9", "dev", "veth-a", "proto", "99")
	ns.ip(t, "route", "add", "10.1.0.0/16", "dev", "veth-a", "proto", "148", "table", "200")
	ns.ip(t, "route", "add", "10.8.0.0/16", "dev", "veth-b", "proto", "157", "table", "100")
	return ns.foreignNow(t)
}

func (ns *testNS) foreignNow(t *testing.T) string {
	t.Helper()
	return ns.ip(t, "route", "show", "table", "all", "proto", "99") + ns.ip(t, "route", "show", "table", "200") +
		ns.ip(t, "route", "show", "table", "100", "dev", "veth-b")
}

// The owners of the callers: the route agent's (every link, metric 100
// unless a route says otherwise) and a cable driver's (its device, table
// 100, metric 0).
func TestSyncRoutesConvergesFromAnyState(t *testing.T) {
	ns := newNS(t)
	foreign := ns.foreign(t)
	a, b := ns.a.Attrs().Index, ns.b.Attrs().Index
	agent := Owner{Protocol: 148}
	cable := Owner{Protocol: 157, Table: 100, Link: a}
	type state struct{ agent, cable []Route }
	var states []state
	for i, rs := range routeStates(a, b) {
		// The cable owner holds some of the same destinations in its
		// own table, as on a gateway node.
		other := onLink(routeStates(a, b)[(i+2)%len(routeStates(a, b))], a)
		states = append(states, state{agent: withMetric(rs, 100), cable: other})
	}
	sync := func(t *testing.T, o Owner, want []Route) []string {
		t.Helper()
		changes, err := SyncRoutes(ns.h, o, want)
		if err != nil {
			t.Fatalf("sync %+v: %v", o, err)
		}
		return changes
	}
	expect := func(t *testing.T, o Owner, want []Route) {
		t.Helper()
		have, err := ListRoutes(ns.h, o)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := sortRoutes(have), sortRoutes(want); !slices.Equal(got, want) {
			t.Fatalf("owner %+v: routes\n%v\nwant\n%v", o, got, want)
		}
		if changes := sync(t, o, want); len(changes) != 0 {
			t.Fatalf("owner %+v: equal sync changed %v", o, changes)
		}
	}
	replay(t, states, func(t *testing.T, s state) {
		sync(t, agent, s.agent)
		sync(t, cable, s.cable)
	}, func(t *testing.T, s state) {
		expect(t, agent, s.agent)
		expect(t, cable, s.cable)
		if now := ns.foreignNow(t); now != foreign {
			t.Fatalf("foreign routes changed:\n%s\nwere\n%s", now, foreign)
		}
	})
}

func TestSyncRoutesRepairsDrift(t *testing.T) {
	ns := newNS(t)
	foreign := ns.foreign(t)
	a := ns.a.Attrs().Index
	o := Owner{Protocol: 148}
	want := []Route{
		{Dst: pfx("10.1.0.0/16"), Via: addr("10.0.0.2"), Link: a, Metric: 100},
		{Dst: pfx("10.2.0.0/16"), Link: a, Metric: 100},
		{Dst: pfx("10.3.0.0/16"), Metric: 100},
		{Dst: pfx("10.3.0.0/16"), Metric: 4096},
	}
	if _, err := SyncRoutes(ns.h, o, want); err != nil {
		t.Fatal(err)
	}
	for _, damage := range [][]string{
		{"route", "del", "10.1.0.0/16", "proto", "148", "metric", "100"},
		{"route", "replace", "10.1.0.0/16", "via", "10.0.0.7", "dev", "veth-a", "proto", "148", "metric", "100"},
		{"route", "replace", "10.2.0.0/16", "dev", "veth-b", "proto", "148", "metric", "100"},
		{"route", "add", "10.2.0.0/16", "dev", "veth-a", "proto", "148", "metric", "5"},
		{"route", "replace", "10.3.0.0/16", "dev", "veth-a", "proto", "148", "metric", "100"},
		{"route", "add", "10.77.0.0/16", "dev", "veth-a", "proto", "148"},
		{"route", "add", "fd77::/64", "dev", "veth-a", "proto", "148"},
		{"route", "del", "unreachable", "10.3.0.0/16", "proto", "148", "metric", "4096"},
		{"route", "replace", "10.3.0.0/16", "dev", "veth-a", "proto", "148", "metric", "4096"},
	} {
		ns.ip(t, damage...)
		changes, err := SyncRoutes(ns.h, o, want)
		if err != nil {
			t.Fatalf("after %v: %v", damage, err)
		}
		if len(changes) == 0 {
			t.Fatalf("after %v: sync changed nothing", damage)
		}
		have, err := ListRoutes(ns.h, o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(sortRoutes(have), sortRoutes(want)) {
			t.Fatalf("after %v: routes %v, want %v", damage, have, want)
		}
		if again, _ := SyncRoutes(ns.h, o, want); len(again) != 0 {
			t.Fatalf("after %v: second sync changed %v", damage, again)
		}
		if now := ns.foreignNow(t); now != foreign {
			t.Fatalf("after %v: foreign routes changed:\n%s\nwere\n%s", damage, now, foreign)
		}
	}
	// The kernel holds what `ip route` users see as the contract.
	if got := ns.ip(t, "route", "show", "proto", "148"); !strings.Contains(got, "10.1.0.0/16 via 10.0.0.2 dev veth-a metric 100 onlink") ||
		!strings.Contains(got, "unreachable 10.3.0.0/16 metric 100") || !strings.Contains(got, "unreachable 10.3.0.0/16 metric 4096") ||
		!strings.Contains(got, "10.2.0.0/16 dev veth-a scope link metric 100") {
		t.Fatalf("ip route:\n%s", got)
	}
	if _, err := SyncRoutes(ns.h, Owner{Protocol: 148, Table: 0}, []Route{{Dst: pfx("10.5.0.0/16"), Via: addr("10.0.0.2"), Metric: 100}}); err == nil {
		t.Fatal("a next hop without a device was accepted")
	}
}

func TestVXLANDevice(t *testing.T) {
	ns := newNS(t)
	mac := net.HardwareAddr{0x02, 0xcb, 10, 0, 0, 1}
	base := VXLAN{Name: "vx0", VNI: 4343, Port: 4799, Local: addr("10.0.0.1"), MTU: 1450, MAC: mac}
	ensure := func(t *testing.T, v VXLAN) (netlink.Link, []string) {
		t.Helper()
		l, changes, err := EnsureVXLAN(ns.h, v)
		if err != nil {
			t.Fatalf("ensure %+v: %v", v, err)
		}
		got, err := ns.h.LinkByName(v.Name)
		if err != nil {
			t.Fatal(err)
		}
		vx, ok := got.(*netlink.Vxlan)
		if !ok || vx.VxlanId != v.VNI || vx.Port != v.Port || vx.Learning || !vx.SrcAddr.Equal(v.Local.AsSlice()) ||
			vx.MTU != v.MTU || vx.HardwareAddr.String() != v.MAC.String() || vx.Flags&net.FlagUp == 0 || vx.Index != l.Attrs().Index {
			t.Fatalf("device %+v, want %+v up", got, v)
		}
		if _, again, err := EnsureVXLAN(ns.h, v); err != nil || len(again) != 0 {
			t.Fatalf("equal ensure changed %v (%v)", again, err)
		}
		return l, changes
	}
	// Another kind of link under the name is replaced.
	ns.ip(t, "link", "add", "vx0", "type", "veth", "peer", "name", "vx0p")
	l, _ := ensure(t, base)
	idx := l.Attrs().Index
	// Mutable attributes change in place (same device, FDB kept).
	if _, err := AddNeighbours(ns.h, l, Neighbours{FDB: []FDB{{MAC: mac, Dst: addr("10.0.0.2")}}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []VXLAN{
		{Name: "vx0", VNI: 4343, Port: 4799, Local: addr("10.0.0.1"), MTU: 1400, MAC: mac},
		{Name: "vx0", VNI: 4343, Port: 4799, Local: addr("10.0.0.1"), MTU: 1400, MAC: net.HardwareAddr{0x02, 0xcb, 1, 2, 3, 4}},
	} {
		if l, changes := ensure(t, v); l.Attrs().Index != idx || len(changes) != 1 {
			t.Fatalf("%+v: ifindex %d (was %d), changes %v", v, l.Attrs().Index, idx, changes)
		}
	}
	if !strings.Contains(ns.ip(t, "-d", "link", "show", "vx0"), "vxlan id 4343") ||
		!strings.Contains(run(t, "bridge", "-n", ns.name, "fdb", "show", "dev", "vx0"), "dst 10.0.0.2") {
		t.Fatal("adopted device lost its FDB")
	}
	// Down behind our back: up again.
	ns.ip(t, "link", "set", "vx0", "down")
	if _, changes := ensure(t, base); !slices.Contains(changes, "device vx0 up") {
		t.Fatalf("changes %v, want the device set up", changes)
	}
	// Immutable attributes recreate the device.
	for _, v := range []VXLAN{
		{Name: "vx0", VNI: 4344, Port: 4799, Local: addr("10.0.0.1"), MTU: 1450, MAC: mac},
		{Name: "vx0", VNI: 4344, Port: 4800, Local: addr("10.0.0.1"), MTU: 1450, MAC: mac},
		{Name: "vx0", VNI: 4344, Port: 4800, Local: addr("10.0.0.9"), MTU: 1450, MAC: mac},
	} {
		l, _ := ensure(t, v)
		if l.Attrs().Index == idx {
			t.Fatalf("%+v: device not recreated", v)
		}
		idx = l.Attrs().Index
	}
	// Any device state converges to any desired one.
	var states []VXLAN
	for _, mtu := range []int{1400, 1450} {
		for _, vni := range []int{4343, 4344} {
			states = append(states, VXLAN{Name: "vx0", VNI: vni, Port: 4799 + vni%2, Local: addr("10.0.0.1"), MTU: mtu,
				MAC: net.HardwareAddr{0x02, 0xcb, 10, 0, byte(vni), byte(mtu)}})
		}
	}
	replay(t, states, func(t *testing.T, v VXLAN) { ensure(t, v) }, func(*testing.T, VXLAN) {})
	// Learning on (not ours to keep) recreates it as well.
	ns.ip(t, "link", "del", "vx0")
	ns.ip(t, "link", "add", "vx0", "type", "vxlan", "id", "4343", "dstport", "4799", "local", "10.0.0.1")
	learning, err := ns.h.LinkByName("vx0")
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := ensure(t, base); l.Attrs().Index == learning.Attrs().Index {
		t.Fatal("learning device adopted")
	}
	if changes, err := DeleteVXLAN(ns.h, "vx0"); err != nil || len(changes) != 1 {
		t.Fatalf("delete: %v %v", changes, err)
	}
	if changes, err := DeleteVXLAN(ns.h, "vx0"); err != nil || len(changes) != 0 {
		t.Fatalf("delete of a missing device: %v %v", changes, err)
	}
	if changes, err := DeleteVXLAN(ns.h, "veth-a"); err != nil || len(changes) != 0 {
		t.Fatalf("delete of a veth: %v %v", changes, err)
	}
}

func TestSyncAddrsConverges(t *testing.T) {
	ns := newNS(t)
	states := [][]netip.Prefix{
		nil,
		{pfx("241.0.0.1/32")},
		{pfx("241.0.0.2/32")},
		{pfx("10.7.0.1/24"), pfx("fd07::1/64")},
		{pfx("10.7.0.1/24"), pfx("10.7.0.2/24"), pfx("241.0.0.1/32")},
		// Deleting the primary 10.7.0.1 takes the secondary with it.
		{pfx("10.7.0.2/24")},
	}
	replay(t, states, func(t *testing.T, want []netip.Prefix) {
		// Someone adds an address behind our back before every sync.
		ns.ip(t, "addr", "replace", "192.0.2.1/24", "dev", "veth-b")
		if _, err := SyncAddrs(ns.h, ns.b, want); err != nil {
			t.Fatal(err)
		}
	}, func(t *testing.T, want []netip.Prefix) {
		have, err := ns.h.AddrList(ns.b, netlink.FAMILY_ALL)
		if err != nil {
			t.Fatal(err)
		}
		var got []netip.Prefix
		linkLocal := false
		for _, a := range have {
			p, _ := prefixOf(a.IPNet)
			if p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
				linkLocal = true
				continue
			}
			got = append(got, p)
		}
		slices.SortFunc(got, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
		exp := slices.Clone(want)
		slices.SortFunc(exp, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
		if !slices.Equal(got, exp) || !linkLocal {
			t.Fatalf("addresses %v (link-local kept: %v), want %v", got, linkLocal, exp)
		}
		if changes, err := SyncAddrs(ns.h, ns.b, want); err != nil || len(changes) != 0 {
			t.Fatalf("equal sync changed %v (%v)", changes, err)
		}
	})
	if !strings.Contains(ns.ip(t, "addr", "show", "dev", "veth-a"), "10.0.0.1/24") {
		t.Fatal("another link's address was touched")
	}
}

func TestNeighboursConverge(t *testing.T) {
	ns := newNS(t)
	vx, _, err := EnsureVXLAN(ns.h, VXLAN{Name: "vx0", VNI: 4343, Port: 4799, Local: addr("10.0.0.1"), MTU: 1450,
		MAC: net.HardwareAddr{0x02, 0xcb, 10, 0, 0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	peer := func(i byte) (FDB, Neigh) {
		mac := net.HardwareAddr{0x02, 0xcb, 10, 0, 0, i}
		return FDB{MAC: mac, Dst: netip.AddrFrom4([4]byte{10, 0, 0, i})}, Neigh{IP: netip.AddrFrom4([4]byte{241, 0, 0, i}), MAC: mac}
	}
	var states []Neighbours
	for _, ids := range [][]byte{nil, {2}, {3}, {2, 3, 4}, {5}} {
		var n Neighbours
		for _, i := range ids {
			f, e := peer(i)
			n.FDB, n.Neigh = append(n.FDB, f), append(n.Neigh, e)
		}
		states = append(states, n)
	}
	replay(t, states, func(t *testing.T, want Neighbours) {
		if _, err := AddNeighbours(ns.h, vx, want); err != nil {
			t.Fatal(err)
		}
		// In between (where the callers sync routes) both old and
		// new entries are there.
		have := ns.static(t, vx)
		for _, e := range want.Neigh {
			if !slices.Contains(have, "neigh "+e.IP.String()+" "+e.MAC.String()) {
				t.Fatalf("after add: %v lacks %v", have, e)
			}
		}
		if _, err := PruneNeighbours(ns.h, vx, want); err != nil {
			t.Fatal(err)
		}
	}, func(t *testing.T, want Neighbours) {
		var exp []string
		for _, f := range want.FDB {
			exp = append(exp, "fdb "+f.Dst.String()+" "+f.MAC.String())
		}
		for _, e := range want.Neigh {
			exp = append(exp, "neigh "+e.IP.String()+" "+e.MAC.String())
		}
		slices.Sort(exp)
		if have := ns.static(t, vx); !slices.Equal(have, exp) {
			t.Fatalf("entries %v, want %v", have, exp)
		}
		for _, fn := range []func(*netlink.Handle, netlink.Link, Neighbours) ([]string, error){AddNeighbours, PruneNeighbours} {
			if changes, err := fn(ns.h, vx, want); err != nil || len(changes) != 0 {
				t.Fatalf("equal sync changed %v (%v)", changes, err)
			}
		}
		// Drift for the next state: one entry lost, a stray one added.
		if len(want.FDB) > 0 {
			run(t, "bridge", "-n", ns.name, "fdb", "del", want.FDB[0].MAC.String(), "dev", "vx0", "dst", want.FDB[0].Dst.String())
			ns.ip(t, "neigh", "del", want.Neigh[0].IP.String(), "dev", "vx0")
		}
		run(t, "bridge", "-n", ns.name, "fdb", "append", "02:cb:0a:00:00:63", "dev", "vx0", "dst", "10.0.0.99", "self", "permanent")
		ns.ip(t, "neigh", "replace", "241.0.0.99", "lladdr", "02:cb:0a:00:00:63", "dev", "vx0", "nud", "permanent")
	})
	// Entries of other devices are not touched.
	ns.ip(t, "neigh", "replace", "10.0.0.50", "lladdr", "02:00:00:00:00:50", "dev", "veth-a", "nud", "permanent")
	if _, err := PruneNeighbours(ns.h, vx, Neighbours{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ns.ip(t, "neigh", "show", "dev", "veth-a"), "10.0.0.50") {
		t.Fatal("a neighbour of another device was pruned")
	}
}

// static lists the permanent FDB entries with a remote and neighbour
// entries of link, sorted, as "fdb <dst> <mac>" and "neigh <ip> <mac>".
func (ns *testNS) static(t *testing.T, link netlink.Link) []string {
	t.Helper()
	var out []string
	for _, fam := range []int{unix.AF_BRIDGE, netlink.FAMILY_V4} {
		entries, err := ns.h.NeighList(link.Attrs().Index, fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range entries {
			if n.IP == nil || n.State&netlink.NUD_PERMANENT == 0 {
				continue
			}
			kind := "neigh"
			if fam == unix.AF_BRIDGE {
				kind = "fdb"
			}
			out = append(out, kind+" "+addrOf(n.IP).String()+" "+n.HardwareAddr.String())
		}
	}
	slices.Sort(out)
	return out
}

func TestSyncSysctls(t *testing.T) {
	ns := newNS(t)
	in := func(fn func() error) {
		t.Helper()
		if err := netnsx.Do(ns.path, fn); err != nil {
			t.Fatal(err)
		}
	}
	want := []Sysctl{{Path: "net/ipv4/ip_forward", Value: "1"}, {Path: "net/ipv4/conf/veth-a/rp_filter", Value: "2"}}
	sysctl := func(kv string) {
		t.Helper()
		run(t, "ip", "netns", "exec", ns.name, "sysctl", "-qw", kv)
	}
	sysctl("net.ipv4.ip_forward=0")
	sysctl("net.ipv4.conf.veth-a.rp_filter=0")
	in(func() error {
		changes, err := SyncSysctls(want)
		if err != nil || len(changes) != 2 {
			return fmt.Errorf("first sync: %v %v", changes, err)
		}
		if changes, err := SyncSysctls(want); err != nil || len(changes) != 0 {
			return fmt.Errorf("equal sync changed %v (%v)", changes, err)
		}
		return nil
	})
	sysctl("net.ipv4.conf.veth-a.rp_filter=1")
	in(func() error {
		changes, err := SyncSysctls(want)
		if err != nil || !slices.Equal(changes, []string{"sysctl net/ipv4/conf/veth-a/rp_filter=2"}) {
			return fmt.Errorf("after drift: %v %v", changes, err)
		}
		if v, err := ReadSysctl("net/ipv4/ip_forward"); err != nil || v != "1" {
			return fmt.Errorf("ip_forward %q %v", v, err)
		}
		if _, err := SyncSysctls([]Sysctl{{Path: "net/ipv4/no/such", Value: "1"}}); err == nil {
			return fmt.Errorf("missing sysctl accepted")
		}
		return nil
	})
}

// LinkLocal is the address the kernel itself gives a device with that
// MAC (so an overlay's IPv6 next hop is an address its peer's device
// holds).
func TestLinkLocalIsTheKernels(t *testing.T) {
	ns := newNS(t)
	for i, mac := range []net.HardwareAddr{
		{0x02, 0xca, 0xc6, 0x12, 0x00, 0x01},
		{0x02, 0xcb, 172, 18, 1, 10},
		{0x00, 0x16, 0x3e, 0xff, 0xfe, 0x00},
	} {
		name := fmt.Sprintf("ll%d", i)
		ns.ip(t, "link", "add", name, "address", mac.String(), "type", "veth", "peer", "name", name+"p")
		ns.ip(t, "link", "set", name+"p", "up")
		ns.ip(t, "link", "set", name, "up")
		l, err := ns.h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := ns.h.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		var have []string
		for _, a := range addrs {
			have = append(have, a.IP.String())
		}
		if want := LinkLocal(mac); !slices.Contains(have, want.String()) {
			t.Errorf("%s (%s): kernel addresses %v, LinkLocal %s", name, mac, have, want)
		}
	}
	if got := LinkLocal(net.HardwareAddr{0x02, 0xca, 0xc6, 0x12, 0x00, 0x01}).String(); got != "fe80::ca:c6ff:fe12:1" {
		t.Errorf("LinkLocal(02:ca:c6:12:00:01) = %s, as documented: fe80::ca:c6ff:fe12:1", got)
	}
}
