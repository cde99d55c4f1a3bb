package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/nodeview"
)

// checkNodeViews: `show node` of the active gateway's node, read through
// pods/exec, is the node's kernel state — its links are the links of the
// node's namespace, its WireGuard device has a peer with a handshake for
// each remote cluster — and `gather` writes every node's view, every
// daemon's logs and metrics and the Gateways into one archive.
func (l *Lab) checkNodeViews(ctx context.Context) {
	t := l.t
	node := l.activeGateway(ctx, "c1")
	out, err := l.causewayctl("show", "node", "c1/"+node, "-o", "json")
	if err != nil {
		t.Fatalf("show node c1/%s: %v\n%s", node, err, out)
	}
	var v nodeview.Node
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("show node -o json: %v\n%s", err, out)
	}
	links, err := exec.Command("ip", "netns", "exec", l.Prefix+"c1."+node, "ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(links), "\n"); n != len(v.Links) {
		t.Errorf("show node lists %d links, the node's namespace has %d:\n%s", len(v.Links), n, links)
	}
	for _, l := range v.Links {
		if !strings.Contains(string(links), ": "+l.Name+": ") && !strings.Contains(string(links), ": "+l.Name+"@") {
			t.Errorf("show node lists link %s, not in the node's namespace", l.Name)
		}
	}
	if c := os.Getenv("CAUSEWAY_E2E_CABLE"); c == "" || c == "wireguard" {
		if len(v.WireGuard) != 1 || len(v.WireGuard[0].Peers) != 2 {
			t.Errorf("WireGuard on c1's gateway node: %+v, want one device with a peer for c2 and c3", v.WireGuard)
		}
		for _, d := range v.WireGuard {
			for _, p := range d.Peers {
				if p.HandshakeAgeSeconds < 0 || p.RxBytes == 0 || p.Endpoint == "" {
					t.Errorf("peer %+v: want a handshake, bytes received and an endpoint", p)
				}
			}
		}
	}
	if table, err := l.causewayctl("show", "node", "c1/"+node); err != nil || !strings.Contains(table, "ROUTES") || !strings.Contains(table, "CAUSEWAY-MSS") {
		t.Errorf("show node (table): %v\n%s", err, table)
	}

	archive := filepath.Join(t.TempDir(), "gather.tar.gz")
	if out, err := l.causewayctl("gather", "-o", archive); err != nil {
		t.Fatalf("gather: %v\n%s", err, out)
	}
	files := readArchive(t, archive)
	for _, want := range []string{"nodes/c1/" + node + ".json", "nodes/c3/n1.json", "objects/c1/Gateway.v1alpha1.causeway.dev.yaml", "versions.yaml", "errors.txt"} {
		if _, ok := files[want]; !ok {
			t.Errorf("gather archive lacks %s", want)
		}
	}
	var gatewayLog, gatewayMetrics bool
	for name, data := range files {
		gatewayLog = gatewayLog || strings.HasPrefix(name, "logs/c1/causeway-gateway-") && len(data) > 0
		gatewayMetrics = gatewayMetrics || strings.HasPrefix(name, "metrics/c1/causeway-gateway-") && strings.Contains(data, "causeway_gateway_active 1")
	}
	if !gatewayLog || !gatewayMetrics {
		t.Errorf("gather archive: c1 gateway log %v, metrics with causeway_gateway_active 1 %v", gatewayLog, gatewayMetrics)
	}
	if e := strings.TrimSpace(files["errors.txt"]); e != "" {
		t.Errorf("gather could not collect:\n%s", e)
	}
	l.checkUnprivilegedCLI(node)
}

// checkUnprivilegedCLI runs the node views as a user without root, with
// nothing but a copy of the merged kubeconfig (no lab state, no bpffs):
// everything goes through the Kubernetes API.
func (l *Lab) checkUnprivilegedCLI(gatewayNode string) {
	t := l.t
	merged, err := l.lab("kubeconfig")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "causeway-user-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	b, err := os.ReadFile(strings.TrimSpace(merged))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The user's own copy of the binary (the test's build directory is
	// root's alone).
	bin, err := os.ReadFile(l.ctl)
	if err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(dir, "causewayctl")
	if err := os.WriteFile(ctl, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	as := func(args ...string) (string, error) {
		cmd := exec.Command(ctl, args...)
		cmd.Dir = dir
		cmd.Env = []string{"KUBECONFIG=" + kubeconfig, "HOME=" + dir, "PATH=/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, args := range [][]string{
		{"show", "vips", "--node", "c3/n1"},
		{"show", "node", "c1/" + gatewayNode, "-o", "json"},
		{"diagnose"},
		{"gather", "-o", filepath.Join(dir, "gather.tar.gz")},
	} {
		out, err := as(args...)
		// Right after lab up a new tunnel's first health checks may show
		// loss, which diagnose fails: this check is about running it as
		// any user, so it asks again for a while.
		for deadline := time.Now().Add(30 * time.Second); err != nil && args[0] == "diagnose" && time.Now().Before(deadline); {
			time.Sleep(2 * time.Second)
			out, err = as(args...)
		}
		if err != nil {
			t.Errorf("as uid 65534: causewayctl %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		if args[0] == "show" && args[1] == "node" {
			var v nodeview.Node
			if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Routes) == 0 || v.Sysctls["net.ipv4.ip_forward"] != "1" {
				t.Errorf("as uid 65534: show node: %v, %d routes, sysctls %v", err, len(v.Routes), v.Sysctls)
			}
		}
	}
}

// checkKubectlDNS: kubectl exec into a lab pod sees the pod's own
// resolv.conf (the cluster's DNS), so nslookup of a clusterset name
// answers the ServiceImport's VIP.
func (l *Lab) checkKubectlDNS(ctx context.Context) {
	t := l.t
	si := &mcsv1beta1.ServiceImport{}
	if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, si); err != nil || len(si.Spec.IPs) == 0 {
		t.Fatalf("c3 ServiceImport demo/whereami: %v %v", err, si.Spec.IPs)
	}
	dns := &corev1.Service{}
	if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, dns); err != nil {
		t.Fatal(err)
	}
	out, err := l.lab("kubectl", "c3", "--", "-n", "demo", "exec", "client", "--", "cat", "/etc/resolv.conf")
	if err != nil || !strings.Contains(out, "nameserver "+dns.Spec.ClusterIP) {
		t.Errorf("kubectl exec cat /etc/resolv.conf: %v, want nameserver %s\n%s", err, dns.Spec.ClusterIP, out)
	}
	out, err = l.lab("kubectl", "c3", "--", "-n", "demo", "exec", "client", "--", "nslookup", "whereami.demo.svc.clusterset.local")
	if err != nil || !strings.Contains(out, si.Spec.IPs[0]) {
		t.Errorf("kubectl exec nslookup whereami.demo.svc.clusterset.local: %v, want %s\n%s", err, si.Spec.IPs[0], out)
	}
}

// readArchive is the files of a .tar.gz by name.
func readArchive(t interface{ Fatal(...any) }, path string) map[string]string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = string(b)
	}
}
