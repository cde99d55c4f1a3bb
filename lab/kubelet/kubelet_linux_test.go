package kubelet

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/netlab"
)

// TestMain lets the test binary act as causeway-lab for the built-in
// images: the apps registry (built with os.Executable() as self) starts
// `<self> app whereami …`, which lands here instead of in the tests.
func TestMain(m *testing.M) {
	if len(os.Args) >= 3 && os.Args[1] == "app" {
		os.Exit(runApp(os.Args[2], os.Args[3:]))
	}
	os.Exit(m.Run())
}

func runApp(name string, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch name {
	case "whereami":
		var cfg apps.WhereamiConfig
		fs := pflag.NewFlagSet("whereami", pflag.ContinueOnError)
		cfg.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		err = apps.RunWhereami(ctx, cfg)
	case "client":
		err = apps.RunClient(ctx)
	default:
		err = fmt.Errorf("unknown app %q", name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root: creates network namespaces and cgroups")
	}
}

// lab is one cluster with a real API server, a netlab host with a fresh
// prefix and running kubelets.
type lab struct {
	t       *testing.T
	cp      *kubetest.Cluster
	kube    kubernetes.Interface
	host    *netlab.Host
	cluster netlab.Cluster
	reg     *apps.Registry
	dir     string
	stops   map[string]func()
	// realPeriods runs kubelets with the default heartbeat periods.
	realPeriods bool
	// hostPaths is the kubelets' Config.HostPaths.
	hostPaths map[string]string
	// api makes kubelets serve the kubelet API and n0's serve the API
	// server's egress (the control plane needs WithClusterEgress).
	api bool
}

const testNS = "kt"

func newLab(t *testing.T, nodes int, opts ...kubetest.Option) *lab {
	requireRoot(t)
	cp := startControlPlane(t, opts...) // stopped last (cleanups run in reverse)
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := netlab.NewHost(netlab.Config{Prefix: "cwt" + hex.EncodeToString(b[:]) + "-", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := h.Teardown(); err != nil {
			t.Errorf("teardown: %v", err)
		}
		left, err := h.Leftovers()
		if err != nil {
			t.Errorf("leftovers: %v", err)
		}
		if !left.Empty() {
			t.Errorf("left behind after teardown: %s", left)
		}
	})
	c, err := netlab.NewCluster(netlab.ClusterSpec{Name: "c1", Index: 1, Nodes: nodes, Gateways: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Apply(netlab.Topology{Prefix: h.Names().Prefix, WAN: netlab.DefaultWAN, Clusters: []netlab.Cluster{c}}); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	reg := apps.NewRegistry(self)
	reg.Register("test.lab/exit", func(c apps.Container) (apps.Command, error) {
		code := "0"
		if len(c.Args) > 0 {
			code = c.Args[0]
		}
		return apps.Command{Path: "/bin/sh", Args: []string{"-c", "exit " + code}}, nil
	})
	// Ignores SIGTERM (and so does its sleep child, in the same process
	// group): only SIGKILL after the grace period ends it.
	reg.Register("test.lab/stubborn", func(c apps.Container) (apps.Command, error) {
		return apps.Command{Path: "/bin/sh", Args: []string{"-c", `trap "" TERM; while :; do sleep 1; done`}}, nil
	})
	l := &lab{t: t, cp: cp, kube: cp.Kube, host: h, cluster: c, reg: reg, dir: t.TempDir(), stops: map[string]func(){}}
	t.Cleanup(func() {
		for _, stop := range l.stops {
			stop()
		}
	})
	ctx := context.Background()
	// No kube-controller-manager here: make the default ServiceAccount
	// the ServiceAccount admission plugin looks for. (Retried: a fresh
	// API server may still drop a connection.)
	eventually(t, "test namespace and service account", func() (bool, string) {
		_, err := l.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err.Error()
		}
		_, err = l.kube.CoreV1().ServiceAccounts(testNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err.Error()
		}
		return true, ""
	})
	return l
}

// startControlPlane starts the API server (and components) from an OS
// thread that lives until the control plane is stopped. pkg/controlplane
// gives test children Pdeathsig=SIGKILL, which the kernel sends when the
// *thread* that forked them exits, and netlab deliberately discards the
// OS threads it switches into namespaces (Host.Start): started from an
// arbitrary Go thread, the API server could be killed the moment the
// kubelet starts a pod.
func startControlPlane(t *testing.T, opts ...kubetest.Option) *kubetest.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a real kube-apiserver; skipped under -short")
	}
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // runs after the control plane's own cleanup
	res := make(chan *kubetest.Cluster, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the test
		var c *kubetest.Cluster
		defer func() { res <- c }() // also on t.Fatal (Goexit) inside Start
		c = kubetest.Start(t, "c1", opts...)
		res <- c
		c = nil
		<-release
	}()
	c := <-res
	if c == nil {
		t.FailNow()
	}
	return c
}

