package nat

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/internal/rawsock"
	"github.com/causeway-net/causeway/internal/testserve"
	"github.com/causeway-net/causeway/lab/bench"
)

// BenchmarkSync10k: full syncs of 10 000 exported tcp ports (40 000 map
// elements plus sets), then one pair added and removed incrementally
// (20 times each), all counted in the kernel; medians (p50) and p90 over
// the samples. Baselines in the same run: iptables-restore of the
// one-IP-per-Service equivalent (10 000 DNAT rules), and an equal sync
// (compile, diff, the canary probe: the floor of any sync). Counts (one
// knftables ListElements per set and map) is timed too.
func BenchmarkSync10k(b *testing.B) {
	tp := newTopo(b)
	ctx := context.Background()
	cfg := manyPortsConfig(b, 10_000)
	extra := Ingress{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.250:2000"), Target: netip.MustParseAddrPort("10.97.0.1:80")}
	tab := NewTable(NewNftRunner(tp.path("gw")), nil)
	var full, adds, removes, equal, ipt, counted []time.Duration
	timed := func(samples *[]time.Duration, f func()) {
		start := time.Now()
		f()
		*samples = append(*samples, time.Since(start))
	}
	var elems int
	for b.Loop() {
		for range 3 {
			tab.RequestFull()
			timed(&full, func() {
				if res, err := tab.Sync(ctx, cfg); err != nil || !res.Full {
					b.Fatalf("full sync: %+v, %v", res, err)
				}
			})
		}
		for range 20 {
			timed(&adds, func() {
				if res, err := tab.Sync(ctx, withIngress(cfg, extra)); err != nil || res.Full || res.Added != 4 {
					b.Fatalf("incremental add: %+v, %v", res, err)
				}
			})
			timed(&removes, func() {
				if res, err := tab.Sync(ctx, cfg); err != nil || res.Full || res.Removed != 4 {
					b.Fatalf("incremental remove: %+v, %v", res, err)
				}
			})
			timed(&equal, func() {
				if res, err := tab.Sync(ctx, cfg); err != nil || res.Added+res.Removed != 0 {
					b.Fatalf("equal sync: %+v, %v", res, err)
				}
			})
		}
		var counts map[string]int
		timed(&counted, func() {
			var err error
			if counts, err = tab.Counts(ctx); err != nil {
				b.Fatal(err)
			}
		})
		elems = 0
		for _, n := range counts {
			elems += n
		}
		if counts["tcp-in-addr"] != 10_000 {
			b.Fatalf("kernel holds %d tcp-in-addr elements", counts["tcp-in-addr"])
		}
		script := baselineRules(10_000)
		timed(&ipt, func() { tp.inStdin(b, "gw", script, "iptables-restore", "--noflush") })
		tp.in(b, "gw", "iptables", "-t", "nat", "-F", "CW-BASE")
	}
	f, eq, it := bench.NewStats(full), bench.NewStats(equal), bench.NewStats(ipt)
	ad, rm, in := bench.NewStats(adds), bench.NewStats(removes), bench.NewStats(append(adds, removes...))
	b.ReportMetric(f.P50MS, "full-p50-ms")
	b.ReportMetric(in.P50MS, "incremental-p50-ms")
	b.ReportMetric(in.P90MS, "incremental-p90-ms")
	b.ReportMetric(ad.P50MS, "add-one-p50-ms")
	b.ReportMetric(rm.P50MS, "remove-one-p50-ms")
	b.ReportMetric(eq.P50MS, "equal-sync-p50-ms")
	b.ReportMetric(it.P50MS, "iptables-restore-10k-ms")
	b.ReportMetric(f.P50MS/it.P50MS, "full/iptables")
	b.ReportMetric(in.P50MS/eq.P50MS, "incremental/equal-sync")
	b.ReportMetric(float64(elems), "kernel-elements")
	b.ReportMetric(bench.NewStats(counted).P50MS, "counts-ms")
}

// baselineRules is the one-IP-per-Service ruleset: n DNAT rules in chain
// CW-BASE (jumped to from nat PREROUTING), Service i at 242.1.x.y:80; the
// last one is the real Service (→ pod 10.244.0.5:8080), so a connection to
// it walks the whole chain, as the least lucky Service's would.
func baselineRules(n int) string {
	var b strings.Builder
	b.WriteString("*nat\n:CW-BASE - [0:0]\n")
	for i := range n {
		to := fmt.Sprintf("10.96.%d.%d:80", 1+i/250, 1+i%250)
		if i == n-1 {
			to = podAddr.String() + ":8080"
		}
		fmt.Fprintf(&b, "-A CW-BASE -d %s/32 -p tcp --dport 80 -j DNAT --to-destination %s\n", baselineGlobal(i), to)
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func baselineGlobal(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{242, 1, byte(i / 250), byte(1 + i%250)})
}

// BenchmarkConnectThroughGateway: TCP connect + close (RST) from the
// remote client through the gateway to the pod, at 10 and 10 000 exported
// ports, with our table (global IP:port → ClusterIP → kube-proxy's DNAT)
// and with the one-IP-per-Service baseline (a chain of 10 or 10 000
// iptables DNAT rules, the target last), measured one after the other in
// the same run: 5 rounds of 1 000 connections per configuration, the
// median and the fastest round reported.
func BenchmarkConnectThroughGateway(b *testing.B) {
	tp := newTopo(b)
	tp.kubeProxy(b)
	var ln net.Listener
	if err := netnsx.Do(tp.path("pod"), func() (err error) { ln, err = net.Listen("tcp4", podAddr.String()+":8080"); return err }); err != nil {
		b.Fatal(err)
	}
	testserve.Serve(b, ln, func(net.Conn) {})
	ctx := context.Background()
	tab := NewTable(NewNftRunner(tp.path("gw")), nil)
	b.Cleanup(func() { _ = tab.Cleanup(ctx) })
	target := Ingress{Protocol: "tcp", Global: netip.MustParseAddrPort("242.0.1.252:1024"), Target: netip.AddrPortFrom(clusterIP, 80)}
	const conns, rounds = 1000, 5
	samples := map[string][]time.Duration{} // per connection, one per round
	for b.Loop() {
		for range rounds {
			for _, n := range []int{10, 10_000} {
				cfg := withIngress(manyPortsConfig(b, n-1), target)
				if _, err := tab.Sync(ctx, cfg); err != nil {
					b.Fatal(err)
				}
				k := fmt.Sprint("ours-", n)
				samples[k] = append(samples[k], connectLoop(b, tp, target.Global, conns)/conns)
			}
			if err := tab.Cleanup(ctx); err != nil {
				b.Fatal(err)
			}
			tp.in(b, "gw", "iptables", "-t", "nat", "-N", "CW-BASE")
			tp.in(b, "gw", "iptables", "-t", "nat", "-I", "PREROUTING", "1", "-j", "CW-BASE")
			for _, n := range []int{10, 10_000} {
				tp.inStdin(b, "gw", baselineRules(n), "iptables-restore", "--noflush")
				k := fmt.Sprint("iptables-", n)
				samples[k] = append(samples[k], connectLoop(b, tp, netip.AddrPortFrom(baselineGlobal(n-1), 80), conns)/conns)
			}
			tp.in(b, "gw", "iptables", "-t", "nat", "-D", "PREROUTING", "-j", "CW-BASE")
			tp.in(b, "gw", "iptables", "-t", "nat", "-F", "CW-BASE")
			tp.in(b, "gw", "iptables", "-t", "nat", "-X", "CW-BASE")
		}
	}
	// Median round (and the fastest, the least disturbed by other load on
	// the machine), in µs per connection.
	per := func(k string) float64 { return bench.NewStats(samples[k]).P50MS * 1e3 }
	for _, k := range []string{"ours-10", "ours-10000", "iptables-10", "iptables-10000"} {
		b.ReportMetric(per(k), k+"-us/conn")
		b.ReportMetric(float64(slices.Min(samples[k]).Nanoseconds())/1e3, k+"-min-us/conn")
	}
	b.ReportMetric(per("ours-10000")/per("ours-10"), "ours-10000/10")
	b.ReportMetric(per("iptables-10000")/per("iptables-10"), "iptables-10000/10")
	b.ReportMetric(per("iptables-10000")/per("ours-10000"), "iptables/ours-at-10000")
}

// connectLoop warms up, then times n connect() + RST close from the client
// namespace to addr.
func connectLoop(tb testing.TB, tp topo, addr netip.AddrPort, n int) time.Duration {
	tb.Helper()
	sa := &unix.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	linger := &unix.Linger{Onoff: 1, Linger: 0}
	one := func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &unix.Timeval{Sec: 3})
		if err := rawsock.Connect(fd, sa); err != nil {
			return fmt.Errorf("connect %s: %w", addr, err)
		}
		return unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, linger)
	}
	var d time.Duration
	err := netnsx.Do(tp.path("client"), func() error {
		for range 200 {
			if err := one(); err != nil {
				return err
			}
		}
		start := time.Now()
		for range n {
			if err := one(); err != nil {
				return err
			}
		}
		d = time.Since(start)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// BenchmarkCompileDiff10k: the Go side of an incremental sync at 10 000
// ports: validate and pack the Config, diff it against the applied one,
// queue the diff on a knftables transaction and write its nft text (what
// Run hands to nft).
// The Ingress list is shuffled (callers build it from informer caches, in
// no particular order).
func BenchmarkCompileDiff10k(b *testing.B) {
	cfg := manyPortsConfig(b, 10_000)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(cfg.Ingress), func(i, j int) { cfg.Ingress[i], cfg.Ingress[j] = cfg.Ingress[j], cfg.Ingress[i] })
	old, err := cfg.compile()
	if err != nil {
		b.Fatal(err)
	}
	next := withIngress(cfg, Ingress{Protocol: "tcp", Global: ap("242.0.1.250:2000"), Target: ap("10.97.0.1:80")})
	for b.Loop() {
		d, err := next.compile()
		if err != nil {
			b.Fatal(err)
		}
		tx := knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction()
		probeCanary(tx)
		if added, _ := addDiff(tx, old, d); added != 4 || tx.String() == "" {
			b.Fatalf("added %d", added)
		}
	}
}

// BenchmarkFullTransaction10k: the Go side of a full sync at 10 000
// ports (40 002 elements): compile the Config, queue the whole table on a
// knftables transaction and write its nft text (what Run hands to nft).
func BenchmarkFullTransaction10k(b *testing.B) {
	cfg := manyPortsConfig(b, 10_000)
	for b.Loop() {
		d, err := cfg.compile()
		if err != nil {
			b.Fatal(err)
		}
		tx := knftables.NewFake(knftables.IPv4Family, TableName).NewTransaction()
		addFull(tx, d)
		if tx.String() == "" {
			b.Fatal("empty transaction")
		}
	}
}
