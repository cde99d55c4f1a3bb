package apps

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func startWhereami(t *testing.T, cfg WhereamiConfig) (tcp, udp net.Addr) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan [2]net.Addr, 1)
	cfg.Address = "127.0.0.1"
	cfg.Ready = func(tcp, udp net.Addr) { ready <- [2]net.Addr{tcp, udp} }
	done := make(chan error, 1)
	go func() { done <- RunWhereami(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunWhereami: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a[0], a[1]
	case err := <-done:
		t.Fatalf("RunWhereami returned early: %v", err)
	}
	return nil, nil
}

func TestWhereamiHTTP(t *testing.T) {
	tcp, _ := startWhereami(t, WhereamiConfig{Cluster: "c1", Namespace: "kubecon", Pod: "whereami-1", Node: "n0"})
	// Dial ourselves so we know the client address the server must see.
	conn, err := net.Dial("tcp", tcp.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}}
	resp, err := client.Get("http://" + tcp.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}
	var id Identity
	if err := json.NewDecoder(resp.Body).Decode(&id); err != nil {
		t.Fatal(err)
	}
	want := Identity{Cluster: "c1", Namespace: "kubecon", Pod: "whereami-1", Node: "n0", PodIP: "127.0.0.1", Client: conn.LocalAddr().String()}
	if id != want {
		t.Errorf("reply %+v, want %+v", id, want)
	}
}

func TestWhereamiHealthz(t *testing.T) {
	tcp, _ := startWhereami(t, WhereamiConfig{Cluster: "c1", PodIP: "10.244.0.5"})
	resp, err := http.Get("http://" + tcp.String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != "ok" {
		t.Errorf("healthz: %d %q", resp.StatusCode, b)
	}
}

func TestWhereamiUDP(t *testing.T) {
	_, udp := startWhereami(t, WhereamiConfig{Cluster: "c2", Namespace: "ns", Pod: "p", PodIP: "10.244.1.7"})
	c, err := net.Dial("udp", udp.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	var id Identity
	if err := json.Unmarshal(buf[:n], &id); err != nil {
		t.Fatalf("%q: %v", buf[:n], err)
	}
	want := Identity{Cluster: "c2", Namespace: "ns", Pod: "p", PodIP: "10.244.1.7", Client: c.LocalAddr().String(), Echo: "hello"}
	if id != want {
		t.Errorf("reply %+v, want %+v", id, want)
	}
}

func TestWhereamiPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = RunWhereami(context.Background(), WhereamiConfig{Address: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port})
	if err == nil || !strings.Contains(err.Error(), "listen tcp") {
		t.Errorf("got %v, want a listen error", err)
	}
}

func TestRunClientStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunClient(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("RunClient returned before cancel: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRegistry(t *testing.T) {
	r := NewRegistry("/usr/bin/causeway-lab")
	c := Container{Cluster: "c1", Node: "n0", Namespace: "kubecon", Pod: "w-1", PodIP: "10.244.0.2", Ports: []int32{80}}
	cmd, err := r.Command(ImageWhereami+":latest", c)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"app", "whereami", "--port", "80", "--cluster", "c1", "--namespace", "kubecon", "--pod", "w-1", "--node", "n0", "--pod-ip", "10.244.0.2"}
	if cmd.Path != "/usr/bin/causeway-lab" || !slices.Equal(cmd.Args, want) {
		t.Errorf("whereami command %s %q, want %q", cmd.Path, cmd.Args, want)
	}
	// The flags the registry passes are exactly the ones AddFlags binds.
	var cfg WhereamiConfig
	fs := newFlagSet()
	cfg.AddFlags(fs)
	if err := fs.Parse(cmd.Args[2:]); err != nil {
		t.Fatalf("parse registry args: %v", err)
	}
	if cfg.Port != 80 || cfg.Cluster != "c1" || cfg.Namespace != "kubecon" || cfg.Pod != "w-1" || cfg.Node != "n0" || cfg.PodIP != "10.244.0.2" {
		t.Errorf("parsed %+v", cfg)
	}

	cmd, err = r.Command(ImageClient+"@sha256:abc", c)
	if err != nil || !slices.Equal(cmd.Args, []string{"app", "client"}) {
		t.Errorf("client: %v %q", err, cmd.Args)
	}

	_, err = r.Command("nginx:1.27", c)
	if !errors.Is(err, ErrUnknownImage) {
		t.Fatalf("unknown image: got %v", err)
	}
	for _, s := range []string{"nginx:1.27", ImageWhereami, ImageClient} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %s", err, s)
		}
	}

	// An unknown image with a command runs it from the host.
	cmd, err = r.Command("busybox:1.36", Container{Command: []string{"sh", "-c"}, Args: []string{"echo hi"}, Env: []string{"A=1"}, WorkingDir: "/tmp"})
	if err != nil || !strings.HasSuffix(cmd.Path, "/sh") || !slices.Equal(cmd.Args, []string{"-c", "echo hi"}) || !slices.Equal(cmd.Env, []string{"A=1"}) || cmd.Dir != "/tmp" {
		t.Errorf("host command: %v %+v", err, cmd)
	}
	// Args without a command replace the image's default command: the
	// lab, knowing no entrypoint, runs them as the command line.
	cmd, err = r.Command("registry.k8s.io/e2e-test-images/busybox:1.36", Container{Args: []string{"sh", "-c", "echo hi"}})
	if err != nil || !strings.HasSuffix(cmd.Path, "/sh") || !slices.Equal(cmd.Args, []string{"-c", "echo hi"}) {
		t.Errorf("args without a command: %v %+v", err, cmd)
	}
	if _, err := r.Command("busybox", Container{Command: []string{"no-such-program-on-this-host"}}); !errors.Is(err, ErrNoHostCommand) || !strings.Contains(err.Error(), "no-such-program-on-this-host") {
		t.Errorf("missing host command: got %v", err)
	}

	r.Register("registry.k8s.io/coredns/coredns:v1.14.7", func(c Container) (Command, error) {
		return Command{Path: "/opt/lab/coredns", Args: c.Args}, nil
	})
	cmd, err = r.Command("registry.k8s.io/coredns/coredns:v1.12.0", Container{Args: []string{"-conf", "/etc/coredns/Corefile"}})
	if err != nil || cmd.Path != "/opt/lab/coredns" || !slices.Equal(cmd.Args, []string{"-conf", "/etc/coredns/Corefile"}) {
		t.Errorf("registered image: %v %+v", err, cmd)
	}
}

