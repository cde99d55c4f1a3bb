package cable_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/causeway-net/causeway/internal/testserve"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
	"github.com/causeway-net/causeway/pkg/cable/ipsec"
	"github.com/causeway-net/causeway/pkg/cable/vxlan"
	"github.com/causeway-net/causeway/pkg/cable/wireguard"
)

const (
	benchPort     = 9000
	benchDuration = 3 * time.Second
	benchMaxBytes = 8 << 30
)

// BenchmarkTunnelThroughput measures one TCP stream pod A -> pod B through
// gateway A, the WAN veth and gateway B, over: plain routing (the raw veth
// baseline), the vxlan driver, the wireguard driver (embedded wireguard-go
// here), a wireguard-go device configured by hand with IpcSet (no
// driver code) and the ipsec driver (strongSwan charon, ESP in userspace
// with kernel-libipsec), all in the same run. Each path gets a fresh topology.
// The TCP sender and receiver are goroutines of the test process (so they
// share the CPUs with an embedded wireguard-go). Metrics: Gbit/s and the
// ratio to raw veth (x-veth). Run with
//
//	go test -run '^$' -bench TunnelThroughput -benchtime 1x ./pkg/cable/
func BenchmarkTunnelThroughput(b *testing.B) {
	runPaths(b, func(b *testing.B, tp *cabletest.Topo) (int64, time.Duration) {
		startSink(b, tp.PodB, netip.AddrPortFrom(cabletest.PodB, benchPort))
		// Warm up: handshakes, PMTU discovery.
		if err := cabletest.Eventually(20*time.Second, func() error {
			_, err := transfer(tp.PodA, netip.AddrPortFrom(cabletest.PodB, benchPort), 200*time.Millisecond, 1<<20)
			return err
		}); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		start := time.Now()
		n, err := transfer(tp.PodA, netip.AddrPortFrom(cabletest.PodB, benchPort), benchDuration, benchMaxBytes)
		if err != nil {
			b.Fatalf("transfer: %v", err)
		}
		return n, time.Since(start)
	})
}

// BenchmarkTunnelThroughputIperf3 is the same with iperf3 processes
// (started with ip netns exec) as the TCP endpoints, one stream.
func BenchmarkTunnelThroughputIperf3(b *testing.B) { benchIperf3(b, 1) }

// BenchmarkTunnelThroughputIperf3x4 uses four parallel iperf3 streams.
func BenchmarkTunnelThroughputIperf3x4(b *testing.B) { benchIperf3(b, 4) }

