package vip

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// fillerVIP returns the VIP of the i-th filler service: 243.0.1.0 + i.
func fillerVIP(i int) netip.Addr {
	v := 243<<24 | 256 + i
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// manyServices returns n ≥ 4 services: vipA:80/TCP and vipA:80/UDP → be1,
// vip6A:80/TCP and vip6A:80/UDP → be61, and n-4 fillers with two backends
// each.
func manyServices(n int) map[ServiceKey]Service { return servicesWith(n, false) }

// servicesWith is manyServices, or with weighted: every service has two
// backends weighted 1 and 3 and ClientIP affinity (10800 s); vipA's are
// be1 and be2, vip6A's be61 and be62 (all listen).
func servicesWith(n int, weighted bool) map[ServiceKey]Service {
	m := map[ServiceKey]Service{
		{vipA, 80, TCP}: on(be1), {vipA, 80, UDP}: on(be1),
		{vip6A, 80, TCP}: on(be61), {vip6A, 80, UDP}: on(be61),
	}
	var affinity uint32
	w1, w2 := uint32(1), uint32(1)
	if weighted {
		affinity, w2 = 10800, 3
		for _, v := range []struct {
			vip    netip.Addr
			b1, b2 Backend
		}{{vipA, be1, be2}, {vip6A, be61, be62}} {
			two := on(Backend{Addr: v.b1.Addr, Port: v.b1.Port, Weight: w1}, Backend{Addr: v.b2.Addr, Port: v.b2.Port, Weight: w2})
			two.AffinitySeconds = affinity
			m[ServiceKey{v.vip, 80, TCP}], m[ServiceKey{v.vip, 80, UDP}] = two, two
		}
	}
	for i := range n - 4 {
		a := fillerVIP(i).As4()
		m[ServiceKey{fillerVIP(i), 80, TCP}] = Service{Backends: []Backend{
			{Addr: netip.AddrFrom4([4]byte{10, 96, a[2], a[3]}), Port: 80, Weight: w1},
			{Addr: netip.AddrFrom4([4]byte{242, 1, a[2], a[3]}), Port: uint16(30000 + i%1000), Weight: w2},
		}, AffinitySeconds: affinity}
	}
	return m
}

// connectCase is one way of connecting: a client, UDP or TCP, a destination,
// and the map it needs (services 0: the map does not matter).
type connectCase struct {
	name string
	c    *client
	kind string // "udp" (bare connect()) or "tcp" (connect + close); "udp6", "tcp6" from AF_INET6 sockets
	addr string
	maps mapLoad
}

// mapLoad is what the maps hold for a case: services services, weighted
// with affinity or not.
type mapLoad struct {
	services int
	weighted bool
}

// measure returns ns per connect() over n connects.
func (cc connectCase) measure(tb testing.TB, n int) float64 {
	tb.Helper()
	res := cc.c.do(tb, "bench-%s %s %d", cc.kind, cc.addr, n)
	f := strings.Fields(res)
	if len(f) != 2 || f[0] != "ok" {
		tb.Fatalf("%s: bench-%s %s: %s", cc.name, cc.kind, cc.addr, res)
	}
	ns, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		tb.Fatal(err)
	}
	return ns / float64(n)
}

