package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/internal/imagebuild"
	"github.com/causeway-net/causeway/lab/apps"
)

// TestLabContainerd: `lab up --runtime containerd` runs every node with
// a real kubelet and containerd, the chart's Pods from Causeway's image
// and the demo Pods from the lab image (built here as `make image` builds
// them), and traffic crosses clusters
// by clusterset VIP, causewayctl's node views work through the real
// kubelet's exec; `lab down` gives the host its sysctls back.
func TestLabContainerd(t *testing.T) {
	sysctls := readSysctls(t)
	// Registered first, so it runs after the lab's `lab down`.
	t.Cleanup(func() {
		if after := readSysctls(t); fmt.Sprint(after) != fmt.Sprint(sysctls) {
			t.Errorf("sysctls after lab down %v, before the lab %v", after, sysctls)
		}
	})
	const tag = "e2e"
	l := startLab(t, func(bin string) { buildImage(t, bin, tag) }, "--runtime", "containerd")
	ctx := context.Background()
	image := imagebuild.Repository + ":" + tag

	for _, cluster := range []string{"c1", "c2", "c3"} {
		nodes := &corev1.NodeList{}
		if err := l.Client(cluster).List(ctx, nodes); err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			info := n.Status.NodeInfo
			if !isReady(n.Status.Conditions) || info.ContainerRuntimeVersion != "containerd://2.4.2" || info.KubeletVersion != "v1.37.2" {
				t.Errorf("%s: node %s Ready=%v runtime %s kubelet %s, want Ready, containerd://2.4.2, v1.37.2",
					cluster, n.Name, isReady(n.Status.Conditions), info.ContainerRuntimeVersion, info.KubeletVersion)
			}
		}
		// The chart's Pods (Ready: lab up waited) run Causeway's image
		// in containerd.
		pods := &corev1.PodList{}
		if err := l.Client(cluster).List(ctx, pods, client.InNamespace("causeway-system")); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 5 {
			t.Errorf("%s: %d Pods in causeway-system, want 5 (2 route agents, a gateway, the MCS and globalnet controllers)", cluster, len(pods.Items))
		}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if !cs.Ready || cs.Image != image || !strings.HasPrefix(cs.ContainerID, "containerd://") {
					t.Errorf("%s: Pod %s container %s: ready %v, image %s, id %s; want ready, %s in containerd",
						cluster, p.Name, cs.Name, cs.Ready, cs.Image, cs.ContainerID, image)
				}
			}
		}
	}
	// The demo Pods run the lab image, which alone has causeway-lab.
	labImage := imagebuild.LabRepository + ":" + tag
	for _, cluster := range []string{"c1", "c2", "c3"} {
		pods := &corev1.PodList{}
		if err := l.Client(cluster).List(ctx, pods, client.InNamespace("demo")); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 {
			t.Errorf("%s: no demo Pods", cluster)
		}
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Image != labImage {
					t.Errorf("%s: demo Pod %s container %s runs %s, want %s", cluster, p.Name, cs.Name, cs.Image, labImage)
				}
			}
		}
	}
	l.checkKubectlLogsExec(ctx)

	// c3 reaches whereami exported by c1, then by c1 and c2 (same pod
	// and service CIDRs: globalnet), by its clusterset VIP.
	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c1"); err != nil {
		t.Fatalf("export from c1: %v\n%s", err, out)
	}
	var vip string
	waitFor(t, "a clusterset VIP in c3", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, si); err != nil {
			return err
		}
		if len(si.Spec.IPs) == 0 {
			return fmt.Errorf("ServiceImport without IPs")
		}
		vip = si.Spec.IPs[0]
		return nil
	})
	l.kubectlCurl(t, "c3", "http://"+vip, "c1")
	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c2"); err != nil {
		t.Fatalf("export from c2: %v\n%s", err, out)
	}
	l.kubectlCurl(t, "c3", "http://"+vip, "c1", "c2")
	// The node views through pods/exec into containers of the image,
	// as a user without root.
	l.checkUnprivilegedCLI(l.activeGateway(ctx, "c1"))
}

// kubectlCurl gets url from cluster's demo client Pod (kubectl exec: the
// image has bash and no curl) until every wanted cluster answered.
func (l *Lab) kubectlCurl(t *testing.T, cluster, url string, want ...string) {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/80 && printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' >&3 && timeout 3 cat <&3`, host, host)
	seen := map[string]bool{}
	waitForWithin(t, 2*time.Minute, fmt.Sprintf("%s answered by %v from %s", url, want, cluster), func() error {
		out, err := l.lab("kubectl", cluster, "--", "exec", "-n", "demo", "client", "--", "bash", "-c", script)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		_, body, ok := strings.Cut(out, "\r\n\r\n")
		var id apps.Identity
		if !ok || json.Unmarshal([]byte(body), &id) != nil {
			return fmt.Errorf("not whereami's answer: %q", out)
		}
		seen[id.Cluster] = true
		for _, c := range want {
			if !seen[c] {
				return fmt.Errorf("answers from %v", seen)
			}
		}
		return nil
	})
}

// buildImage writes Causeway's image to bin/causeway-image.tar and the lab
// image to bin/causeway-lab-image.tar, tagged tag, with hack/image as
// `make image` runs it: the cached Debian base and the binaries.
func buildImage(t *testing.T, bin, tag string) {
	t.Helper()
	out, err := exec.Command("../../hack/image/base.sh", "--print").Output()
	if err != nil {
		t.Fatalf("hack/image/base.sh --print (make image-base builds the base): %v", err)
	}
	cmd := exec.Command("go", "run", "./hack/image", "--base", strings.TrimSpace(string(out)),
		"--layout", filepath.Join(t.TempDir(), "layout"), "--tarball", filepath.Join(bin, "causeway-image.tar"),
		"--lab-tarball", filepath.Join(bin, "causeway-lab-image.tar"),
		"--tags", tag, "--version", tag, "--revision", tag, "--epoch", "1")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image: %v\n%s", err, out)
	}
}

// readSysctls reads the host-wide sysctls a real kubelet changes.
func readSysctls(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"} {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = strings.TrimSpace(string(b))
	}
	return out
}