func TestImageName(t *testing.T) {
	for in, want := range map[string]string{
		"causeway.dev/lab/whereami":            "causeway.dev/lab/whereami",
		"causeway.dev/lab/whereami:v1":         "causeway.dev/lab/whereami",
		"causeway.dev/lab/whereami@sha256:ab":  "causeway.dev/lab/whereami",
		"causeway.dev/lab/whereami:v1@sha256:": "causeway.dev/lab/whereami",
		"localhost:5000/x":                     "localhost:5000/x",
		"localhost:5000/x:tag":                 "localhost:5000/x",
		"busybox":                              "busybox",
	} {
		if got := ImageName(in); got != want {
			t.Errorf("ImageName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBinariesIn(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "route-agent"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := NewRegistry("/usr/bin/causeway-lab")
	r.RegisterBinaries("ghcr.io/causeway-net/causeway", "/usr/local/bin", dir)
	// kubectl exec: the image's programs are the host's copies, by path
	// or bare name; anything else comes from the host's PATH.
	for name, want := range map[string]string{"/usr/local/bin/route-agent": filepath.Join(dir, "route-agent"), "route-agent": filepath.Join(dir, "route-agent")} {
		if p, err := r.ExecPath("ghcr.io/causeway-net/causeway:v1", name); err != nil || p != want {
			t.Errorf("ExecPath(%s) = %q, %v; want %s", name, p, err, want)
		}
	}
	if p, err := r.ExecPath("ghcr.io/causeway-net/causeway:v1", "sh"); err != nil || filepath.Dir(p) == dir {
		t.Errorf("ExecPath(sh) = %q, %v; want the host's sh", p, err)
	}
	if _, err := r.ExecPath("busybox", "/usr/local/bin/route-agent"); err == nil {
		t.Error("ExecPath of another image's program found Causeway's")
	}
	c := Container{Command: []string{"/usr/local/bin/route-agent"}, Args: []string{"--node-name=n0"}, Env: []string{"A=1"}}
	cmd, err := r.Command("ghcr.io/causeway-net/causeway:latest", c)
	if err != nil || cmd.Path != filepath.Join(dir, "route-agent") || !slices.Equal(cmd.Args, []string{"--node-name=n0"}) || !slices.Equal(cmd.Env, []string{"A=1"}) {
		t.Errorf("route-agent: %v %+v", err, cmd)
	}
	for _, command := range [][]string{nil, {"/bin/sh"}, {"/usr/local/bin/../../bin/sh"}, {"/usr/local/bin/gateway"}} {
		if _, err := r.Command("ghcr.io/causeway-net/causeway:v1", Container{Command: command}); err == nil {
			t.Errorf("command %q was accepted", command)
		}
	}
}
