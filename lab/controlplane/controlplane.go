// Package controlplane runs real Kubernetes control planes as local
// processes: etcd, kube-apiserver and, when asked, kube-controller-manager
// and kube-scheduler, each control plane with its own PKI, ports and data
// directory. Tests use it through internal/kubetest; the lab uses it for
// every cluster and the broker.
//
// The binaries come from hack/k8s-binaries.sh, which builds them from the
// Go module proxy into a cache directory (DefaultBinDir).
package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Versions the cache directory is keyed by; hack/k8s-binaries.sh builds
// the same ones.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.3"
)

// DefaultBinDir is $CAUSEWAY_K8S_BIN, or the cache directory
// hack/k8s-binaries.sh fills by default.
func DefaultBinDir() string {
	if d := os.Getenv("CAUSEWAY_K8S_BIN"); d != "" {
		return d
	}
	root := os.Getenv("CAUSEWAY_CACHE")
	if root == "" {
		root = "/var/cache/causeway"
	}
	return filepath.Join(root, "k8s-"+KubernetesVersion+"-etcd-"+EtcdVersion)
}

// Component is an optional control-plane process.
type Component string

// The optional components.
const (
	ControllerManager Component = "kube-controller-manager"
	Scheduler         Component = "kube-scheduler"
)

// Config describes one control plane.
type Config struct {
	// Name names the control plane in logs and certificates ("c1", "broker").
	Name string
	// Dir holds its PKI, etcd data, kubeconfigs and logs; it survives
	// Stop so a later Start reuses certificates and data.
	Dir string
	// BinDir holds the binaries (DefaultBinDir when empty).
	BinDir string
	// ServiceCIDR is --service-cluster-ip-range (default 10.96.0.0/16).
	ServiceCIDR string
	// ClusterCIDR is the pod CIDR given to kube-controller-manager.
	ClusterCIDR string
	// Components to run beside etcd and kube-apiserver.
	Components []Component
	// ClusterEgress sends the API server's traffic to the cluster
	// (kubelets for logs, exec and port-forward; pod, service and node
	// proxies) through an HTTP CONNECT proxy on the Unix socket
	// EgressSocket (<Dir>/egress.sock), which another process serves: the
	// lab's nodes live in network namespaces the API server cannot reach
	// directly.
	ClusterEgress bool
	// ServingIPs are further addresses the API server's serving
	// certificate is valid for, besides 127.0.0.1 (where clients reach it
	// through a forwarder, e.g. the lab's pods).
	ServingIPs []net.IP
	// Detach starts processes in their own session, so they outlive the
	// caller (the lab); otherwise they die with the caller (tests).
	Detach bool
	// Log receives progress; discarded when nil.
	Log *slog.Logger
}

// ControlPlane is a started control plane.
type ControlPlane struct {
	cfg   Config
	pki   *PKI
	procs []*Process

	// URL is the API server's https URL on 127.0.0.1.
	URL string
	// EtcdURL is etcd's client URL on 127.0.0.1 (plain http; it also
	// serves etcd's /metrics).
	EtcdURL string
	// etcdPeerURL is the peer URL this control plane's etcd advertises:
	// what tells it apart from another etcd answering at EtcdURL.
	etcdPeerURL string
	// AdminKubeconfig is the path of a kubeconfig for system:masters.
	AdminKubeconfig string
}

// Prepare writes the control plane's PKI, kubeconfigs and port choices
// into cfg.Dir (reusing what is there) and returns its processes in start
// order without starting them: the lab's supervisor runs them itself.
func Prepare(cfg Config) (*ControlPlane, []ProcessConfig, error) {
	if cfg.Name == "" || cfg.Dir == "" {
		return nil, nil, errors.New("controlplane: Name and Dir are required")
	}
	if cfg.BinDir == "" {
		cfg.BinDir = DefaultBinDir()
	}
	if cfg.ServiceCIDR == "" {
		cfg.ServiceCIDR = "10.96.0.0/16"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	for _, bin := range append([]string{"etcd", "kube-apiserver"}, componentNames(cfg.Components)...) {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, bin)); err != nil {
			return nil, nil, fmt.Errorf("controlplane: %s not found in %s (run hack/k8s-binaries.sh): %w", bin, cfg.BinDir, err)
		}
	}
	for _, d := range []string{"pki", "logs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o700); err != nil {
			return nil, nil, fmt.Errorf("controlplane %s: %w", cfg.Name, err)
		}
	}
	ports, err := loadOrPickPorts(filepath.Join(cfg.Dir, "ports"), 3)
	if err != nil {
		return nil, nil, fmt.Errorf("controlplane %s: ports: %w", cfg.Name, err)
	}
	cp := newControlPlane(cfg, ports)
	if cp.pki, err = NewPKI(filepath.Join(cfg.Dir, "pki"), cfg.Name, cfg.ServingIPs); err != nil {
		return nil, nil, err
	}
	if cp.AdminKubeconfig, err = cp.pki.Kubeconfig(cp.URL, "admin", "admin", []string{"system:masters"}); err != nil {
		return nil, nil, err
	}
	apiserver, err := cp.apiserver(ports[2])
	if err != nil {
		return nil, nil, err
	}
	procs := []ProcessConfig{cp.etcd(), apiserver}
	for _, c := range cfg.Components {
		pc, err := cp.component(c)
		if err != nil {
			return nil, nil, err
		}
		procs = append(procs, pc)
	}
	return cp, procs, nil
}

