package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestCorefileServesDualStackImport runs the stock CoreDNS binary with the
// lab's Corefile (listening on a loopback port instead of :53, without the
// readiness endpoint) against a real kube-apiserver holding the
// ServiceImport the MCS controller writes for a dual-stack export: spec.ips
// an IPv4 and an IPv6 VIP. <svc>.<ns>.svc.clusterset.local answers the
// IPv4 VIP as A and the IPv6 VIP as AAAA; a single-stack import answers
// no AAAA.
func TestCorefileServesDualStackImport(t *testing.T) {
	c := kubetest.Start(t, "dns")
	ctx := context.Background()
	if err := c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}); err != nil {
		t.Fatal(err)
	}
	v4, v6 := netip.MustParseAddr("243.0.0.10"), netip.MustParseAddr("fd63:6175:7365::10")
	merged := mcs.MergeResult{Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP,
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	for name, vips := range map[string][]netip.Addr{"dual": {v4, v6}, "single": {netip.MustParseAddr("243.0.0.11")}} {
		si := mcs.BuildServiceImport(merged, "demo", name, vips)
		si.Status = mcsv1beta1.ServiceImportStatus{}
		if err := c.Client.Create(ctx, si); err != nil {
			t.Fatal(err)
		}
	}

	kubeconfig, err := c.ControlPlane.UserKubeconfig("coredns", []string{"system:masters"})
	if err != nil {
		t.Fatal(err)
	}
	addr := startCoreDNS(t, corefileFor(kubeconfig))
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr.String())
	}}
	lookup := func(family, name string) ([]netip.Addr, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return r.LookupNetIP(ctx, family, name)
	}
	const dual = "dual.demo.svc.clusterset.local."
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := lookup("ip4", dual)
		if err == nil && slices.Equal(got, []netip.Addr{v4}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A %s: %v %v, want %s", dual, got, err, v4)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got, err := lookup("ip6", dual); err != nil || !slices.Equal(got, []netip.Addr{v6}) {
		t.Errorf("AAAA %s: %v %v, want %s", dual, got, err, v6)
	}
	if got, err := lookup("ip6", "single.demo.svc.clusterset.local."); err == nil {
		t.Errorf("AAAA of the single-stack import: %v, want no address", got)
	}
}

// startCoreDNS runs CoreDNS with Corefile cf moved from :53 to a free
// loopback port, without the readiness endpoint, until the test ends, and
// returns the address it serves. A port is only free when chosen: CoreDNS
// binds it for UDP and TCP, and a client socket of another test may take
// it meanwhile, so a CoreDNS that exits at once is started again on a new
// port (five tries).
func startCoreDNS(t *testing.T, cf string) netip.AddrPort {
	t.Helper()
	for try := 1; ; try++ {
		addr := freeUDPPort(t)
		conf := cf
		for old, repl := range map[string]string{
			".:53 {":                     fmt.Sprintf(".:%d {\n    bind 127.0.0.1", addr.Port()),
			"    ready 127.0.0.1:8181\n": "",
		} {
			if !strings.Contains(conf, old) {
				t.Fatalf("Corefile has no %q:\n%s", old, conf)
			}
			conf = strings.Replace(conf, old, repl, 1)
		}
		path := filepath.Join(t.TempDir(), "Corefile")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(filepath.Join(controlplane.DefaultBinDir(), "coredns"), "-conf", path)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start coredns: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if try == 5 {
				t.Fatalf("coredns on %s exited: %v", addr, err)
			}
			t.Logf("coredns on %s exited (%v); trying another port", addr, err)
		case <-time.After(3 * time.Second):
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
			return addr
		}
	}
}

// freeUDPPort returns a loopback address with a UDP port free right now.
func freeUDPPort(t *testing.T) netip.AddrPort {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort()
}
