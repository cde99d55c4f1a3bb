package vxlan

import (
	"context"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
)

const testPort = 4789

func factory(t testing.TB, tp *cabletest.Topo, side, stateDir string) cable.Driver {
	t.Helper()
	d, err := New(context.Background(), tp.Local(side, testPort, stateDir))
	if err != nil {
		t.Fatalf("new vxlan %s: %v", side, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestVXLAN(t *testing.T) {
	cabletest.RunSuite(t, testPort, factory)
}

// A restarted driver adopts the kernel device: same ifindex, FDB kept.
func TestVXLANAdoptsDevice(t *testing.T) {
	tp := cabletest.New(t)
	a := factory(t, tp, "a", t.TempDir())
	b := factory(t, tp, "b", t.TempDir())
	cabletest.Connect(t, a, b, testPort)
	before := cabletest.Run(t, "ip", "-n", tp.GwA, "-o", "link", "show", "dev", tp.IfName("a"))
	fdbBefore := cabletest.Run(t, "bridge", "-n", tp.GwA, "fdb", "show", "dev", tp.IfName("a"))
	if !strings.Contains(fdbBefore, "dst "+cabletest.WANB.String()) {
		t.Fatalf("fdb has no entry for %s: %q", cabletest.WANB, fdbBefore)
	}
	a.Close()
	a = factory(t, tp, "a", t.TempDir())
	after := cabletest.Run(t, "ip", "-n", tp.GwA, "-o", "link", "show", "dev", tp.IfName("a"))
	if strings.Fields(before)[0] != strings.Fields(after)[0] {
		t.Fatalf("device re-created instead of adopted: %q -> %q", before, after)
	}
	if fdb := cabletest.Run(t, "bridge", "-n", tp.GwA, "fdb", "show", "dev", tp.IfName("a")); fdb != fdbBefore {
		t.Fatalf("fdb changed by adoption: %q -> %q", fdbBefore, fdb)
	}
	if err := a.Set(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if fdb := cabletest.Run(t, "bridge", "-n", tp.GwA, "fdb", "show", "dev", tp.IfName("a")); strings.Contains(fdb, "dst ") {
		t.Fatalf("fdb entries left after empty Set: %q", fdb)
	}
}