// Start brings a control plane up and waits until the API server is ready
// (bounded by ctx). On failure everything it started is stopped again.
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	cp, procs, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	var apiserver *Process
	for i, pc := range procs {
		pc.Detach = cfg.Detach
		p, err := StartProcess(pc)
		if err != nil {
			return nil, fmt.Errorf("controlplane %s: %w", cp.cfg.Name, err)
		}
		cp.procs = append(cp.procs, p)
		if i == 1 {
			apiserver = p
			if err := cp.waitReady(ctx, apiserver); err != nil {
				return nil, err
			}
		}
	}
	cp.cfg.Log.Info("control plane ready", "name", cp.cfg.Name, "url", cp.URL)
	return cp, nil
}

// WaitReady polls the API server's /readyz until it answers 200 or ctx ends.
func (cp *ControlPlane) WaitReady(ctx context.Context) error { return cp.waitReady(ctx, nil) }

// Adopt returns a handle on a control plane a previous Start left running
// detached in cfg.Dir (the lab's later commands use it), without starting
// anything.
func Adopt(cfg Config) (*ControlPlane, error) {
	ports, err := readPorts(filepath.Join(cfg.Dir, "ports"))
	if err != nil || len(ports) < 3 {
		return nil, fmt.Errorf("controlplane %s: not started in %s", cfg.Name, cfg.Dir)
	}
	pki, err := NewPKI(filepath.Join(cfg.Dir, "pki"), cfg.Name, cfg.ServingIPs)
	if err != nil {
		return nil, err
	}
	cp := newControlPlane(cfg, ports)
	cp.pki = pki
	if cp.AdminKubeconfig, err = pki.Kubeconfig(cp.URL, "admin", "admin", []string{"system:masters"}); err != nil {
		return nil, err
	}
	return cp, nil
}

// newControlPlane is the handle of a control plane on ports (etcd client,
// etcd peer, API server), without PKI.
func newControlPlane(cfg Config, ports []int) *ControlPlane {
	return &ControlPlane{cfg: cfg,
		URL:         fmt.Sprintf("https://127.0.0.1:%d", ports[2]),
		EtcdURL:     fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		etcdPeerURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
	}
}

// RESTConfig is an admin client configuration.
func (cp *ControlPlane) RESTConfig() (*rest.Config, error) {
	return cp.UserConfig("admin", []string{"system:masters"})
}

// UserConfig is a client configuration for a certificate identity with
// the given user name and groups (RBAC applies unless system:masters).
func (cp *ControlPlane) UserConfig(user string, groups []string) (*rest.Config, error) {
	path, err := cp.UserKubeconfig(user, groups)
	if err != nil {
		return nil, err
	}
	return restConfigFromFile(path)
}

// UserKubeconfig writes (once) and returns the path of a kubeconfig for a
// certificate identity.
func (cp *ControlPlane) UserKubeconfig(user string, groups []string) (string, error) {
	return cp.pki.Kubeconfig(cp.URL, "user-"+user, user, groups)
}

// TokenKubeconfig writes a kubeconfig at path that reaches server (which
// may differ from URL, e.g. through a forwarder) with a bearer token.
func (cp *ControlPlane) TokenKubeconfig(path, server, token string) error {
	return cp.pki.tokenKubeconfig(path, server, token)
}

// CACertFile is the cluster CA's certificate path.
func (cp *ControlPlane) CACertFile() string { return cp.pki.CA.CertFile }

// Dir is the control plane's state directory.
func (cp *ControlPlane) Dir() string { return cp.cfg.Dir }

