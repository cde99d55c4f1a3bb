package kubelet

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/causeway-net/causeway/lab/apps"
	"github.com/causeway-net/causeway/lab/netlab"
)

// APIServerPort is where the forwarder to the API server listens inside
// the node namespace (on every address).
const APIServerPort = 6443

// BrokerPort is where the forwarder to the broker's API server listens
// inside the node namespace (when Config.BrokerForward is set).
const BrokerPort = 6444

// Config configures a lab kubelet.
type Config struct {
	// Client talks to the node's cluster (admin credentials are fine in
	// the lab).
	Client kubernetes.Interface
	// Host manages the lab's namespaces, cgroups and processes.
	Host *netlab.Host
	// Cluster and Node describe the node (as in the lab topology); Node is
	// registered under Node.Name.
	Cluster netlab.Cluster
	Node    netlab.Node
	// Apps maps container images to command lines.
	Apps *apps.Registry
	// Labels are added to the Node's labels, e.g. causeway.dev/gateway=true.
	Labels map[string]string
	// APIServerForward, when set ("127.0.0.1:PORT" in the root namespace),
	// makes the kubelet listen on 0.0.0.0:6443 inside the node namespace
	// and splice each connection to it, so that processes in the node
	// reach the API server at https://127.0.0.1:6443.
	APIServerForward string
	// BrokerForward, when set, does the same for the broker's API server
	// on BrokerPort (https://127.0.0.1:6444 inside the node).
	BrokerForward string
	// Serving, when set, makes the kubelet serve the kubelet API
	// (containerLogs, exec, portForward) over HTTPS on the node's address,
	// port APIPort, inside the node namespace, and publish the port in the
	// Node's status (daemonEndpoints).
	Serving *Serving
	// EgressSocket, when set, makes the kubelet serve its cluster's API
	// server egress on this Unix socket: an HTTP CONNECT proxy dialling
	// from inside the node namespace, through which the API server
	// (controlplane.Config.ClusterEgress) reaches every node's kubelet
	// API. One kubelet per cluster serves it.
	EgressSocket string
	// HostPaths maps hostPath volume paths to the host paths used
	// instead: a path at or below a key is rewritten to the value (e.g.
	// the lab gives each node its own /var/lib/causeway).
	HostPaths map[string]string
	// ClusterDNS is the cluster's DNS Service address, the nameserver of
	// the pods' resolv.conf (dnsPolicy ClusterFirst); invalid: the pods
	// use the node's. ClusterDomain is its domain (DefaultClusterDomain
	// when empty).
	ClusterDNS    netip.Addr
	ClusterDomain string
	// StateDir holds pod state and container logs:
	// <StateDir>/pods/<namespace>_<name>/{state.json,<container>.log}.
	StateDir string
	Log      *slog.Logger

	// LeasePeriod is how often the node Lease is renewed (default 10 s);
	// StatusPeriod how often the node status is posted (default 40 s);
	// ResyncPeriod how often every pod is reconciled without an event
	// (default 10 s).
	LeasePeriod, StatusPeriod, ResyncPeriod time.Duration
}

// Kubelet is one lab node's kubelet.
type Kubelet struct {
	cfg      Config
	log      *slog.Logger
	nodeNS   string
	memory   int64
	nodeInfo corev1.NodeSystemInfo
	probeTr  *http.Transport
	unshare  string // unshare(1), for containers with volumes

	pods corelisters.PodLister

	events   record.EventBroadcaster
	recorder record.EventRecorder

	mu      sync.Mutex
	started bool
	ctx     context.Context
	workers map[string]*worker
	ips     map[string]netip.Addr // pod key → address, for live pods
	wg      sync.WaitGroup
}