// BenchmarkConnect measures the cost of connect() seen by an application:
// TCP connect+close (RST) over lo inside a namespace, and the bare connect()
// system call of a UDP socket (no packet), without the hook, through the hook
// with 1 (one per protocol), 10 000 and 100 000 services in the map, each
// with equal weights and no affinity ("plain") and with weights 1:3 and
// ClientIP affinity on every service ("weighted+affinity"), the latter also
// from dual-stack AF_INET6 sockets to ::ffff:<vip> (connect6; udp6, tcp6),
// both modes also from IPv6 sockets to an IPv6 VIP (hook-vip6), and through
// kube-proxy-style iptables DNAT (nft backend, one rule per service in one
// chain, 10 000 rules, the VIP's rule in the middle) in another namespace.
//
// Each case is a sub-benchmark (ns/connect). Because the machine is shared
// and noisy, the ratios are then computed from interleaved rounds: every
// round measures every case once (1 000 connects each), and the median and
// minimum per case over the rounds are logged with the ratios.
//
//	go test -run '^$' -bench BenchmarkConnect -benchtime 2000x ./pkg/vip/
func BenchmarkConnect(b *testing.B) {
	f := newFixture6(b)
	f.cfg.MaxServices = 131072
	f.cfg.MaxBackends = 262144
	k := f.open(b)
	b.Cleanup(func() { _ = k.Cleanup() })
	hooked := startClient(b, f.ns, f.cg)
	plain := startClient(b, f.ns, "")

	// kube-proxy-style DNAT in its own namespace.
	const rules = 10000
	ipt := newNetNS(b)
	ipt.mustRun(b, "ip", "addr", "add", "10.200.0.1/32", "dev", "lo")
	ipt.mustRun(b, "ip", "route", "add", "243.0.0.0/12", "dev", "lo")
	tcpEcho(b, ipt, be1.String(), "be1")
	var rs strings.Builder
	rs.WriteString("*nat\n:CW-SERVICES - [0:0]\n-A OUTPUT -j CW-SERVICES\n")
	for i := range rules {
		vip := fillerVIP(i)
		if i == rules/2 {
			vip = vipA
		}
		fmt.Fprintf(&rs, "-A CW-SERVICES -d %s/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination %s\n", vip, be1)
	}
	rs.WriteString("COMMIT\n")
	if err := ipt.Do(func() error {
		cmd := exec.Command("iptables-nft-restore")
		cmd.Stdin = strings.NewReader(rs.String())
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables-nft-restore: %v: %s", err, out)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	iptClient := startClient(b, ipt, "")

	vip := ap(vipA, 80)
	sizes := []int{4, 10000, 100000}
	cases := []connectCase{
		{name: "udp/no-hook", c: plain, kind: "udp", addr: be1.String()},
		{name: "tcp/no-hook", c: plain, kind: "tcp", addr: be1.String()},
		{name: "udp6/no-hook", c: plain, kind: "udp6", addr: apFor("udp6", be1.Addr, be1.Port)},
		{name: "tcp6/no-hook", c: plain, kind: "tcp6", addr: apFor("tcp6", be1.Addr, be1.Port)},
		{name: "udp6/no-hook-ipv6", c: plain, kind: "udp6", addr: be61.String()},
		{name: "tcp6/no-hook-ipv6", c: plain, kind: "tcp6", addr: be61.String()},
		{name: "tcp/hook-miss", c: hooked, kind: "tcp", addr: be1.String()},
		{name: fmt.Sprintf("tcp/iptables-dnat/rules=%d", rules), c: iptClient, kind: "tcp", addr: vip},
		{name: fmt.Sprintf("tcp/iptables-miss/rules=%d", rules), c: iptClient, kind: "tcp", addr: be1.String()},
	}
	var loads []mapLoad
	for _, weighted := range []bool{false, true} {
		mode := "plain"
		if weighted {
			mode = "weighted+affinity"
		}
		for _, n := range sizes {
			m := mapLoad{services: n, weighted: weighted}
			loads = append(loads, m)
			cases = append(cases,
				connectCase{name: fmt.Sprintf("udp/hook-vip/%s/services=%d", mode, n), c: hooked, kind: "udp", addr: vip, maps: m},
				connectCase{name: fmt.Sprintf("tcp/hook-vip/%s/services=%d", mode, n), c: hooked, kind: "tcp", addr: vip, maps: m},
				// IPv6 sockets to the IPv6 VIP (connect6).
				connectCase{name: fmt.Sprintf("udp6/hook-vip6/%s/services=%d", mode, n), c: hooked, kind: "udp6", addr: ap(vip6A, 80), maps: m},
				connectCase{name: fmt.Sprintf("tcp6/hook-vip6/%s/services=%d", mode, n), c: hooked, kind: "tcp6", addr: ap(vip6A, 80), maps: m})
			if weighted {
				// Dual-stack sockets to ::ffff:<vip> (connect6).
				cases = append(cases,
					connectCase{name: fmt.Sprintf("udp6/hook-vip/%s/services=%d", mode, n), c: hooked, kind: "udp6", addr: apFor("udp6", vipA, 80), maps: m},
					connectCase{name: fmt.Sprintf("tcp6/hook-vip/%s/services=%d", mode, n), c: hooked, kind: "tcp6", addr: apFor("tcp6", vipA, 80), maps: m})
			}
		}
	}
	var loaded mapLoad
	load := func(m mapLoad) {
		if m.services != 0 && m != loaded {
			mustSet(b, k, servicesWith(m.services, m.weighted))
			loaded = m
			// Let this process's GC and the kernel's deferred frees of
			// deleted map elements finish before measuring.
			runtime.GC()
			time.Sleep(300 * time.Millisecond)
		}
	}
	for _, cc := range cases {
		b.Run(cc.name, func(b *testing.B) {
			load(cc.maps)
			b.ResetTimer()
			b.ReportMetric(cc.measure(b, b.N), "ns/connect")
		})
	}

	// The kernel's own accounting of the connect4 program (BPF_ENABLE_STATS,
	// on while the returned fd is open): ns per run, free of scheduling noise.
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatalf("enable BPF run-time stats: %v", err)
	}
	defer stats.Close()
	progStats := func(cc connectCase) *ebpf.ProgramStats {
		prog := k.objs.VipConnect4
		if strings.HasSuffix(cc.kind, "6") {
			prog = k.objs.VipConnect6
		}
		st, err := prog.Stats()
		if err != nil {
			b.Fatal(err)
		}
		return st
	}

	const rounds, perRound = 9, 1000
	samples := map[string][]float64{}
	progNs := map[string][]float64{}
	for range rounds {
		for _, m := range append([]mapLoad{{}}, loads...) {
			load(m)
			for _, cc := range cases {
				if cc.maps != m {
					continue
				}
				before := progStats(cc)
				samples[cc.name] = append(samples[cc.name], cc.measure(b, perRound))
				after := progStats(cc)
				if runs := after.RunCount - before.RunCount; cc.c == hooked && runs > 0 {
					progNs[cc.name] = append(progNs[cc.name], float64(after.Runtime-before.Runtime)/float64(runs))
				}
			}
		}
	}
	med, low := map[string]float64{}, map[string]float64{}
	names := make([]string, 0, len(samples))
	for name, s := range samples {
		sort.Float64s(s)
		med[name], low[name] = s[len(s)/2], s[0]
		names = append(names, name)
	}
	sort.Strings(names)
	b.Logf("%d interleaved rounds of %d connects each:   median        min (ns/connect)", rounds, perRound)
	for _, name := range names {
		b.Logf("  %-46s %9.0f  %9.0f", name, med[name], low[name])
	}
	b.Logf("vip_connect4 (vip_connect6 for udp6/tcp6) run time per call (kernel stats), median over rounds:")
	for _, name := range names {
		if p := progNs[name]; len(p) > 0 {
			sort.Float64s(p)
			b.Logf("  %-46s %6.0f ns/run", name, p[len(p)/2])
		}
	}
	ratio := func(label, num, den string) {
		b.Logf("%s: %s / %s = %.2f (median), %.2f (min)", label, num, den, med[num]/med[den], low[num]/low[den])
	}
	for _, mode := range []string{"plain", "weighted+affinity"} {
		for _, kind := range []string{"udp", "tcp"} {
			ratio(fmt.Sprintf("flatness (%s, %s)", kind, mode),
				fmt.Sprintf("%s/hook-vip/%s/services=100000", kind, mode), fmt.Sprintf("%s/hook-vip/%s/services=4", kind, mode))
			ratio(fmt.Sprintf("flatness (%s, %s, IPv6 VIP)", kind, mode),
				fmt.Sprintf("%s6/hook-vip6/%s/services=100000", kind, mode), fmt.Sprintf("%s6/hook-vip6/%s/services=4", kind, mode))
		}
	}
	for _, n := range sizes {
		for _, kind := range []string{"udp", "tcp"} {
			wa := fmt.Sprintf("%s/hook-vip/weighted+affinity/services=%d", kind, n)
			ratio(fmt.Sprintf("weighted+affinity vs plain (%s) at %d", kind, n), wa, fmt.Sprintf("%s/hook-vip/plain/services=%d", kind, n))
			ratio(fmt.Sprintf("dual-stack ::ffff:VIP vs IPv4 (%s) at %d", kind, n), fmt.Sprintf("%s6/hook-vip/weighted+affinity/services=%d", kind, n), wa)
			ratio(fmt.Sprintf("IPv6 VIP vs IPv4 VIP, weighted+affinity (%s) at %d", kind, n), fmt.Sprintf("%s6/hook-vip6/weighted+affinity/services=%d", kind, n), wa)
		}
	}
	for _, kind := range []string{"udp", "tcp"} {
		ratio(fmt.Sprintf("dual-stack vs IPv4 without the hook (%s)", kind), kind+"6/no-hook", kind+"/no-hook")
		ratio(fmt.Sprintf("IPv6 vs IPv4 without the hook (%s)", kind), kind+"6/no-hook-ipv6", kind+"/no-hook")
	}
	ratio("hook vs none (tcp)", "tcp/hook-vip/weighted+affinity/services=10000", "tcp/no-hook")
	for _, mode := range []string{"plain", "weighted+affinity"} {
		ratio("iptables DNAT vs hook ("+mode+") at 10 000", "tcp/iptables-dnat/rules=10000", "tcp/hook-vip/"+mode+"/services=10000")
	}
	for _, mode := range []string{"plain", "weighted+affinity"} {
		for _, n := range sizes {
			name := fmt.Sprintf("udp/hook-vip/%s/services=%d", mode, n)
			b.Logf("hook cost per bare connect() (%s) at %6d services: %+.0f ns (median), %+.0f ns (min)", mode, n, med[name]-med["udp/no-hook"], low[name]-low["udp/no-hook"])
		}
	}
}

// BenchmarkSet measures programming the maps: Set of n services (two
// backends each) into empty maps, and Set of the same n with one backend of
// one service changed (what an endpoint removal costs); the latter also at
// 1 000 services of 100 backends each.
//
//	go test -run '^$' -bench BenchmarkSet ./pkg/vip/
func BenchmarkSet(b *testing.B) {
	requireRoot(b)
	k, err := Open(Config{PinDir: newBPFFS(b), CgroupPath: newCgroup(b), MaxServices: 131072, MaxBackends: 262144})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = k.Cleanup() })
	ctx := context.Background()
	for _, n := range []int{10000, 100000} {
		desired := manyServices(n)
		b.Run(fmt.Sprintf("from-empty/services=%d", n), func(b *testing.B) {
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				mustSet(b, k, nil)
				b.StartTimer()
				c0 := cpuTime(b)
				mustSet(b, k, desired)
				cpu += cpuTime(b) - c0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "services/s")
		})
		b.Run(fmt.Sprintf("one-backend-change/services=%d", n), func(b *testing.B) {
			if err := k.Set(ctx, desired); err != nil {
				b.Fatal(err)
			}
			key := ServiceKey{fillerVIP(n / 2), 80, TCP}
			orig := desired[key]
			b.Cleanup(func() { desired[key] = orig })
			b.ResetTimer()
			defer reportCPU(b)()
			for i := range b.N {
				if i%2 == 0 {
					desired[key] = on(orig.Backends[0]) // a backend removed
				} else {
					desired[key] = orig
				}
				mustSet(b, k, desired)
			}
			if ops := k.LastOps(); ops.Total() > 2 {
				b.Fatalf("one change wrote %+v", ops)
			}
		})
	}
	// A ClusterSet's shape: 1 000 service ports (500 imports × 2 ports),
	// each with a backend in each of 100 members (a global IP:port), one
	// backend of one of them removed and added back.
	wide := map[ServiceKey]Service{}
	for i := range 1000 {
		var bes []Backend
		for m := range 100 {
			bes = append(bes, Backend{Addr: netip.AddrFrom4([4]byte{242, byte(m), 0, 2}), Port: uint16(1024 + i)})
		}
		wide[ServiceKey{fillerVIP(i), 80, TCP}] = Service{Backends: bes}
	}
	b.Run("one-backend-change/services=1000/backends=100", func(b *testing.B) {
		mustSet(b, k, nil) // room: the maps hold the last run's 200 000 slots
		if err := k.Set(ctx, wide); err != nil {
			b.Fatal(err)
		}
		key := ServiceKey{fillerVIP(500), 80, TCP}
		orig := wide[key]
		b.ResetTimer()
		defer reportCPU(b)()
		for i := range b.N {
			if i%2 == 0 {
				wide[key] = Service{Backends: orig.Backends[1:]} // a backend removed
			} else {
				wide[key] = orig
			}
			mustSet(b, k, wide)
		}
		if ops := k.LastOps(); ops.Total() > 101 {
			b.Fatalf("one change wrote %+v", ops)
		}
	})
}

// reportCPU, deferred, reports the process's CPU time (user + system, all
// threads, so GC included) per iteration: on a shared machine it moves less
// than wall time.
func reportCPU(b *testing.B) func() {
	start := cpuTime(b)
	return func() {
		b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