func benchIperf3(b *testing.B, streams int) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		b.Skip("iperf3 not installed")
	}
	runPaths(b, func(b *testing.B, tp *cabletest.Topo) (int64, time.Duration) {
		srv := exec.Command("ip", "netns", "exec", tp.PodB, "iperf3", "-s", "-p", fmt.Sprint(benchPort))
		if err := srv.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
		// Warm up (and wait for the server).
		if err := cabletest.Eventually(20*time.Second, func() error {
			_, err := exec.Command("ip", "netns", "exec", tp.PodA, "iperf3", "-c", cabletest.PodB.String(), "-p", fmt.Sprint(benchPort), "-n", "1M").CombinedOutput()
			return err
		}); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		out, err := exec.Command("ip", "netns", "exec", tp.PodA, "iperf3", "-c", cabletest.PodB.String(), "-p", fmt.Sprint(benchPort),
			"-t", fmt.Sprint(int(benchDuration.Seconds())), "-P", fmt.Sprint(streams), "-J").Output()
		if err != nil {
			b.Fatalf("iperf3: %v\n%s", err, out)
		}
		var res struct {
			End struct {
				SumReceived struct {
					Bytes   int64   `json:"bytes"`
					Seconds float64 `json:"seconds"`
				} `json:"sum_received"`
				SumSent struct {
					Retransmits int64 `json:"retransmits"`
				} `json:"sum_sent"`
			} `json:"end"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.End.SumReceived.Seconds == 0 {
			b.Fatalf("parse iperf3 output: %v\n%s", err, out)
		}
		b.Logf("iperf3: %d retransmits", res.End.SumSent.Retransmits)
		return res.End.SumReceived.Bytes, time.Duration(res.End.SumReceived.Seconds * float64(time.Second))
	})
}

func runPaths(b *testing.B, measure func(*testing.B, *cabletest.Topo) (int64, time.Duration)) {
	cabletest.RequireRoot(b)
	var raw float64
	paths := []struct {
		name  string
		setup func(b *testing.B, tp *cabletest.Topo)
	}{
		{"veth", setupRouted},
		{"vxlan", setupDriver(func(ctx context.Context, l cable.LocalEndpoint) (cable.Driver, error) { return vxlan.New(ctx, l) }, 4789)},
		{"wireguard", setupDriver(func(ctx context.Context, l cable.LocalEndpoint) (cable.Driver, error) { return wireguard.New(ctx, l) }, 51820)},
		{"wireguard-go-by-hand", setupByHand},
		{"ipsec", setupDriver(ipsec.New, ipsec.IKEPort)},
	}
	for _, p := range paths {
		b.Run(p.name, func(b *testing.B) {
			var bits, secs float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				tp := cabletest.New(b)
				p.setup(b, tp)
				b.StartTimer()
				n, d := measure(b, tp)
				bits += float64(n) * 8
				secs += d.Seconds()
			}
			gbps := bits / secs / 1e9
			if p.name == "veth" {
				raw = gbps
			}
			b.ReportMetric(gbps, "Gbit/s")
			if raw > 0 {
				b.ReportMetric(gbps/raw, "x-veth")
			}
		})
	}
}

// setupRouted routes the pod subnets over the WAN veth with no tunnel.
func setupRouted(b *testing.B, tp *cabletest.Topo) {
	cabletest.Run(b, "ip", "-n", tp.GwA, "route", "add", cabletest.SubnetB.String(), "via", cabletest.WANB.String())
	cabletest.Run(b, "ip", "-n", tp.GwB, "route", "add", cabletest.SubnetA.String(), "via", cabletest.WANA.String())
}

func setupDriver(newDriver func(context.Context, cable.LocalEndpoint) (cable.Driver, error), port uint16) func(*testing.B, *cabletest.Topo) {
	return func(b *testing.B, tp *cabletest.Topo) {
		ctx := context.Background()
		var ds []cable.Driver
		for _, side := range []string{"a", "b"} {
			d, err := newDriver(ctx, tp.Local(side, port, b.TempDir()))
			if err != nil {
				b.Fatalf("new driver %s: %v", side, err)
			}
			b.Cleanup(func() { d.Cleanup(ctx) })
			ds = append(ds, d)
			if wg, ok := d.(*wireguard.Driver); ok && side == "a" {
				b.Logf("wireguard mode %v, offloads %+v", wg.Mode(), wg.Offloads())
			}
		}
		cabletest.Connect(b, ds[0], ds[1], port)
	}
}

// setupByHand builds the baseline: plain wireguard-go devices (TUN with
// wireguard-go's defaults, StdNetBind) configured with IpcSet, and routes
// added with ip(8). Only the namespace switching is shared in spirit
// with the driver; none of its code is used.
func setupByHand(b *testing.B, tp *cabletest.Topo) {
	keys := [2]wgtypes.Key{}
	for i := range keys {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			b.Fatal(err)
		}
		keys[i] = k
	}
	sides := []struct {
		ns, name string
		key      wgtypes.Key
		peer     wgtypes.Key
		peerAddr netip.Addr
		remote   netip.Prefix
	}{
		{tp.GwA, tp.IfName("ha"), keys[0], keys[1].PublicKey(), cabletest.WANB, cabletest.SubnetB},
		{tp.GwB, tp.IfName("hb"), keys[1], keys[0].PublicKey(), cabletest.WANA, cabletest.SubnetA},
	}
	for _, s := range sides {
		path := cabletest.Path(s.ns)
		var t tun.Device
		if err := inNetns(path, func() error {
			var err error
			t, err = tun.CreateTUN(s.name, device.DefaultMTU)
			return err
		}); err != nil {
			b.Fatalf("create tun: %v", err)
		}
		dev := device.NewDevice(t, &benchBind{Bind: conn.NewStdNetBind(), ns: path}, device.NewLogger(device.LogLevelSilent, ""))
		b.Cleanup(dev.Close)
		cfg := fmt.Sprintf("private_key=%s\nlisten_port=51821\npublic_key=%s\nendpoint=%s\nallowed_ip=%s\npersistent_keepalive_interval=25\n",
			hex.EncodeToString(s.key[:]), hex.EncodeToString(s.peer[:]),
			netip.AddrPortFrom(s.peerAddr, 51821), s.remote)
		if err := dev.IpcSet(cfg); err != nil {
			b.Fatalf("ipcset: %v", err)
		}
		cabletest.Run(b, "ip", "-n", s.ns, "link", "set", s.name, "up")
		if err := dev.Up(); err != nil {
			b.Fatal(err)
		}
		cabletest.Run(b, "ip", "-n", s.ns, "route", "add", s.remote.String(), "dev", s.name)
	}
}

type benchBind struct {
	conn.Bind
	ns string
}

func (bb *benchBind) Open(port uint16) (fns []conn.ReceiveFunc, actual uint16, err error) {
	err = inNetns(bb.ns, func() error {
		var err error
		fns, actual, err = bb.Bind.Open(port)
		return err
	})
	return fns, actual, err
}

func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// startSink accepts connections in ns, counts bytes until EOF and replies
// with the count (8 bytes, big endian).
func startSink(b *testing.B, ns string, addr netip.AddrPort) {
	ln := cabletest.Listen(b, ns, addr)
	testserve.Serve(b, ln, func(c net.Conn) {
		n, _ := io.Copy(io.Discard, c)
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(n))
		c.Write(buf[:])
	})
}

// transfer sends for at most d or max bytes from ns to addr and returns
// the byte count the receiver confirmed.
func transfer(ns string, addr netip.AddrPort, d time.Duration, max int64) (int64, error) {
	c, err := cabletest.Dial(ns, addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	deadline := time.Now().Add(d)
	c.SetDeadline(deadline.Add(30 * time.Second))
	var sent int64
	for sent < max && time.Now().Before(deadline) {
		n, err := c.Write(buf)
		sent += int64(n)
		if err != nil {
			return 0, fmt.Errorf("write: %w", err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	var reply [8]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil {
		return 0, fmt.Errorf("read count: %w", err)
	}
	got := int64(binary.BigEndian.Uint64(reply[:]))
	if got != sent {
		return 0, fmt.Errorf("receiver counted %d bytes, sent %d", got, sent)
	}
	return got, nil
}