// testClusterDNS is the cluster DNS address the test kubelets give pods.
var testClusterDNS = netip.MustParseAddr("10.96.0.10")

// startKubelet runs the kubelet of node until stopKubelet or the test's end.
func (l *lab) startKubelet(node string) {
	l.t.Helper()
	n, ok := l.cluster.Node(node)
	if !ok {
		l.t.Fatalf("no node %s", node)
	}
	cfg := Config{
		Client:       l.kube,
		Host:         l.host,
		Cluster:      l.cluster,
		Node:         n,
		Apps:         l.reg,
		ClusterDNS:   testClusterDNS,
		StateDir:     filepath.Join(l.dir, node),
		Log:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("test", l.t.Name()),
		HostPaths:    l.hostPaths,
		LeasePeriod:  time.Second,
		StatusPeriod: 2 * time.Second,
		ResyncPeriod: 2 * time.Second,
	}
	if l.realPeriods {
		cfg.LeasePeriod, cfg.StatusPeriod, cfg.ResyncPeriod = 0, 0, 0
	}
	if l.api {
		cert, key, err := l.cp.KubeletServingCert(node, []net.IP{n.Address.Addr().AsSlice()})
		if err != nil {
			l.t.Fatal(err)
		}
		cfg.Serving = &Serving{CertFile: cert, KeyFile: key, ClientCAFile: l.cp.CACertFile(), ClientUser: controlplane.KubeletClientUser}
		if node == "n0" {
			cfg.EgressSocket = l.cp.EgressSocket()
		}
	}
	if n.Gateway() {
		cfg.Labels = map[string]string{"causeway.dev/gateway": "true"}
		cfg.APIServerForward = strings.TrimPrefix(l.cp.URL, "https://")
	}
	k, err := New(cfg)
	if err != nil {
		l.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	l.stops[node] = func() {
		cancel()
		if err := <-done; err != nil {
			l.t.Errorf("kubelet %s: %v", node, err)
		}
		delete(l.stops, node)
	}
}

func (l *lab) stopKubelet(node string) { l.stops[node]() }

// eventually polls cond until it reports true, failing with its last
// message after a generous deadline (the lab is eventually consistent;
// this bounds a hang, it measures nothing).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var msg string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, msg = cond(); ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: still not so: %s", what, msg)
}

func (l *lab) pod(name string) (*corev1.Pod, error) {
	return l.kube.CoreV1().Pods(testNS).Get(context.Background(), name, metav1.GetOptions{})
}

func (l *lab) createPod(p *corev1.Pod) {
	l.t.Helper()
	p.Namespace = testNS
	p.Spec.AutomountServiceAccountToken = ptrTo(false)
	if p.Spec.TerminationGracePeriodSeconds == nil {
		p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(5))
	}
	if _, err := l.kube.CoreV1().Pods(testNS).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		l.t.Fatal(err)
	}
}

func whereamiPod(name, node string, port int32) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: apps.ImageWhereami + ":v1",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

func podCondition(p *corev1.Pod, t corev1.PodConditionType) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return ""
}

// runningReady waits for the pod to be Running and Ready and returns it.
func (l *lab) runningReady(name string) *corev1.Pod {
	l.t.Helper()
	var pod *corev1.Pod
	eventually(l.t, "pod "+name+" running and ready", func() (bool, string) {
		p, err := l.pod(name)
		if err != nil {
			return false, err.Error()
		}
		pod = p
		ok := p.Status.Phase == corev1.PodRunning && podCondition(p, corev1.PodReady) == corev1.ConditionTrue
		return ok, fmt.Sprintf("phase %s, ready %s, containers %+v", p.Status.Phase, podCondition(p, corev1.PodReady), p.Status.ContainerStatuses)
	})
	return pod
}

