package kubelet

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/controlplane"
)

// kubectl runs the real kubectl against the test's API server.
func (l *lab) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	l.t.Helper()
	bin := filepath.Join(controlplane.DefaultBinDir(), "kubectl")
	if _, err := os.Stat(bin); err != nil {
		l.t.Fatalf("kubectl: %v (run hack/k8s-binaries.sh)", err)
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", l.cp.AdminKubeconfig, "-n", testNS}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

func shellPod(name, node, script string, policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: policy,
			Containers: []corev1.Container{{
				Name:    "sh",
				Image:   "busybox:1.36",
				Command: []string{"sh", "-c"},
				Args:    []string{script},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "GREETING", Value: "hello from $(POD_NAME)"},
				},
			}},
		},
	}
}

// TestKubeletAPI drives the kubelet API the way users do, through the
// real API server (which reaches the nodes through n0's egress proxy) and
// the real kubectl: logs (tail, follow, of a finished pod), exec (output,
// exit code, stdin, the pod's namespace and cgroup, a terminal),
// port-forward, and pods of images the lab does not know, run from the
// host's files.
func TestKubeletAPI(t *testing.T) {
	l := newLab(t, 2, kubetest.WithClusterEgress())
	l.api = true
	l.startKubelet("n0")
	l.startKubelet("n1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("NodePublishesTheKubeletEndpoint", func(t *testing.T) {
		eventually(t, "kubelet port in the node status", func() (bool, string) {
			n, err := l.kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return n.Status.DaemonEndpoints.KubeletEndpoint.Port == APIPort, fmt.Sprint(n.Status.DaemonEndpoints)
		})
	})

	t.Run("OnlyTheAPIServerGetsIn", func(t *testing.T) {
		pki := filepath.Join(l.cp.Dir(), "pki")
		get := func(certName string) (int, error) {
			cert, err := tls.LoadX509KeyPair(filepath.Join(pki, certName+".crt"), filepath.Join(pki, certName+".key"))
			if err != nil {
				t.Fatal(err)
			}
			ca, err := os.ReadFile(l.cp.CACertFile())
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(ca)
			tr := &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					return l.host.Dial(l.host.Names().Node("c1", "n0"), network, addr)
				},
			}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://172.18.1.11:10250/healthz")
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		if code, err := get("apiserver-kubelet-client"); err != nil || code != http.StatusOK {
			t.Errorf("the API server's client certificate: %d, %v", code, err)
		}
		if code, err := get("client-admin"); err != nil || code != http.StatusForbidden {
			t.Errorf("an admin certificate (not the API server's): %d, %v; want 403", code, err)
		}
	})

	// A busybox-style pod: its command runs from the host's files, with
	// the container's env and $(VAR) expansion.
	l.createPod(shellPod("hello", "n1", `echo "$GREETING"; echo "args $(POD_NAME)"; echo to stderr >&2; exec sleep 3600`, corev1.RestartPolicyAlways))
	hello := l.runningReady("hello")

	t.Run("Logs", func(t *testing.T) {
		want := "hello from hello\nargs hello\nto stderr\n"
		eventually(t, "kubectl logs hello", func() (bool, string) {
			out, err := l.kubectl(ctx, "", "logs", "hello")
			if err != nil {
				return false, err.Error()
			}
			return out == want, fmt.Sprintf("%q, want %q", out, want)
		})
		out, err := l.kubectl(ctx, "", "logs", "hello", "-c", "sh", "--tail=1")
		if err != nil || out != "to stderr\n" {
			t.Errorf("logs --tail=1: %q, %v", out, err)
		}
		if _, err := l.kubectl(ctx, "", "logs", "hello", "--timestamps"); err == nil || !strings.Contains(err.Error(), "timestamps is not supported") {
			t.Errorf("logs --timestamps: %v, want a clear refusal", err)
		}
	})

	t.Run("LogsFollowEndsWithTheContainer", func(t *testing.T) {
		l.createPod(shellPod("counter", "n0", `for i in 1 2 3; do echo n$i; sleep 1; done`, corev1.RestartPolicyNever))
		eventually(t, "counter started", func() (bool, string) {
			p, err := l.pod("counter")
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase != corev1.PodPending, string(p.Status.Phase)
		})
		out, err := l.kubectl(ctx, "", "logs", "-f", "counter")
		if err != nil || out != "n1\nn2\nn3\n" {
			t.Errorf("logs -f: %q, %v", out, err)
		}
		// A finished pod's log stays readable.
		eventually(t, "counter succeeded", func() (bool, string) {
			p, err := l.pod("counter")
			if err != nil {
				return false, err.Error()
			}
			return p.Status.Phase == corev1.PodSucceeded, string(p.Status.Phase)
		})
		if out, err := l.kubectl(ctx, "", "logs", "counter"); err != nil || out != "n1\nn2\nn3\n" {
			t.Errorf("logs of the finished pod: %q, %v", out, err)
		}
	})

	t.Run("Exec", func(t *testing.T) {
		out, err := l.kubectl(ctx, "", "exec", "hello", "--", "sh", "-c", `echo "$POD_NAME"; readlink /proc/self/ns/net; cat /proc/self/cgroup`)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		pid := pidOf(t, hello)
		wantNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			t.Fatal(err)
		}
		wantCG, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) < 3 || lines[0] != "hello" || lines[1] != wantNS || !strings.Contains(out, unifiedLine(string(wantCG))) {
			t.Errorf("exec printed %q; want the pod name, the container's network namespace %s and cgroup %q", out, wantNS, unifiedLine(string(wantCG)))
		}

		_, err = l.kubectl(ctx, "", "exec", "hello", "--", "sh", "-c", "exit 3")
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 3 {
			t.Errorf("exec exit 3: %v, want kubectl to exit with 3", err)
		}

		out, err = l.kubectl(ctx, "piped in\n", "exec", "-i", "hello", "--", "tr", "a-z", "A-Z")
		if err != nil || out != "PIPED IN\n" {
			t.Errorf("exec -i: %q, %v", out, err)
		}

		if _, err := l.kubectl(ctx, "", "exec", "hello", "--", "no-such-program-here"); err == nil || !strings.Contains(err.Error(), "not found on the host") {
			t.Errorf("exec of a missing program: %v", err)
		}

		// exec sees the files the container's processes see: the pod's
		// resolv.conf (the cluster DNS, the namespace's search path) and
		// hosts (its name at its IP), not the host's.
		for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
			out, err := l.kubectl(ctx, "", "exec", "hello", "--", "cat", f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s", pid, f))
			if err != nil {
				t.Fatal(err)
			}
			if out != string(want) {
				t.Errorf("exec cat %s printed %q, the container sees %q", f, out, want)
			}
		}
		out, _ = l.kubectl(ctx, "", "exec", "hello", "--", "cat", "/etc/resolv.conf")
		if wantDNS := "nameserver " + testClusterDNS.String() + "\nsearch " + hello.Namespace + ".svc.cluster.local svc.cluster.local cluster.local\n"; !strings.HasPrefix(out, wantDNS) {
			t.Errorf("the pod's resolv.conf is %q, want it to start with %q", out, wantDNS)
		}
		out, _ = l.kubectl(ctx, "", "exec", "hello", "--", "cat", "/etc/hosts")
		if want := hello.Status.PodIP + "\thello\n"; !strings.Contains(out, want) {
			t.Errorf("the pod's hosts is %q, want a line %q", out, want)
		}
	})

	t.Run("ExecTerminal", func(t *testing.T) {
		req := l.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(testNS).Name("hello").SubResource("exec").
			VersionedParams(&corev1.PodExecOptions{Container: "sh", Command: []string{"sh", "-c", `tty; for i in $(seq 100); do [ "$(stty size)" = "40 100" ] && echo resized && exit; sleep 0.1; done; stty size`}, Stdout: true, TTY: true}, scheme.ParameterCodec)
		spdy, err := remotecommand.NewSPDYExecutor(l.cp.Config, http.MethodPost, req.URL())
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		sizes := &fixedSize{size: remotecommand.TerminalSize{Width: 100, Height: 40}}
		if err := spdy.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Tty: true, TerminalSizeQueue: sizes}); err != nil {
			t.Fatalf("exec with a terminal: %v (%q)", err, out.String())
		}
		if !regexp.MustCompile(`^/dev/pts/\d+\r?\nresized\r?\n$`).MatchString(out.String()) {
			t.Errorf("exec with a terminal printed %q, want a /dev/pts terminal resized to 40 rows and 100 columns", out.String())
		}
	})

	t.Run("PortForward", func(t *testing.T) {
		l.createPod(whereamiPod("web", "n0", 8080))
		l.runningReady("web")
		pctx, stop := context.WithCancel(ctx)
		bin := filepath.Join(controlplane.DefaultBinDir(), "kubectl")
		cmd := exec.CommandContext(pctx, bin, "--kubeconfig", l.cp.AdminKubeconfig, "-n", testNS, "port-forward", "--address", "127.0.0.1", "pod/web", ":8080")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stop()
			cmd.Wait()
		}()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		m := regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> 8080`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("port-forward said %q (%v): %s", line, err, stderr.String())
		}
		id, err := l.whereami("", m[1])
		if err != nil || id.Pod != "web" || id.Namespace != testNS {
			t.Errorf("whereami through port-forward: %+v, %v (%s)", id, err, stderr.String())
		}
	})

	t.Run("LivenessProbeRestarts", func(t *testing.T) {
		p := whereamiPod("sick", "n1", 8080)
		p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8081)}}, // nothing listens
			PeriodSeconds: 1, FailureThreshold: 2,
		}
		l.createPod(p)
		eventually(t, "restarted by its liveness probe", func() (bool, string) {
			p, err := l.pod("sick")
			if err != nil || len(p.Status.ContainerStatuses) != 1 {
				return false, fmt.Sprint(err)
			}
			cs := p.Status.ContainerStatuses[0]
			return cs.RestartCount >= 1, fmt.Sprintf("%+v", cs)
		})
		evs, err := l.kube.CoreV1().Events(testNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=sick,reason=Unhealthy"})
		if err != nil || len(evs.Items) == 0 {
			t.Errorf("no Unhealthy event: %v", err)
		}
	})

	t.Run("HostCommandMissing", func(t *testing.T) {
		p := shellPod("nocmd", "n1", "", corev1.RestartPolicyAlways)
		p.Spec.Containers[0].Command = []string{"no-such-program-here"}
		l.createPod(p)
		eventually(t, "missing command reported", func() (bool, string) {
			p, err := l.pod("nocmd")
			if err != nil || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
				return false, fmt.Sprint(err)
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w.Reason == ReasonCreateContainer && strings.Contains(w.Message, "no-such-program-here"), fmt.Sprintf("%+v", w)
		})
		eventually(t, "event for the missing command", func() (bool, string) {
			evs, err := l.kube.CoreV1().Events(testNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=nocmd"})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == ReasonCreateContainer && strings.Contains(e.Message, "no-such-program-here") {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d events", len(evs.Items))
		})
	})
}

// unifiedLine is the cgroup v2 line ("0::/…") of a /proc/<pid>/cgroup.
func unifiedLine(cgroup string) string {
	for _, l := range strings.Split(cgroup, "\n") {
		if strings.HasPrefix(l, "0::") {
			return l
		}
	}
	return cgroup
}

// fixedSize hands out one terminal size.
type fixedSize struct {
	size remotecommand.TerminalSize
	sent bool
}

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	if f.sent {
		return nil // no more resizes
	}
	f.sent = true
	return &f.size
}
