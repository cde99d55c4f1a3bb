package bpf_test

import (
	"os"
	"testing"

	"github.com/cilium/ebpf/rlimit"
)

// requireBPF skips the test when it cannot load BPF programs because it does
// not run as root, and lifts the memlock limit older kernels charge maps to.
func requireBPF(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root (CAP_BPF, CAP_NET_ADMIN); CI runs as root")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatalf("remove memlock limit: %v", err)
	}
}
