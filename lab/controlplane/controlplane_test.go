package controlplane

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A control plane whose etcd client port another control plane's etcd
// holds would serve that one's data; Start must refuse it.
func TestStartRefusesAnotherEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd and kube-apiserver; skipped under -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := Start(ctx, Config{Name: "a", Dir: filepath.Join(t.TempDir(), "a")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)

	dirB := filepath.Join(t.TempDir(), "b")
	if err := os.MkdirAll(dirB, 0o700); err != nil {
		t.Fatal(err)
	}
	var aEtcdPort int
	if _, err := fmt.Sscanf(a.EtcdURL, "http://127.0.0.1:%d", &aEtcdPort); err != nil {
		t.Fatal(err)
	}
	ports := fmt.Sprintf("%d\n%d\n%d\n", aEtcdPort, freePort(t), freePort(t))
	if err := os.WriteFile(filepath.Join(dirB, "ports"), []byte(ports), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Start(ctx, Config{Name: "b", Dir: dirB})
	if err == nil {
		b.Stop()
		t.Fatal("b started on a's etcd")
	}
	if !strings.Contains(err.Error(), "is not this control plane's") {
		t.Fatalf("b: %v, want the etcd refused", err)
	}
	t.Logf("b: %v", err)
}

// freePort is a loopback port free right now, below the ephemeral range.
func freePort(t *testing.T) int {
	ln, err := listenBelowEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The ports a lab's other control planes recorded are taken; this one's
// own file and unrelated files are not read.
func TestSiblingPorts(t *testing.T) {
	lab := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(lab, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lab, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("broker/ports", "20001\n20002\n20003\n")
	write("c2/ports", "20004\n20005\n20006\n")
	write("c1/ports", "20007\n")
	write("nodes/other", "20008\n")
	taken, err := siblingPorts(filepath.Join(lab, "c1", "ports"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{20001: true, 20002: true, 20003: true, 20004: true, 20005: true, 20006: true}
	if !maps.Equal(taken, want) {
		t.Errorf("siblingPorts = %v, want %v", taken, want)
	}
}