// New checks cfg and returns a kubelet; Run starts it.
func New(cfg Config) (*Kubelet, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubelet: Client is required")
	case cfg.Host == nil:
		return nil, errors.New("kubelet: Host is required")
	case cfg.Apps == nil:
		return nil, errors.New("kubelet: Apps is required")
	case cfg.Cluster.Name == "" || cfg.Node.Name == "":
		return nil, errors.New("kubelet: Cluster and Node are required")
	case !cfg.Node.Address.IsValid() || !cfg.Node.PodCIDR.IsValid():
		return nil, fmt.Errorf("kubelet: node %s needs an address and a pod CIDR", cfg.Node.Name)
	case cfg.StateDir == "":
		return nil, errors.New("kubelet: StateDir is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("kubelet: containers with volumes need unshare(1) (util-linux): %w", err)
	}
	if cfg.LeasePeriod <= 0 {
		cfg.LeasePeriod = 10 * time.Second
	}
	if cfg.StatusPeriod <= 0 {
		cfg.StatusPeriod = 40 * time.Second
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = 10 * time.Second
	}
	k := &Kubelet{
		cfg:     cfg,
		log:     cfg.Log.With("component", "kubelet", "cluster", cfg.Cluster.Name, "node", cfg.Node.Name),
		nodeNS:  cfg.Host.Names().Node(cfg.Cluster.Name, cfg.Node.Name),
		memory:  memTotal(),
		unshare: unshare,
		workers: map[string]*worker{},
		ips:     map[string]netip.Addr{},
	}
	k.nodeInfo = corev1.NodeSystemInfo{
		MachineID:               cfg.Cluster.Name + "-" + cfg.Node.Name,
		SystemUUID:              cfg.Cluster.Name + "-" + cfg.Node.Name,
		KernelVersion:           kernelVersion(),
		OSImage:                 osImage(),
		ContainerRuntimeVersion: "lab://" + Version,
		KubeletVersion:          Version,
		OperatingSystem:         "linux",
		Architecture:            runtime.GOARCH,
	}
	k.probeTr = &http.Transport{
		DialContext:       k.dialFromNode,
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // like the kubelet's HTTPS probes
	}
	return k, nil
}

// podsDir holds one directory per pod.
func (k *Kubelet) podsDir() string { return filepath.Join(k.cfg.StateDir, "pods") }

func (k *Kubelet) podDir(namespace, name string) string {
	return filepath.Join(k.podsDir(), podDirName(namespace, name))
}

// Run registers the node, keeps its heartbeats and runs the node's pods
// until ctx is done. Pod processes keep running after Run returns; a later
// Run with the same StateDir adopts them.
func (k *Kubelet) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := os.MkdirAll(k.podsDir(), 0o755); err != nil {
		return fmt.Errorf("kubelet state directory: %w", err)
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	defer cancel()

	fw := Forwards{Host: k.cfg.Host, NodeNS: k.nodeNS, APIServer: k.cfg.APIServerForward, Broker: k.cfg.BrokerForward,
		EgressSocket: k.cfg.EgressSocket, Log: k.log}
	if err := fw.Serve(ctx, &bg); err != nil {
		return fmt.Errorf("kubelet: %w", err)
	}
	if k.cfg.Serving != nil {
		bg.Go(func() {
			if err := k.serveAPI(ctx); err != nil {
				k.log.Error("kubelet API stopped", "err", err)
			}
		})
	}
	k.events = record.NewBroadcaster(record.WithContext(ctx))
	k.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: k.cfg.Client.CoreV1().Events("")})
	defer k.events.Shutdown()
	k.recorder = k.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: k.cfg.Node.Name})

	bg.Go(func() { k.heartbeat(ctx) })

	factory := informers.NewSharedInformerFactoryWithOptions(k.cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.Node.Name).String()
		}))
	podInformer := factory.Core().V1().Pods()
	inf := podInformer.Informer()
	k.pods = podInformer.Lister()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.enqueueObj(obj) },
		UpdateFunc: func(_, obj any) { k.enqueueObj(obj) },
		DeleteFunc: func(obj any) { k.enqueueObj(obj) },
	}); err != nil {
		return fmt.Errorf("kubelet: pod informer: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil // ctx done
	}
	k.startPods(ctx)
	<-ctx.Done()
	k.wg.Wait()
	k.log.Info("kubelet stopped; pod processes keep running")
	return nil
}

func (k *Kubelet) enqueueObj(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	k.enqueue(key)
}

// enqueue wakes the pod's worker, starting one if needed.
func (k *Kubelet) enqueue(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.started || k.ctx.Err() != nil {
		return
	}
	w := k.workers[key]
	if w == nil {
		w = k.newWorker(key, nil)
	}
	w.wake()
}

// newWorker starts a worker; k.mu is held.
func (k *Kubelet) newWorker(key string, st *podState) *worker {
	ns, name, _ := strings.Cut(key, "/")
	w := &worker{
		k:          k,
		key:        key,
		namespace:  ns,
		name:       name,
		wakeCh:     make(chan struct{}, 1),
		events:     make(chan event, 32),
		state:      st,
		adopted:    st != nil && st.UID != "",
		containers: map[string]*ctr{},
		tokens:     map[string]token{},
	}
	w.ctx, w.cancel = context.WithCancel(k.ctx)
	k.workers[key] = w
	k.wg.Add(1)
	go w.run()
	return w
}