// Process is the running process of bin ("etcd", "kube-apiserver", or a
// component's binary) that this handle started, nil if none (a control
// plane adopted with Adopt, or stopped). Tests signal it to simulate
// faults, e.g. SIGSTOP to freeze the API server.
func (cp *ControlPlane) Process(bin string) *Process {
	for _, p := range cp.procs {
		if p.cfg.Name == cp.cfg.Name+"/"+bin {
			return p
		}
	}
	return nil
}

// Stop stops every process this handle started, newest first.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].Stop(5 * time.Second)
	}
	cp.procs = nil
}

func (cp *ControlPlane) etcd() ProcessConfig {
	client, peer := cp.EtcdURL, cp.etcdPeerURL
	return cp.process("etcd",
		"--name=default",
		"--data-dir="+filepath.Join(cp.cfg.Dir, "etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=default="+peer,
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
}

func (cp *ControlPlane) apiserver(apiPort int) (ProcessConfig, error) {
	p := cp.pki
	args := []string{
		"--etcd-servers=" + cp.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--cert-dir=" + filepath.Join(cp.cfg.Dir, "pki"),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CA.CertFile,
		"--service-account-key-file=" + p.SAPublic,
		"--service-account-signing-key-file=" + p.SAPrivate,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=" + cp.cfg.ServiceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--profiling=false",
		// Kubelets (logs, exec, port-forward) are dialled at their
		// InternalIP, verified against the cluster CA, with a client
		// certificate of the cluster CA.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--kubelet-certificate-authority=" + p.CA.CertFile,
		"--kubelet-client-certificate=" + p.KubeletClientCert,
		"--kubelet-client-key=" + p.KubeletClientKey,
	}
	if cp.cfg.ClusterEgress {
		file, err := cp.writeEgressConfig()
		if err != nil {
			return ProcessConfig{}, err
		}
		args = append(args, "--egress-selector-config-file="+file)
	}
	return cp.process("kube-apiserver", args...), nil
}

// EgressSocket is the Unix socket where the API server expects the HTTP
// CONNECT proxy to the cluster when Config.ClusterEgress is set.
func (cp *ControlPlane) EgressSocket() string { return filepath.Join(cp.cfg.Dir, "egress.sock") }

// writeEgressConfig writes the API server's EgressSelectorConfiguration:
// traffic to the cluster goes through HTTP CONNECT on EgressSocket.
func (cp *ControlPlane) writeEgressConfig() (string, error) {
	sock := cp.EgressSocket()
	// sun_path holds 108 bytes including the terminating NUL.
	if len(sock) > 107 {
		return "", fmt.Errorf("controlplane %s: egress socket path %s is longer than a Unix socket path may be", cp.cfg.Name, sock)
	}
	cfg := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, sock)
	file := filepath.Join(cp.cfg.Dir, "egress-selector.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		return "", fmt.Errorf("controlplane %s: egress selector configuration: %w", cp.cfg.Name, err)
	}
	return file, nil
}

// KubeletServingCert issues (once) a kubelet's serving certificate from
// the cluster CA, valid for the node's addresses and name, and returns
// its paths. The API server verifies kubelets against this CA.
func (cp *ControlPlane) KubeletServingCert(node string, ips []net.IP) (certFile, keyFile string, err error) {
	return cp.pki.CA.Issue(cp.pki.Dir, "kubelet-"+node, CertSpec{
		CommonName: "system:node:" + node,
		DNSNames:   []string{node},
		IPs:        ips,
		Server:     true,
	})
}

func (cp *ControlPlane) component(c Component) (ProcessConfig, error) {
	kubeconfig, err := cp.UserKubeconfig(string(c), []string{"system:masters"})
	if err != nil {
		return ProcessConfig{}, err
	}
	args := []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0"}
	if c == ControllerManager {
		args = append(args,
			"--service-account-private-key-file="+cp.pki.SAPrivate,
			"--root-ca-file="+cp.pki.CA.CertFile,
			"--service-cluster-ip-range="+cp.cfg.ServiceCIDR,
			"--use-service-account-credentials=false",
			// Lab nodes heartbeat from a small process: tolerate a
			// missed beat or two before marking them NotReady.
			"--node-monitor-grace-period=40s",
		)
		if cp.cfg.ClusterCIDR != "" {
			args = append(args, "--cluster-cidr="+cp.cfg.ClusterCIDR)
		}
	}
	return cp.process(string(c), args...), nil
}

func (cp *ControlPlane) process(bin string, args ...string) ProcessConfig {
	return ProcessConfig{
		Name:    cp.cfg.Name + "/" + bin,
		Path:    filepath.Join(cp.cfg.BinDir, bin),
		Args:    args,
		LogFile: filepath.Join(cp.cfg.Dir, "logs", bin+".log"),
		PIDFile: filepath.Join(cp.cfg.Dir, bin+".pid"),
	}
}

func (cp *ControlPlane) waitReady(ctx context.Context, apiserver *Process) error {
	cfg, err := cp.RESTConfig()
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.URL+"/readyz", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cp.checkEtcd(ctx)
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if apiserver != nil && apiserver.Exited() {
			return fmt.Errorf("controlplane %s: kube-apiserver exited: %s", cp.cfg.Name, apiserver.LogTail(2048))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controlplane %s: kube-apiserver not ready (%s): %w\n%s", cp.cfg.Name, last, ctx.Err(), apiserver.LogTail(2048))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkEtcd fails unless the etcd answering at EtcdURL is this control
// plane's: another process that took its client port (this one's etcd then
// cannot bind it) would give the API server that process's data.
func (cp *ControlPlane) checkEtcd(ctx context.Context) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cp.EtcdURL+"/v3/cluster/member/list", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("controlplane %s: etcd members: %w", cp.cfg.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("controlplane %s: etcd members: %s", cp.cfg.Name, resp.Status)
	}
	var list struct {
		Members []struct {
			PeerURLs []string `json:"peerURLs"`
		} `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return fmt.Errorf("controlplane %s: etcd members: %w", cp.cfg.Name, err)
	}
	var peers []string
	for _, m := range list.Members {
		peers = append(peers, m.PeerURLs...)
	}
	if !slices.Contains(peers, cp.etcdPeerURL) {
		return fmt.Errorf("controlplane %s: the etcd at %s is not this control plane's (its peers %v, want %s): another process holds the port", cp.cfg.Name, cp.EtcdURL, peers, cp.etcdPeerURL)
	}
	return nil
}

func componentNames(cs []Component) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

// loadOrPickPorts reuses the ports recorded in file, or picks n free
// loopback ports and records them. A port is free only while it is
// picked: the processes bind it later. So the ports recorded by the
// control planes beside this one (files of the same name in the sibling
// directories: a lab prepares all its control planes before starting any)
// are never picked again.
func loadOrPickPorts(file string, n int) ([]int, error) {
	if ports, err := readPorts(file); err == nil && len(ports) == n {
		return ports, nil
	}
	taken, err := siblingPorts(file)
	if err != nil {
		return nil, err
	}
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for len(ports) < n {
		ln, err := listenBelowEphemeral()
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		if port := ln.Addr().(*net.TCPAddr).Port; !taken[port] {
			ports = append(ports, port)
		}
	}
	var b []byte
	for _, p := range ports {
		b = strconv.AppendInt(b, int64(p), 10)
		b = append(b, '\n')
	}
	return ports, os.WriteFile(file, b, 0o600)
}

// siblingPorts are the ports recorded in the files named like file in the
// directories beside file's directory.
func siblingPorts(file string) (map[int]bool, error) {
	dir := filepath.Dir(file)
	files, err := filepath.Glob(filepath.Join(filepath.Dir(dir), "*", filepath.Base(file)))
	if err != nil {
		return nil, err
	}
	taken := map[int]bool{}
	for _, f := range files {
		if filepath.Dir(f) == dir {
			continue
		}
		ports, err := readPorts(f)
		if err != nil {
			return nil, err
		}
		for _, p := range ports {
			taken[p] = true
		}
	}
	return taken, nil
}

// portFloor is the lowest port listenBelowEphemeral picks.
const portFloor = 10000

// listenBelowEphemeral listens on a free loopback port below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range). The server started on it
// binds it only after this listener is closed; a port of the ephemeral
// range (what ":0" picks from) can meanwhile become any process's
// connection source port, and etcd or kube-apiserver then fails with
// "address already in use". Below the range only another listener can
// take it. Without room below the range it falls back to ":0".
func listenBelowEphemeral() (net.Listener, error) {
	low := ephemeralLow()
	if low-portFloor < 1000 {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	var err error
	for range 100 {
		port := portFloor + rand.IntN(low-portFloor)
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return ln, nil
		}
	}
	return nil, fmt.Errorf("no free loopback port in %d-%d: %w", portFloor, low-1, err)
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768,
// Linux's default, when it cannot be read).
func ephemeralLow() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return linuxDefault
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return linuxDefault
	}
	return low
}

func readPorts(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// KubeconfigAt writes (once) a kubeconfig named file for a certificate
// identity that reaches the API server at server (for example through a
// forwarder inside a node's network namespace) and returns its path.
func (cp *ControlPlane) KubeconfigAt(file, server, user string, groups []string) (string, error) {
	return cp.pki.Kubeconfig(server, file, user, groups)
}