// get does an HTTP GET from inside a namespace.
func (l *lab) get(netns, url string) (*http.Response, []byte, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := l.host.Do(netns, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (l *lab) whereami(netns, addr string) (apps.Identity, error) {
	resp, body, err := l.get(netns, "http://"+addr+"/")
	if err != nil {
		return apps.Identity{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return apps.Identity{}, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	var id apps.Identity
	err = json.Unmarshal(body, &id)
	return id, err
}

func pidOf(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: %d container statuses", p.Name, len(p.Status.ContainerStatuses))
	}
	id := p.Status.ContainerStatuses[0].ContainerID
	pid, err := strconv.Atoi(strings.TrimPrefix(id, "lab://"))
	if !strings.HasPrefix(id, "lab://") || err != nil || pid <= 0 {
		t.Fatalf("pod %s: container ID %q, want lab://<pid>", p.Name, id)
	}
	return pid
}

// TestKubelet runs two kubelets against a real API server and goes
// through a pod's life: registration, a whereami pod reached from
// another pod on another node, a bad image, a crash and restart, host
// networking, the API server forwarder, a kubelet restart adopting its
// pods, finished pods and deletion.
func TestKubelet(t *testing.T) {
	l := newLab(t, 2)
	l.startKubelet("n0")
	l.startKubelet("n1")
	ctx := context.Background()

	t.Run("NodeRegistered", func(t *testing.T) {
		var node *corev1.Node
		eventually(t, "node n0 ready", func() (bool, string) {
			n, err := l.kube.CoreV1().Nodes().Get(ctx, "n0", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			node = n
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue, string(c.Status)
				}
			}
			return false, "no Ready condition"
		})
		if node.Spec.PodCIDR != "10.244.0.0/24" || !slices.Equal(node.Spec.PodCIDRs, []string{"10.244.0.0/24"}) {
			t.Errorf("pod CIDR %q %v, want 10.244.0.0/24", node.Spec.PodCIDR, node.Spec.PodCIDRs)
		}
		for k, v := range map[string]string{"kubernetes.io/hostname": "n0", "kubernetes.io/os": "linux", "causeway.dev/gateway": "true"} {
			if node.Labels[k] != v {
				t.Errorf("label %s=%q, want %q", k, node.Labels[k], v)
			}
		}
		addrs := map[corev1.NodeAddressType]string{}
		for _, a := range node.Status.Addresses {
			addrs[a.Type] = a.Address
		}
		if addrs[corev1.NodeInternalIP] != "172.18.1.10" || addrs[corev1.NodeHostName] != "n0" || addrs[corev1.NodeExternalIP] != "198.18.1.10" {
			t.Errorf("addresses %v", node.Status.Addresses)
		}
		if q := node.Status.Capacity[corev1.ResourcePods]; q.Value() != MaxPods {
			t.Errorf("pod capacity %s", q.String())
		}
		if q := node.Status.Allocatable[corev1.ResourceMemory]; q.Value() <= 0 {
			t.Errorf("allocatable memory %s", q.String())
		}
		if node.Status.NodeInfo.KubeletVersion != Version || node.Status.NodeInfo.OperatingSystem != "linux" {
			t.Errorf("node info %+v", node.Status.NodeInfo)
		}
		n1, err := l.kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err == nil && n1.Labels["causeway.dev/gateway"] != "" {
			t.Errorf("n1 is no gateway but has the label")
		}

		// The lease exists and is renewed.
		var first time.Time
		eventually(t, "lease of n0", func() (bool, string) {
			le, err := l.kube.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, "n0", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if le.Spec.HolderIdentity == nil || *le.Spec.HolderIdentity != "n0" || le.Spec.RenewTime == nil {
				return false, fmt.Sprintf("lease spec %+v", le.Spec)
			}
			if len(le.OwnerReferences) != 1 || le.OwnerReferences[0].UID != node.UID {
				return false, fmt.Sprintf("owner %+v", le.OwnerReferences)
			}
			first = le.Spec.RenewTime.Time
			return true, ""
		})
		eventually(t, "lease renewed", func() (bool, string) {
			le, err := l.kube.CoordinationV1().Leases(NodeLeaseNamespace).Get(ctx, "n0", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return le.Spec.RenewTime.After(first), le.Spec.RenewTime.String()
		})
	})

	var web *corev1.Pod
	t.Run("WhereamiReachedFromAnotherPod", func(t *testing.T) {
		l.createPod(whereamiPod("web", "n0", 8080))
		l.createPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "client"},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: apps.ImageClient}}},
		})
		web = l.runningReady("web")
		client := l.runningReady("client")
		ip, err := netip.ParseAddr(web.Status.PodIP)
		if err != nil || !netip.MustParsePrefix("10.244.0.0/24").Contains(ip) {
			t.Fatalf("web pod IP %q not in n0's slice", web.Status.PodIP)
		}
		if web.Status.HostIP != "172.18.1.10" || len(web.Status.PodIPs) != 1 || web.Status.StartTime == nil {
			t.Errorf("status %+v", web.Status)
		}
		cs := web.Status.ContainerStatuses[0]
		if cs.State.Running == nil || !cs.Ready || cs.RestartCount != 0 || cs.Image != apps.ImageWhereami+":v1" || cs.ImageID == "" {
			t.Errorf("container status %+v", cs)
		}
		for _, ct := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			if podCondition(web, ct) != corev1.ConditionTrue {
				t.Errorf("condition %s is %q", ct, podCondition(web, ct))
			}
		}
		cip := netip.MustParseAddr(client.Status.PodIP)
		if !netip.MustParsePrefix("10.244.1.0/24").Contains(cip) {
			t.Errorf("client pod IP %s not in n1's slice", cip)
		}
		clientNS := l.host.Names().Pod("c1", "n1", testNS, "client")
		id, err := l.whereami(clientNS, net.JoinHostPort(web.Status.PodIP, "8080"))
		if err != nil {
			t.Fatal(err)
		}
		if id.Pod != "web" || id.Namespace != testNS || id.Cluster != "c1" || id.Node != "n0" || id.PodIP != web.Status.PodIP || !strings.HasPrefix(id.Client, client.Status.PodIP+":") {
			t.Errorf("whereami said %+v", id)
		}
		if _, err := os.Stat(filepath.Join(l.dir, "n0", "pods", testNS+"_web", "app.log")); err != nil {
			t.Errorf("container log: %v", err)
		}
	})

	t.Run("UnknownImage", func(t *testing.T) {
		l.createPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "bad"},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "example.com/nothing/here:1.0"}}},
		})
		eventually(t, "bad image reported", func() (bool, string) {
			p, err := l.pod("bad")
			if err != nil {
				return false, err.Error()
			}
			if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
				return false, fmt.Sprintf("%+v", p.Status.ContainerStatuses)
			}
			w := p.Status.ContainerStatuses[0].State.Waiting
			return w.Reason == ReasonErrImagePull && strings.Contains(w.Message, "example.com/nothing/here") && p.Status.Phase == corev1.PodPending,
				fmt.Sprintf("phase %s, waiting %+v", p.Status.Phase, w)
		})
	})

	t.Run("RestartAfterKill", func(t *testing.T) {
		if web == nil {
			t.Skip("needs the web pod of WhereamiReachedFromAnotherPod")
		}
		pid := pidOf(t, web)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, "web restarted and ready", func() (bool, string) {
			p, err := l.pod("web")
			if err != nil {
				return false, err.Error()
			}
			cs := p.Status.ContainerStatuses[0]
			last := cs.LastTerminationState.Terminated
			ok := cs.RestartCount == 1 && cs.Ready && cs.State.Running != nil && last != nil && last.ExitCode == 137 &&
				cs.ContainerID != web.Status.ContainerStatuses[0].ContainerID && podCondition(p, corev1.PodReady) == corev1.ConditionTrue
			return ok, fmt.Sprintf("%+v", cs)
		})
		p, _ := l.pod("web")
		if p.Status.PodIP != web.Status.PodIP {
			t.Errorf("pod IP changed on restart: %s → %s", web.Status.PodIP, p.Status.PodIP)
		}
		id, err := l.whereami(l.host.Names().Node("c1", "n0"), net.JoinHostPort(p.Status.PodIP, "8080"))
		if err != nil || id.Pod != "web" {
			t.Errorf("after restart: %+v, %v", id, err)
		}
	})

	t.Run("HostNetwork", func(t *testing.T) {
		p := whereamiPod("hostweb", "n1", 18080)
		p.Spec.HostNetwork = true
		l.createPod(p)
		pod := l.runningReady("hostweb")
		if pod.Status.PodIP != "172.18.1.11" {
			t.Errorf("hostNetwork pod IP %s, want the node's 172.18.1.11", pod.Status.PodIP)
		}
		id, err := l.whereami(l.host.Names().Node("c1", "n0"), "172.18.1.11:18080")
		if err != nil || id.Pod != "hostweb" || id.Node != "n1" {
			t.Errorf("whereami from n0 to n1's address: %+v, %v", id, err)
		}
		pods, err := l.host.PodNetns("c1", "n1")
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(pods, l.host.Names().Pod("c1", "n1", testNS, "hostweb")) {
			t.Errorf("hostNetwork pod got its own namespace: %v", pods)
		}
		// The process sits in the node's namespace.
		var want string
		if err := l.host.Do(l.host.Names().Node("c1", "n1"), func() error {
			var err error
			want, err = os.Readlink("/proc/thread-self/ns/net")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pidOf(t, pod)))
		if err != nil || got != want {
			t.Errorf("hostNetwork process in %s, node namespace is %s (%v)", got, want, err)
		}
	})

	t.Run("APIServerForward", func(t *testing.T) {
		ca, err := os.ReadFile(l.cp.CACertFile())
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			t.Fatal("no CA certificate")
		}
		nodeNS := l.host.Names().Node("c1", "n0")
		var conn *tls.Conn
		eventually(t, "TLS to the API server from n0", func() (bool, string) {
			var raw net.Conn
			err := l.host.Do(nodeNS, func() error {
				var err error
				raw, err = net.DialTimeout("tcp", "127.0.0.1:6443", 5*time.Second)
				return err
			})
			if err != nil {
				return false, err.Error()
			}
			conn = tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
			if err := conn.Handshake(); err != nil {
				raw.Close()
				return false, err.Error()
			}
			return true, ""
		})
		defer conn.Close()
		fmt.Fprintf(conn, "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
			t.Errorf("GET /readyz through the forwarder: %d %q", resp.StatusCode, body)
		}
		// n1 has no forwarder.
		err = l.host.Do(l.host.Names().Node("c1", "n1"), func() error {
			c, err := net.DialTimeout("tcp", "127.0.0.1:6443", 2*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("n1 (no APIServerForward) accepts on 6443")
		}
	})

	t.Run("KubeletRestartAdoptsPods", func(t *testing.T) {
		before := l.runningReady("client")
		pid := pidOf(t, before)
		l.stopKubelet("n1")
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("client process gone after the kubelet stopped: %v", err)
		}
		// A pod namespace nobody knows of (a kubelet's state lost) is
		// removed when the kubelet starts.
		ghost := netlab.Pod{Cluster: "c1", Node: "n1", Namespace: testNS, Name: "ghost", IP: netip.MustParseAddr("10.244.1.200")}
		if err := l.host.EnsurePod(ghost); err != nil {
			t.Fatal(err)
		}
		l.startKubelet("n1")
		eventually(t, "orphaned pod namespace removed", func() (bool, string) {
			pods, err := l.host.PodNetns("c1", "n1")
			_, cgErr := os.Stat(l.host.Cgroups().PodOf(ghost))
			return err == nil && !slices.Contains(pods, l.host.Names().PodOf(ghost)) && os.IsNotExist(cgErr), fmt.Sprint(pods, err, cgErr)
		})
		// Still the same process, no restart, after the new kubelet
		// synced (its lease proves it runs; the status stays).
		time.Sleep(3 * time.Second)
		p := l.runningReady("client")
		cs := p.Status.ContainerStatuses[0]
		if pidOf(t, p) != pid || cs.RestartCount != 0 || p.Status.PodIP != before.Status.PodIP {
			t.Fatalf("after kubelet restart: %+v, podIP %s (was pid %d, %s)", cs, p.Status.PodIP, pid, before.Status.PodIP)
		}
		// The adopted process is still watched: killing it restarts it.
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually(t, "adopted client restarted", func() (bool, string) {
			p, err := l.pod("client")
			if err != nil {
				return false, err.Error()
			}
			cs := p.Status.ContainerStatuses[0]
			last := cs.LastTerminationState.Terminated
			return cs.RestartCount == 1 && cs.State.Running != nil && last != nil && last.Reason == ReasonUnknown, fmt.Sprintf("%+v", cs)
		})
	})

	t.Run("FinishedPods", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			policy corev1.RestartPolicy
			code   string
			phase  corev1.PodPhase
		}{
			{"fails", corev1.RestartPolicyNever, "3", corev1.PodFailed},
			{"succeeds", corev1.RestartPolicyOnFailure, "0", corev1.PodSucceeded},
		} {
			l.createPod(&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: tc.name},
				Spec: corev1.PodSpec{NodeName: "n1", RestartPolicy: tc.policy,
					Containers: []corev1.Container{{Name: "c", Image: "test.lab/exit", Args: []string{tc.code}}}},
			})
			eventually(t, tc.name+" finished", func() (bool, string) {
				p, err := l.pod(tc.name)
				if err != nil {
					return false, err.Error()
				}
				if len(p.Status.ContainerStatuses) != 1 {
					return false, string(p.Status.Phase)
				}
				term := p.Status.ContainerStatuses[0].State.Terminated
				want, _ := strconv.Atoi(tc.code)
				return p.Status.Phase == tc.phase && term != nil && term.ExitCode == int32(want) && podCondition(p, corev1.PodReady) == corev1.ConditionFalse,
					fmt.Sprintf("phase %s, %+v", p.Status.Phase, p.Status.ContainerStatuses[0])
			})
			eventually(t, tc.name+" sandbox removed", func() (bool, string) {
				pods, err := l.host.PodNetns("c1", "n1")
				return err == nil && !slices.Contains(pods, l.host.Names().Pod("c1", "n1", testNS, tc.name)), fmt.Sprint(pods, err)
			})
		}
	})

	t.Run("DeleteKillsAfterGrace", func(t *testing.T) {
		l.createPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "stubborn"},
			Spec: corev1.PodSpec{NodeName: "n1", TerminationGracePeriodSeconds: ptrTo(int64(1)),
				Containers: []corev1.Container{{Name: "c", Image: "test.lab/stubborn"}}},
		})
		pid := pidOf(t, l.runningReady("stubborn"))
		if err := l.kube.CoreV1().Pods(testNS).Delete(ctx, "stubborn", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "stubborn gone from the API", func() (bool, string) {
			_, err := l.pod("stubborn")
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Errorf("process %d still there after the pod went: %v", pid, err)
		}
	})

	t.Run("ForceDeleted", func(t *testing.T) {
		l.createPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "forced"},
			Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: apps.ImageClient}}},
		})
		pid := pidOf(t, l.runningReady("forced"))
		if err := l.kube.CoreV1().Pods(testNS).Delete(ctx, "forced", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
			t.Fatal(err)
		}
		name := l.host.Names().Pod("c1", "n1", testNS, "forced")
		eventually(t, "force-deleted pod cleaned up", func() (bool, string) {
			pods, err := l.host.PodNetns("c1", "n1")
			return err == nil && !slices.Contains(pods, name) && syscall.Kill(pid, 0) == syscall.ESRCH, fmt.Sprint(pods, err)
		})
	})

	t.Run("Delete", func(t *testing.T) {
		if web == nil {
			t.Skip("needs the web pod")
		}
		if err := l.kube.CoreV1().Pods(testNS).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "web gone from the API", func() (bool, string) {
			_, err := l.pod("web")
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		netnsName := l.host.Names().Pod("c1", "n0", testNS, "web")
		pods, err := l.host.PodNetns("c1", "n0")
		if err != nil || slices.Contains(pods, netnsName) {
			t.Errorf("pod namespace still there: %v %v", pods, err)
		}
		cg := l.host.Cgroups().Pod("c1", "n0", testNS, "web")
		if _, err := os.Stat(cg); !os.IsNotExist(err) {
			t.Errorf("pod cgroup %s still there: %v", cg, err)
		}
		if _, err := os.Stat(filepath.Join(l.dir, "n0", "pods", testNS+"_web")); !os.IsNotExist(err) {
			t.Errorf("pod state directory still there: %v", err)
		}
		// A new pod gets an address again; the old one is free.
		l.createPod(whereamiPod("web2", "n0", 8080))
		p := l.runningReady("web2")
		if p.Status.PodIP != web.Status.PodIP {
			t.Errorf("web2 got %s, want web's freed (lowest) address %s", p.Status.PodIP, web.Status.PodIP)
		}
	})
}

