package cabletest

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/causeway-net/causeway/pkg/cable"
)

// EchoPort is the echo server port in both pods.
const EchoPort = 7777

// Factory creates the driver of one side ("a" or "b") of tp with the given
// state directory. Calling it twice with the same arguments must yield a
// driver for the same device (a restart).
type Factory func(t testing.TB, tp *Topo, side, stateDir string) cable.Driver

// Local returns the LocalEndpoint of a side of tp (with the side's IPv6
// subnet among the Subnets when tp is dual-stack).
func (tp *Topo) Local(side string, port uint16, stateDir string) cable.LocalEndpoint {
	l := cable.LocalEndpoint{ClusterID: side, Interface: tp.IfName(side), Port: port, StateDir: stateDir}
	if side == "a" {
		l.Address, l.Netns, l.Subnets = WANA, Path(tp.GwA), []netip.Prefix{SubnetA}
	} else {
		l.Address, l.Netns, l.Subnets = WANB, Path(tp.GwB), []netip.Prefix{SubnetB}
	}
	if tp.IPv6 {
		l.Subnets = append(l.Subnets, map[string]netip.Prefix{"a": SubnetA6, "b": SubnetB6}[side])
	}
	return l
}

// ConnTo is the Connection to the gateway of side, as the other side sees it.
func ConnTo(side string, port uint16, key cable.Key) cable.Connection {
	if side == "a" {
		return cable.Connection{ClusterID: "a", Endpoint: netip.AddrPortFrom(WANA, port), PublicKey: key, Subnets: []netip.Prefix{SubnetA}}
	}
	return cable.Connection{ClusterID: "b", Endpoint: netip.AddrPortFrom(WANB, port), PublicKey: key, Subnets: []netip.Prefix{SubnetB}}
}

// Connect programs a and b towards each other.
func Connect(t testing.TB, a, b cable.Driver, port uint16) {
	t.Helper()
	ctx := context.Background()
	if err := a.Set(ctx, []cable.Connection{ConnTo("b", port, b.PublicKey())}); err != nil {
		t.Fatalf("set a: %v", err)
	}
	if err := b.Set(ctx, []cable.Connection{ConnTo("a", port, a.PublicKey())}); err != nil {
		t.Fatalf("set b: %v", err)
	}
}

// WaitTraffic waits until TCP echo works in both directions.
func WaitTraffic(t testing.TB, tp *Topo) {
	t.Helper()
	for _, d := range []struct {
		from string
		to   netip.Addr
	}{{tp.PodA, PodB}, {tp.PodB, PodA}} {
		err := Eventually(20*time.Second, func() error {
			return DialEcho(d.from, netip.AddrPortFrom(d.to, EchoPort), "hello", 2*time.Second)
		})
		if err != nil {
			t.Fatalf("echo %s -> %s: %v", d.from, d.to, err)
		}
	}
}

