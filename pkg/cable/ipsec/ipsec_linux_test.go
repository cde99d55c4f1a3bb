package ipsec

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/cabletest"
)

const testPort = IKEPort

var testSecret = []byte("causeway ipsec test clusterset secret")

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
	l.SharedSecret = testSecret
	l.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
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

func factory(t testing.TB, tp *cabletest.Topo, side, stateDir string) cable.Driver {
	t.Helper()
	return newTest(t, tp, side, stateDir)
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
		if out, _ := exec.Command("ip", "-n", ns, "-o", "link", "show", "type", "tun").CombinedOutput(); strings.TrimSpace(string(out)) != "" {
			t.Errorf("tun device left in %s: %q", ns, out)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