// TestKubeletWithControllerManager runs a kubelet with its default
// heartbeat periods beside kube-controller-manager: the node lifecycle
// controller lifts the not-ready taint and keeps the node Ready past its
// grace period (40 s in the lab), the EndpointSlice controller
// publishes the pod's address as a ready endpoint on the node, and a
// DaemonSet (with kube-scheduler) gets its Pod Ready on the node.
func TestKubeletWithControllerManager(t *testing.T) {
	l := newLab(t, 1, kubetest.WithComponents(controlplane.ControllerManager, controlplane.Scheduler))
	l.realPeriods = true
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(l.cp.Dir(), "logs", "kube-controller-manager.log"))
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("kube-controller-manager log (tail):\n%s", b)
			full, _ := os.ReadFile(filepath.Join(l.cp.Dir(), "logs", "kube-controller-manager.log"))
			os.WriteFile("/tmp/kubelet-kcm.log", full, 0o644)
		}
	})
	l.startKubelet("n0")
	ctx := context.Background()

	p := whereamiPod("web", "n0", 8080)
	p.Labels = map[string]string{"app": "web"}
	l.createPod(p)
	_, err := l.kube.CoreV1().Services(testNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := l.runningReady("web")
	eventually(t, "ready endpoint for the pod", func() (bool, string) {
		slices, err := l.kube.DiscoveryV1().EndpointSlices(testNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range slices.Items {
			for _, e := range s.Endpoints {
				if len(e.Addresses) == 1 && e.Addresses[0] == pod.Status.PodIP && e.Conditions.Ready != nil && *e.Conditions.Ready &&
					e.NodeName != nil && *e.NodeName == "n0" && len(s.Ports) == 1 && s.Ports[0].Port != nil && *s.Ports[0].Port == 8080 {
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%+v", slices.Items)
	})

	// kube-controller-manager's DaemonSet controller makes the Pod of a
	// DaemonSet for the node, kube-scheduler binds it there (node
	// affinity), and the kubelet runs it to Ready.
	dsLabels := map[string]string{"app": "ds"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "ds", Namespace: testNS},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: dsLabels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: dsLabels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptrTo(false),
					TerminationGracePeriodSeconds: ptrTo(int64(1)),
					Containers:                    []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"}}},
				},
			},
		},
	}
	if _, err := l.kube.AppsV1().DaemonSets(testNS).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "DaemonSet ready on the node", func() (bool, string) {
		d, err := l.kube.AppsV1().DaemonSets(testNS).Get(ctx, "ds", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.DesiredNumberScheduled == 1 && d.Status.NumberReady == 1, fmt.Sprintf("%+v", d.Status)
	})

	nodeOK := func() (bool, string) {
		n, err := l.kube.CoreV1().Nodes().Get(ctx, "n0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, taint := range n.Spec.Taints {
			if strings.HasPrefix(taint.Key, "node.kubernetes.io/") {
				return false, fmt.Sprintf("taint %s:%s", taint.Key, taint.Effect)
			}
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)
			}
		}
		return false, "no Ready condition"
	}
	eventually(t, "node lifecycle controller lifts the not-ready taint", nodeOK)
	// Watch past the grace period: the node must stay Ready and untainted
	// and the pod must stay where it is.
	until := time.Now().Add(50 * time.Second)
	for time.Now().Before(until) {
		if ok, msg := nodeOK(); !ok {
			t.Fatalf("node lost readiness under the node lifecycle controller: %s", msg)
		}
		time.Sleep(time.Second)
	}
	after := l.runningReady("web")
	if after.UID != pod.UID || after.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("pod changed: %+v", after.Status.ContainerStatuses)
	}
}