// WaitConnected waits until each driver reports exactly one connection,
// connected. Status may lag traffic for a moment (IPsec: both sides
// initiate and a duplicate IKE_SA is replaced), so it waits to settle.
func WaitConnected(t testing.TB, drivers ...cable.Driver) {
	t.Helper()
	for i, d := range drivers {
		err := Eventually(20*time.Second, func() error {
			st, err := d.Connections(context.Background())
			if err != nil {
				return err
			}
			if len(st) != 1 || !st[0].Connected {
				return fmt.Errorf("%+v, want one connected", st)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("connections of driver %d: %v", i, err)
		}
	}
}

// OwnedRoutes lists the routes with the cable protocol in namespace ns.
func OwnedRoutes(t testing.TB, ns string) string {
	t.Helper()
	return strings.TrimSpace(Run(t, "ip", "-n", ns, "route", "show", "table", "all", "proto", "157"))
}

// LinkExists reports whether link name exists in namespace ns.
func LinkExists(ns, name string) bool {
	return exec.Command("ip", "-n", ns, "link", "show", "dev", name).Run() == nil
}

// RunSuite runs the behaviour every driver must have, in a fresh topology.
func RunSuite(t *testing.T, port uint16, newDriver Factory) {
	parent := t
	tp := New(t)
	EchoServer(t, tp.PodA, netip.AddrPortFrom(PodA, EchoPort))
	EchoServer(t, tp.PodB, netip.AddrPortFrom(PodB, EchoPort))
	ctx := context.Background()
	stateA, stateB := t.TempDir(), t.TempDir()
	a := newDriver(t, tp, "a", stateA)
	b := newDriver(t, tp, "b", stateB)

	// Before any Set, nothing passes: gateway A has no route to 10.2/24.
	if err := DialEcho(tp.PodA, netip.AddrPortFrom(PodB, EchoPort), "x", time.Second); err == nil {
		t.Fatal("traffic passed before the cable was set")
	}

	t.Run("up", func(t *testing.T) {
		Connect(t, a, b, port)
		WaitTraffic(t, tp)
		WaitConnected(t, a, b)
		if r := OwnedRoutes(t, tp.GwA); !strings.Contains(r, SubnetB.String()) || strings.Contains(r, SubnetA.String()) {
			t.Fatalf("routes of A: %q, want only %s", r, SubnetB)
		}
	})

	t.Run("idempotent-set-keeps-connection", func(t *testing.T) {
		c, err := Dial(tp.PodA, netip.AddrPortFrom(PodB, EchoPort), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := Echo(c, "one", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		routesBefore := OwnedRoutes(t, tp.GwA)
		Connect(t, a, b, port)
		if err := Echo(c, "two", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if after := OwnedRoutes(t, tp.GwA); after != routesBefore {
			t.Fatalf("routes changed on an equal Set: %q -> %q", routesBefore, after)
		}
	})

	t.Run("invalid-connection-rejected-others-kept", func(t *testing.T) {
		bad := ConnTo("b", port, b.PublicKey())
		bad.ClusterID = "evil"
		bad.Endpoint = netip.AddrPortFrom(netip.MustParseAddr("198.18.0.3"), port)
		bad.Subnets = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
		err := a.Set(ctx, []cable.Connection{ConnTo("b", port, b.PublicKey()), bad})
		var ve *cable.ValidationError
		if !errorsAs(err, &ve) || ve.ClusterID != "evil" {
			t.Fatalf("set with a default-route connection: err %v, want ValidationError for evil", err)
		}
		WaitTraffic(t, tp)
		if r := OwnedRoutes(t, tp.GwA); strings.Contains(r, "default") || strings.Contains(r, "0.0.0.0/0") {
			t.Fatalf("default route programmed: %q", r)
		}
	})

	t.Run("update-subnets", func(t *testing.T) {
		extra := netip.MustParsePrefix("10.20.0.0/24")
		wide := ConnTo("b", port, b.PublicKey())
		wide.Subnets = append(wide.Subnets, extra)
		if err := a.Set(ctx, []cable.Connection{wide}); err != nil {
			t.Fatal(err)
		}
		if r := OwnedRoutes(t, tp.GwA); !strings.Contains(r, extra.String()) || !strings.Contains(r, SubnetB.String()) {
			t.Fatalf("routes after adding %s: %q", extra, r)
		}
		WaitTraffic(t, tp)
		if err := a.Set(ctx, []cable.Connection{ConnTo("b", port, b.PublicKey())}); err != nil {
			t.Fatal(err)
		}
		if r := OwnedRoutes(t, tp.GwA); strings.Contains(r, extra.String()) {
			t.Fatalf("route %s left after shrinking: %q", extra, r)
		}
		WaitTraffic(t, tp)
	})

	t.Run("restart-keeps-established-connection", func(t *testing.T) {
		c, err := Dial(tp.PodA, netip.AddrPortFrom(PodB, EchoPort), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := Echo(c, "before", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("close a: %v", err)
		}
		a = newDriver(parent, tp, "a", stateA) // cleanup belongs to the whole suite
		if err := a.Set(ctx, []cable.Connection{ConnTo("b", port, b.PublicKey())}); err != nil {
			t.Fatalf("set restarted a: %v", err)
		}
		// TCP retransmits carry the connection over the restart.
		if err := Echo(c, "after", 60*time.Second); err != nil {
			t.Fatalf("established connection after restart: %v", err)
		}
	})

	t.Run("remove", func(t *testing.T) {
		if err := a.Set(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if err := b.Set(ctx, nil); err != nil {
			t.Fatal(err)
		}
		for name, d := range map[string]cable.Driver{"a": a, "b": b} {
			st, err := d.Connections(ctx)
			if err != nil || len(st) != 0 {
				t.Fatalf("connections %s after removal: %+v, %v", name, st, err)
			}
		}
		if r := OwnedRoutes(t, tp.GwA); r != "" {
			t.Fatalf("routes left on A: %q", r)
		}
		if err := DialEcho(tp.PodA, netip.AddrPortFrom(PodB, EchoPort), "x", 2*time.Second); err == nil {
			t.Fatal("traffic passed after peer removal")
		}
	})

	t.Run("cleanup", func(t *testing.T) {
		for name, d := range map[string]cable.Driver{"a": a, "b": b} {
			if err := d.Cleanup(ctx); err != nil {
				t.Fatalf("cleanup %s: %v", name, err)
			}
		}
		if LinkExists(tp.GwA, tp.IfName("a")) || LinkExists(tp.GwB, tp.IfName("b")) {
			t.Fatal("tunnel device left after cleanup")
		}
	})
}