// finish removes a worker whose pod is gone, unless an event arrived
// meanwhile.
func (k *Kubelet) finish(w *worker) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(w.wakeCh) > 0 {
		return false
	}
	delete(k.workers, w.key)
	delete(k.ips, w.key)
	w.cancel()
	return true
}

// startPods adopts the pods of StateDir, removes namespaces and cgroups
// of pods the kubelet knows nothing of, and starts a worker per pod.
func (k *Kubelet) startPods(ctx context.Context) {
	states, errs := loadStates(k.podsDir())
	for _, err := range errs {
		k.log.Warn("unreadable pod state", "err", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ctx = ctx
	k.started = true
	known := map[string]bool{}
	for key, st := range states {
		known[key] = true
		if ip, err := netip.ParseAddr(st.IP); err == nil && !st.HostNetwork {
			k.ips[key] = ip
		}
	}
	pods, err := k.pods.List(labels.Everything())
	if err != nil {
		k.log.Warn("list pods", "err", err)
	}
	for _, p := range pods {
		known[p.Namespace+"/"+p.Name] = true
	}
	k.removeOrphans(known)
	for key := range known {
		w := k.newWorker(key, states[key])
		w.wake()
	}
	k.log.Info("kubelet started", "pods", len(known), "adopted", len(states))
}

// removeOrphans deletes pod namespaces and pod cgroups of this node that
// belong to no known pod (left by a kubelet whose state is gone).
func (k *Kubelet) removeOrphans(known map[string]bool) {
	h := k.cfg.Host
	c, n := k.cfg.Cluster.Name, k.cfg.Node.Name
	orphans := map[string]bool{}
	nsNames, err := h.PodNetns(c, n)
	if err != nil {
		k.log.Warn("list pod namespaces", "err", err)
	}
	for _, name := range nsNames {
		orphans[strings.TrimPrefix(name, k.nodeNS+".")] = true
	}
	ents, err := os.ReadDir(h.Cgroups().Node(c, n))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		k.log.Warn("list pod cgroups", "err", err)
	}
	for _, e := range ents {
		if rest, ok := strings.CutPrefix(e.Name(), "pod-"); ok && e.IsDir() {
			orphans[rest] = true
		}
	}
	for rest := range orphans {
		// <namespace>.<name>; namespaces are DNS labels (no dots).
		ns, name, ok := strings.Cut(rest, ".")
		if !ok || strings.Contains(rest, "~") {
			k.log.Warn("cannot map a shortened pod namespace or cgroup back to its pod; leaving it", "name", rest)
			continue
		}
		if known[ns+"/"+name] {
			continue
		}
		k.log.Info("removing orphaned pod sandbox", "pod", ns+"/"+name)
		if err := h.DeletePod(netlab.Pod{Cluster: c, Node: n, Namespace: ns, Name: name}); err != nil {
			k.log.Warn("remove orphaned pod", "pod", ns+"/"+name, "err", err)
		}
	}
}

// allocateIP returns the pod's address: the one it has, else the one its
// status reports if free, else the lowest free one of the node's slice.
// Addresses of live pods (known to a worker or reported by a non-terminal
// pod of this node) are never handed out twice.
func (k *Kubelet) allocateIP(key string, pod *corev1.Pod) (netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ip, ok := k.ips[key]; ok {
		return ip, nil
	}
	used := map[netip.Addr]bool{}
	for _, ip := range k.ips {
		used[ip] = true
	}
	slice := k.cfg.Node.PodCIDR
	if pods, err := k.pods.List(labels.Everything()); err == nil {
		for _, p := range pods {
			if p.Namespace+"/"+p.Name == key || p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil && slice.Contains(ip) {
				used[ip] = true
			}
		}
	}
	if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil && slice.Contains(ip) && !used[ip] &&
		ip != slice.Masked().Addr() && ip != slice.Masked().Addr().Next() {
		k.ips[key] = ip
		return ip, nil
	}
	ip, err := netlab.AllocatePodIP(slice, used)
	if err != nil {
		return netip.Addr{}, err
	}
	k.ips[key] = ip
	return ip, nil
}

func (k *Kubelet) releaseIP(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.ips, key)
}

// dialFromNode connects from inside the node namespace (readiness probes,
// the API server's egress).
func (k *Kubelet) dialFromNode(ctx context.Context, network, addr string) (net.Conn, error) {
	return k.dialIn(ctx, k.nodeNS, network, addr)
}

// dialIn connects from inside a namespace.
func (k *Kubelet) dialIn(ctx context.Context, netns, network, addr string) (net.Conn, error) {
	return dialIn(ctx, k.cfg.Host, netns, network, addr)
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) >= 2 && fs[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

func kernelVersion() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}
