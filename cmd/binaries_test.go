// Package cmd_test builds every Causeway binary and checks the contract
// all of them share: --help explains, bad flags are refused with a clear
// message, and a running daemon serves /healthz, /readyz and /metrics and
// stops cleanly on SIGTERM.
package cmd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/clusterset"
)

var daemons = []string{"gateway", "route-agent", "globalnet"}

// brokerDaemons also need a broker to run; their flags are checked here and
// their behaviour in their packages' tests and the lab e2e.
var brokerDaemons = []string{"mcs-controller"}

func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+"/", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return dir
}

func TestBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary; skipped under -short")
	}
	bin := build(t)

	t.Run("help", func(t *testing.T) {
		for _, b := range append(append([]string{"causewayctl"}, daemons...), brokerDaemons...) {
			out, err := exec.Command(filepath.Join(bin, b), "--help").CombinedOutput()
			if err != nil {
				t.Errorf("%s --help: %v\n%s", b, err, out)
			}
			want := "--kubeconfig"
			if b == "causewayctl" {
				want = "Multi-Cluster Services"
			}
			if !strings.Contains(string(out), want) {
				t.Errorf("%s --help does not mention %q:\n%s", b, want, out)
			}
		}
	})

	t.Run("bad flags", func(t *testing.T) {
		for _, b := range append(daemons, brokerDaemons...) {
			cmd := exec.Command(filepath.Join(bin, b), "--cluster-id", "Not_A_Label", "--pod-cidrs", "10.0.0.1/8", "--metrics-addr", "0")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Errorf("%s accepted bad flags:\n%s", b, out)
				continue
			}
			for _, want := range []string{"--cluster-id", "Not_A_Label", "host bits"} {
				if !strings.Contains(string(out), want) {
					t.Errorf("%s: error does not mention %q:\n%s", b, want, out)
				}
			}
		}
	})

	t.Run("serve and stop", func(t *testing.T) {
		cp := kubetest.Start(t, "c1")
		// The route agent takes the ClusterSet policy from the mirror an
		// active gateway writes into its cluster; write it as one would.
		if err := clusterset.Store(context.Background(), cp.Client, addrpolicy.DefaultPolicy()); err != nil {
			t.Fatal(err)
		}
		for _, b := range daemons {
			t.Run(b, func(t *testing.T) {
				runDaemon(t, filepath.Join(bin, b), cp.AdminKubeconfig, extraArgs(t, b, cp.AdminKubeconfig)...)
			})
		}
	})
}

// extraArgs are the flags a daemon needs beyond the common ones. The
// route agent only computes (--dry-run); the gateway builds its tunnel in a namespace of its own (--netns), never in
// the root namespace, and uses the cluster as its broker.
func extraArgs(t *testing.T, daemon, kubeconfig string) []string {
	switch daemon {
	case "route-agent":
		// This test runs in the root namespace: the route agent must only
		// compute and log, never program the host.
		return []string{"--dry-run", "--node-ip", "192.0.2.1"}
	case "gateway":
	default:
		return nil
	}
	if os.Geteuid() != 0 {
		t.Skip("the gateway needs root (network namespace)")
	}
	b := make([]byte, 3)
	rand.Read(b)
	ns := "cmdgw" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	return []string{"--broker-kubeconfig", kubeconfig, "--public-ip", "198.18.0.1", "--netns", "/run/netns/" + ns,
		"--tunnel-device", ns, "--state-dir", t.TempDir(), "--pod-cidrs", "10.244.0.0/16", "--service-cidrs", "10.96.0.0/16"}
}

func runDaemon(t *testing.T, path, kubeconfig string, extra ...string) {
	addr := freeAddr(t)
	var logs bytes.Buffer
	cmd := exec.Command(path, append([]string{"--kubeconfig", kubeconfig, "--cluster-id", "c1", "--node-name", "n1", "--metrics-addr", addr}, extra...)...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	for _, path := range []string{"/healthz", "/readyz"} {
		if err := poll(done, "http://"+addr+path); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, logs.String())
		}
	}
	body := get(t, "http://"+addr+"/metrics")
	if !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_resident_memory_bytes") {
		t.Errorf("/metrics lacks the Go and process collectors:\n%.500s", body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("still running 30s after SIGTERM\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Errorf("no clean-stop log line:\n%s", logs.String())
	}
}

// poll waits until url answers 200, the process exits, or a minute passes.
func poll(exited <-chan error, url string) error {
	deadline := time.Now().Add(time.Minute)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("daemon exited: %v", err)
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not OK within a minute; last: %s", last)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
