package crinode

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func testConfig() Config {
	return Config{
		NodeName: "n1", NodeIP: netip.MustParseAddr("172.18.1.11"),
		PodCIDR: netip.MustParsePrefix("10.244.1.0/24"), ClusterDNS: netip.MustParseAddr("10.96.0.10"),
		CgroupRoot: "/causeway-lab/cwl-c1/n1", SandboxImage: "causeway.dev/lab/causeway-lab:v1",
		ConfigDir: "/lab/nodes/c1/n1/config", CACertFile: "/lab/c1/ca.crt",
		ServingCertFile: "/lab/c1/n1.crt", ServingKeyFile: "/lab/c1/n1.key",
	}
}

// The pod network hands out the node's slice from .2 up with .1 as the
// pods' gateway, like the lab kubelet's netlab.AllocatePodIP.
func TestCNIConfigRange(t *testing.T) {
	b, err := CNIConfig(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Plugins []struct {
			Type string
			IPAM struct {
				Ranges [][]struct{ Subnet, RangeStart, Gateway string }
			}
		}
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 1 || conf.Plugins[0].Type != "ptp" {
		t.Fatalf("plugins = %+v, want one ptp", conf.Plugins)
	}
	r := conf.Plugins[0].IPAM.Ranges[0][0]
	if r.Subnet != "10.244.1.0/24" || r.RangeStart != "10.244.1.2" || r.Gateway != "10.244.1.1" {
		t.Fatalf("range = %+v, want 10.244.1.0/24 from .2, gateway .1", r)
	}
}

// What this machine needs of the kubelet (lab.md): cgroup v1 tolerated,
// cgroupfs, swap tolerated, no iptables chains of its own; its cgroups
// below the node's root; the API authenticated by the cluster CA.
func TestKubeletConfig(t *testing.T) {
	b, err := KubeletConfig(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "failSwapOn": false, "makeIPTablesUtilChains": false,
		"cgroupRoot": "/causeway-lab/cwl-c1/n1", "address": "172.18.1.11",
		"containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	x509 := got["authentication"].(map[string]any)["x509"].(map[string]any)
	if x509["clientCAFile"] != "/lab/c1/ca.crt" {
		t.Errorf("clientCAFile = %v", x509["clientCAFile"])
	}
}

// containerd itself reads the configuration: its effective settings
// (`containerd config dump`) are ours, not its defaults (a key in the
// wrong table would leave the default).
func TestContainerdConfigTakesEffect(t *testing.T) {
	if testing.Short() {
		t.Skip("runs containerd (hack/k8s-binaries.sh); skipped under -short")
	}
	dir := os.Getenv("CAUSEWAY_CONTAINERD_BIN")
	if dir == "" {
		dir = "/var/cache/causeway/containerd-v2.4.2"
	}
	file := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(file, ContainerdConfig(testConfig()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, "containerd"), "--config", file, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	for _, want := range []string{`sandbox = 'causeway.dev/lab/causeway-lab:v1'`, "restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true", `BinaryName = '/usr/sbin/runc'`, `bin_dirs = ['/usr/lib/cni']`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("effective configuration lacks %s:\n%s", want, out)
		}
	}
	// NRI off: no socket in the host's /var/run/nri.
	if !regexp.MustCompile(`(?s)\[plugins\.'io\.containerd\.nri\.v1\.nri'\][^\[]*disable = true`).Match(out) {
		t.Errorf("NRI not disabled:\n%s", out)
	}
}

// Every mount point gets a directory of its own below the node's root,
// so two nodes never share one.
func TestBindsAreTheNodes(t *testing.T) {
	a, b := Binds("/lab/nodes/c1/n0/root"), Binds("/lab/nodes/c1/n1/root")
	seen := map[string]bool{}
	for _, mp := range MountPoints {
		if filepath.Dir(a[mp]) != "/lab/nodes/c1/n0/root" || a[mp] == b[mp] {
			t.Errorf("%s: %s and %s", mp, a[mp], b[mp])
		}
		if seen[a[mp]] {
			t.Errorf("%s: %s used twice", mp, a[mp])
		}
		seen[a[mp]] = true
	}
}
