package gateway

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/nat"
	"github.com/causeway-net/causeway/pkg/reach"
)

// Default lease timings, chosen for a failover below 2 s (see README):
// a crashed active is replaced after at most LeaseDuration + RetryPeriod
// (+ jitter); a stopped one releases the lease and is replaced within one
// RetryPeriod. The Lease object stores whole seconds, so 1 s is the
// shortest expressible duration.
const (
	DefaultLeaseDuration = 1 * time.Second
	DefaultRenewDeadline = 700 * time.Millisecond
	DefaultRetryPeriod   = 100 * time.Millisecond
)

// The default health checks: an echo to every remote every 100 ms; a
// remote whose echoes stop being answered for 500 ms is in error and
// unreachable (README, "Unreachable remotes"), so that the route agents
// stop choosing its VIP backends within a second.
const (
	DefaultHealthInterval = 100 * time.Millisecond
	DefaultHealthTimeout  = 500 * time.Millisecond
)

// Config is everything the engine needs; cmd/gateway fills it from flags,
// tests fill it directly.
type Config struct {
	ClusterID string
	NodeName  string
	// Namespace holds Causeway's objects in the local cluster.
	Namespace    string
	PodCIDRs     []netip.Prefix
	ServiceCIDRs []netip.Prefix

	// PublicIP and Port are what remote gateways connect to; PrivateIP is
	// this node's address on the cluster network (for the route agent).
	PublicIP  netip.Addr
	PrivateIP netip.Addr
	Port      uint16
	// CableDriver names the pkg/cable driver; TunnelDevice its device
	// (≤ 15 bytes, unique on the machine); MTU 0 = driver default.
	CableDriver  string
	TunnelDevice string
	MTU          int
	// StateDir keeps the driver's private key (WireGuard's, or ipsec's
	// X25519 key and charon's files).
	StateDir string
	// Netns is the path of the network namespace the gateway's network
	// lives in; empty = the process's own (the hostNetwork case).
	Netns string
	// RouteTable receives the routes to remote subnets (0 = main).
	RouteTable int
	// HealthCheckIP, when valid, is put on the tunnel device, published
	// in the Endpoint and used as the source of health-check echoes.
	// Under globalnet it must be left unset: the layout's health-check
	// address of the global CIDR is used.
	HealthCheckIP netip.Addr
	// HealthInterval is the period of the health-check echoes;
	// HealthTimeout how long a remote whose echoes were answered may go
	// without an answer before its connection is in error and the remote
	// is unreachable for the route agents (Reach).
	HealthInterval, HealthTimeout time.Duration
	// Reach is where the active term publishes which remotes are
	// unreachable (the command serves it to the route agents); nil: a
	// board of its own, served nowhere.
	Reach *reach.Board
	// Ready, when set, is called once this candidate could take the
	// active role over from a warm start: its broker and local caches
	// have synced and it has read the gateway Lease. The command makes
	// it the Pod's readiness, so a rolling update replaces the next
	// candidate only once this one can stand in for it.
	Ready func()

	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// CandidateProbePort, when not 0 and PrivateIP is set, is the UDP
	// port on PrivateIP where this candidate, while it holds the Lease,
	// answers the other candidates' probes; passive candidates probe the
	// Lease holder there every CandidateProbeInterval, take an unrenewed
	// Lease over early after CandidateProbeMisses unanswered probes in a
	// row, and leave an expired Lease to a holder that answers (see
	// README). Every candidate of a cluster uses the same port.
	// CandidateProbeMisses is at most probeWindow (the prober's memory).
	CandidateProbePort     uint16
	CandidateProbeInterval time.Duration
	CandidateProbeMisses   int
	// ReleaseOnStop releases the lease when Run's context ends, so a
	// stopped active hands over at once. Tests turn it off to simulate a
	// crash.
	ReleaseOnStop bool
	// ResyncPeriod bounds how long a missed event can go unnoticed.
	ResyncPeriod time.Duration
	// StatusInterval is how often the Gateway status is refreshed; it is
	// written when a connection changes state or every StatusMaxAge.
	StatusInterval, StatusMaxAge time.Duration

	// Globalnet makes this cluster reachable only through a global CIDR
	// of the ClusterSet policy's supernet: the active gateway claims it
	// in the broker, announces it instead of the pod and service CIDRs,
	// and translates the cluster's GlobalIngress pairs and GlobalEgress
	// namespaces (see pkg/globalnet).
	Globalnet bool

	// Local and Broker are the API clients' configurations.
	Local, Broker *rest.Config
	// Drivers builds the cable driver (drivers.Registry() normally).
	Drivers cable.Registry
	Metrics prometheus.Registerer
	Log     *slog.Logger
}

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = "causeway-system"
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = DefaultLeaseDuration, DefaultRenewDeadline, DefaultRetryPeriod
	}
	if c.CandidateProbeInterval == 0 {
		c.CandidateProbeInterval = DefaultCandidateProbeInterval
	}
	if c.CandidateProbeMisses == 0 {
		c.CandidateProbeMisses = DefaultCandidateProbeMisses
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = DefaultHealthTimeout
	}
	if c.Reach == nil {
		c.Reach = reach.NewBoard()
	}
	if c.ResyncPeriod == 0 {
		c.ResyncPeriod = 30 * time.Second
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = time.Second
	}
	if c.StatusMaxAge == 0 {
		c.StatusMaxAge = 10 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.ClusterID == "" || c.NodeName == "" {
		errs = append(errs, errors.New("cluster ID and node name are required"))
	}
	if len(c.PodCIDRs) == 0 || len(c.ServiceCIDRs) == 0 {
		errs = append(errs, errors.New("pod and service CIDRs are required"))
	}
	if !c.PublicIP.IsValid() {
		errs = append(errs, errors.New("public IP is required"))
	}
	if c.Port == 0 {
		errs = append(errs, errors.New("port is required"))
	}
	if c.TunnelDevice == "" || len(c.TunnelDevice) > 15 {
		errs = append(errs, fmt.Errorf("tunnel device %q: need 1 to 15 bytes", c.TunnelDevice))
	}
	if _, ok := c.Drivers[c.CableDriver]; !ok {
		errs = append(errs, fmt.Errorf("cable driver %q: %w", c.CableDriver, cable.ErrUnknownDriver))
	}
	if c.CandidateProbeMisses < 1 || c.CandidateProbeMisses > probeWindow {
		errs = append(errs, fmt.Errorf("candidate probe misses %d: need 1 to %d", c.CandidateProbeMisses, probeWindow))
	}
	if c.HealthInterval <= 0 || c.HealthTimeout < 2*c.HealthInterval {
		errs = append(errs, fmt.Errorf("health interval %s, timeout %s: need a positive interval and a timeout of at least two intervals", c.HealthInterval, c.HealthTimeout))
	}
	if c.Globalnet && c.HealthCheckIP.IsValid() {
		errs = append(errs, errors.New("under globalnet the health-check IP comes from the global CIDR: leave it unset"))
	}
	if c.HealthCheckIP.IsValid() && !slices.ContainsFunc(c.subnets(), func(p netip.Prefix) bool { return p.Contains(c.HealthCheckIP) }) {
		errs = append(errs, fmt.Errorf("health-check IP %s is outside the pod and service CIDRs", c.HealthCheckIP))
	}
	if c.Local == nil || c.Broker == nil {
		errs = append(errs, errors.New("local and broker API configurations are required"))
	}
	return errors.Join(errs...)
}

func (c Config) subnets() []netip.Prefix { return slices.Concat(c.PodCIDRs, c.ServiceCIDRs) }

// device is the tunnel device the driver creates: TunnelDevice, unless
// the driver names its own (cable.Kind.Device).
func (c Config) device() string {
	return c.Drivers[c.CableDriver].DeviceName(c.TunnelDevice)
}

// Engine is one gateway candidate.
type Engine struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	local  client.Client
	kube   kubernetes.Interface
	broker client.Client
	// brokerAPI reads and writes the broker without the cache.
	brokerAPI client.Client
	bcache    cache.Cache
	// lcache watches the local GlobalIngresses and GlobalEgresses and nat applies the
	// translation (globalnet only, else nil).
	lcache   cache.Cache
	nat      *nat.Table
	recorder record.EventRecorder
	events   record.EventBroadcaster

	trigger chan struct{} // capacity 1: "something changed, sync"

	// view is what the tunnel metrics read of the active term.
	view termView

	// driverMu serialises the driver's lifetimes (leftover removal and
	// an active term never overlap).
	driverMu sync.Mutex

	// leaseFresh reports whether the current term is certain (see
	// elector.fresh); set by Run before the first term.
	leaseFresh func() bool

	mu     sync.Mutex
	role   v1alpha1.HAStatus
	leader string
}

// New validates cfg and builds the API clients; nothing is contacted yet.
func New(cfg Config) (*Engine, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	// The lease alone is renewed every RetryPeriod: client-go's default
	// 5 QPS would throttle it.
	cfg.Local, cfg.Broker = rest.CopyConfig(cfg.Local), rest.CopyConfig(cfg.Broker)
	for _, c := range []*rest.Config{cfg.Local, cfg.Broker} {
		c.QPS, c.Burst = max(c.QPS, 100), max(c.Burst, 200)
	}
	scheme := kube.NewScheme()
	local, err := client.New(cfg.Local, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("local client: %w", err)
	}
	kc, err := kubernetes.NewForConfig(cfg.Local)
	if err != nil {
		return nil, fmt.Errorf("local clientset: %w", err)
	}
	bc, err := cache.New(cfg.Broker, cache.Options{Scheme: scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, fmt.Errorf("broker cache: %w", err)
	}
	broker, err := client.New(cfg.Broker, client.Options{Scheme: scheme, Cache: &client.CacheOptions{Reader: bc}})
	if err != nil {
		return nil, fmt.Errorf("broker client: %w", err)
	}
	brokerAPI, err := client.New(cfg.Broker, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("broker API client: %w", err)
	}
	var lc cache.Cache
	if cfg.Globalnet {
		lc, err = cache.New(cfg.Local, cache.Options{Scheme: scheme, DefaultTransform: cache.TransformStripManagedFields()})
		if err != nil {
			return nil, fmt.Errorf("local cache: %w", err)
		}
	}
	eb := record.NewBroadcaster()
	e := &Engine{
		cfg: cfg, log: cfg.Log, m: newMetrics(cfg.Metrics),
		local: local, kube: kc, broker: broker, brokerAPI: brokerAPI, bcache: bc, lcache: lc,
		nat:      nat.NewTable(nat.NewNftRunner(cfg.Netns), nat.NewMetrics(cfg.Metrics)),
		events:   eb,
		recorder: eb.NewRecorder(scheme, corev1.EventSource{Component: "causeway-gateway", Host: cfg.NodeName}),
		trigger:  make(chan struct{}, 1),
		role:     v1alpha1.HAStatusPassive,
	}
	if cfg.Metrics != nil {
		dev := cfg.device()
		cfg.Metrics.MustRegister(newTunnelCollector(&e.view, dev, func() (deviceCounters, error) {
			return readDeviceCounters(cfg.Netns, dev)
		}, cfg.Log))
	}
	return e, nil
}

// kick asks the active loop to sync soon.
func (e *Engine) kick() {
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// Role reports this candidate's current role.
func (e *Engine) Role() v1alpha1.HAStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.role
}

// Local rights of Run (make generate turns these into the chart's templates/rbac): the
// leader-election Lease and the Events of refused remotes, in Causeway's
// namespace only.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=causeway-system,resources=leases,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",namespace=causeway-system,resources=events,verbs=create;patch

// Run takes part in the election until ctx ends. While active it
// publishes, mirrors, programs the cable and health-checks; while passive
// it holds no tunnel. An active term ends only when another candidate is
// seen holding the Lease (the tunnel is then removed) or ctx ends: while
// the local API server does not answer, the term — tunnel, routes,
// globalnet rules — goes on from the caches (fail static; see README). On return the lease is released (ReleaseOnStop) and
// the driver closed: kernel tunnel state stays for a restarted gateway to
// adopt (see Cleanup for uninstall).
func (e *Engine) Run(ctx context.Context) error {
	e.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: e.kube.CoreV1().Events("")})
	defer e.events.Shutdown()

	// The informers run in every candidate, so that a passive one taking
	// over starts from a warm cache.
	watched := []struct {
		c    cache.Cache
		objs []client.Object
	}{{e.bcache, []client.Object{&v1alpha1.Endpoint{}, &v1alpha1.Cluster{}, &v1alpha1.ClusterSetPolicy{}, &v1alpha1.CIDRClaim{}}}}
	if e.cfg.keyed() {
		watched[0].objs = append(watched[0].objs, &v1alpha1.TunnelKey{})
	}
	if e.cfg.Globalnet {
		watched[0].objs = append(watched[0].objs, &v1alpha1.GlobalCIDR{})
		watched = append(watched, struct {
			c    cache.Cache
			objs []client.Object
		}{e.lcache, []client.Object{&v1alpha1.GlobalIngress{}, &v1alpha1.GlobalEgress{}}})
	}
	cacheCtx, stopCache := context.WithCancel(context.WithoutCancel(ctx))
	defer stopCache()
	for _, w := range watched {
		for _, obj := range w.objs {
			inf, err := w.c.GetInformer(ctx, obj)
			if err != nil {
				return fmt.Errorf("informer %T: %w", obj, err)
			}
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				AddFunc:    func(any) { e.kick() },
				UpdateFunc: func(any, any) { e.kick() },
				DeleteFunc: func(any) { e.kick() },
			}); err != nil {
				return fmt.Errorf("event handler %T: %w", obj, err)
			}
		}
		go func() {
			if err := w.c.Start(cacheCtx); err != nil {
				e.log.Error("cache stopped", "err", err)
			}
		}()
	}

	if err := e.writeGateway(ctx, gatewayStatus{role: v1alpha1.HAStatusPassive}); err != nil {
		e.log.Warn("write gateway status", "err", err)
	}

	// Lease reads and writes get their own request timeout (a renewal
	// that takes longer than the renew deadline is useless); the watch
	// uses the ordinary client.
	leaseCfg := rest.CopyConfig(e.cfg.Local)
	leaseCfg.Timeout = e.cfg.RenewDeadline
	leaseClient, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return fmt.Errorf("lease client: %w", err)
	}
	var cleanedLeftovers atomic.Bool // onNewLeader runs on its own goroutine
	el := newElector(e.kube.CoordinationV1(), leaseClient.CoordinationV1(), e.cfg.Namespace, kube.GatewayLease, e.cfg.NodeName,
		e.cfg.LeaseDuration, e.cfg.RenewDeadline, e.cfg.RetryPeriod, e.log, func(id string) {
			e.mu.Lock()
			e.leader = id
			e.mu.Unlock()
			e.log.Info("gateway leader", "identity", id)
			if id != e.cfg.NodeName && cleanedLeftovers.CompareAndSwap(false, true) {
				// A passive candidate holds no tunnel: remove what a
				// previous run of ours may have left.
				e.removeLeftovers(ctx)
			}
		})
	el.onRenewedAgain = e.kick // publish and mirror what was held back
	el.onRenewed = func(at time.Time) { e.m.leaseRenewed.Set(float64(at.UnixNano()) / 1e9) }
	if e.cfg.PrivateIP.IsValid() && e.cfg.CandidateProbePort != 0 {
		stop, err := e.startCandidateProbes(el)
		if err != nil {
			return err
		}
		defer stop()
	}
	e.leaseFresh = el.fresh
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go el.watch(watchCtx)
	if e.cfg.Ready != nil {
		go func() {
			for _, w := range watched {
				if !w.c.WaitForCacheSync(watchCtx) {
					return
				}
			}
			if el.waitSynced(watchCtx) {
				e.cfg.Ready()
			}
		}()
	}
	if e.cfg.Globalnet {
		// nft's first run (knftables checks that it works) is taken
		// here, off the path of the first takeover.
		e.nat.Present(ctx)
	}
	for ctx.Err() == nil {
		lease, sent := el.acquire(ctx)
		if lease == nil {
			break
		}
		e.log.Info("acquired the gateway lease", "transitions", ptr.Deref(lease.Spec.LeaseTransitions, 0))
		// The term outlives ctx until the hand-over below is settled;
		// its cause tells endTerm how it ended.
		tctx, stopActive := context.WithCancelCause(context.WithoutCancel(ctx))
		activeDone := make(chan struct{})
		go func() {
			defer close(activeDone)
			e.runActive(tctx, ctx)
		}()
		lease = el.renew(ctx, lease, sent)
		var ended error
		if ctx.Err() != nil && e.cfg.ReleaseOnStop {
			if el.probedWithin(standbyProbed * e.cfg.CandidateProbeInterval) {
				// A passive candidate is probing: it takes over at the
				// release. Break before make: the tunnel, translation
				// and their conntrack entries go first, then the Lease.
				// Forwarding on until the successor's Endpoint moved the
				// remotes, this node would still translate the remotes'
				// packets when the successor starts sending it the same
				// flows over the overlay (a pod here) or stop after the
				// successor cleared the entries of flows it forwarded
				// (a pod there): either way two entries for one flow,
				// conntrack remaps a port, the pod resets the connection.
				stopActive(errHandedOver)
				<-activeDone
			}
			ended = e.handOver(ctx, el, lease)
		}
		stopActive(ended)
		<-activeDone
		cleanedLeftovers.Store(true) // runActive tore its tunnel down itself
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := e.writeGateway(stopCtx, gatewayStatus{role: v1alpha1.HAStatusPassive}); err != nil {
		e.log.Warn("write gateway status at stop", "err", err)
	}
	return ctx.Err()
}

// standbyProbed is how many candidate probe intervals after the last
// probe answered a stopping holder still counts on a passive candidate.
const standbyProbed = 3

// errHandedOver ends a term whose Lease a successor took after this
// gateway released it on the way out, or that a stopping gateway ended
// before releasing it to a passive candidate that probes it.
var errHandedOver = errors.New("the gateway lease was handed over")

// handOver releases the Lease of a stopping active gateway, its term
// still running unless Run ended it first for a probing passive
// candidate (a passive candidate sees the release at its next watch
// event), and waits up to a lease duration for a successor: then it
// returns errHandedOver and the term ends like a lost one (tunnel,
// translation and its conntrack entries removed): this node's pods must
// reach the successor through the route agent's overlay routes, not the
// departing device and NAT. Without one (a single candidate, restarted)
// it returns nil and the kernel state stays for the next process to
// adopt.
func (e *Engine) handOver(ctx context.Context, el *elector, lease *coordinationv1.Lease) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.RenewDeadline)
	err := el.release(rctx, lease)
	cancel()
	if err != nil {
		e.log.Warn("release gateway lease", "err", err)
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.LeaseDuration)
	defer cancel()
	to := el.successor(wctx)
	if to == "" {
		return nil
	}
	e.log.Info("handed the gateway lease over", "to", to)
	return errHandedOver
}

// startCandidateProbes answers the other candidates' probes on
// PrivateIP:CandidateProbePort and makes el probe the Lease holder's.
func (e *Engine) startCandidateProbes(el *elector) (stop func(), err error) {
	conn, err := listenUDP(e.cfg.Netns, netip.AddrPortFrom(e.cfg.PrivateIP, e.cfg.CandidateProbePort))
	if err != nil {
		return nil, fmt.Errorf("candidate probe responder: %w", err)
	}
	go serveEchoes(conn, el.answerProbe)
	h := &holderProbe{misses: e.cfg.CandidateProbeMisses, silence: time.Duration(e.cfg.CandidateProbeMisses) * e.cfg.CandidateProbeInterval, onDown: el.notify}
	p, err := newUDPProber(e.cfg.Netns, e.cfg.PrivateIP, e.cfg.CandidateProbePort, e.cfg.CandidateProbeInterval, e.log, h.result)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("candidate prober: %w", err)
	}
	h.p = p
	el.probeIP, el.probeToken, el.holders, el.quiet = e.cfg.PrivateIP, rand.Text(), h, candidateQuiet(e.cfg.LeaseDuration, e.cfg.CandidateProbeMisses, e.cfg.CandidateProbeInterval)
	return func() {
		p.Close()
		conn.Close()
	}, nil
}

// removeLeftovers deletes a tunnel device a previous active run of this
// node left behind (Close keeps kernel state for adoption).
func (e *Engine) removeLeftovers(ctx context.Context) {
	e.driverMu.Lock()
	defer e.driverMu.Unlock()
	if e.Role() == v1alpha1.HAStatusActive {
		return
	}
	if e.cfg.Globalnet {
		e.dropTranslation(ctx) // a killed active's rules stay in the kernel
	}
	if remove := e.cfg.Drivers[e.cfg.CableDriver].RemoveStale; remove != nil {
		// e.g. an embedded WireGuard device dies with its process, its
		// UAPI socket file does not.
		if removed, err := remove(e.cfg.device()); err != nil {
			e.log.Warn("remove leftover tunnel", "err", err)
		} else if removed {
			e.log.Info("removed what a killed driver process left", "driver", e.cfg.CableDriver, "device", e.cfg.device())
		}
	}
	if ok, err := linkExists(e.cfg.Netns, e.cfg.device()); err != nil || !ok {
		return // nothing left (an embedded WireGuard device dies with its process)
	}
	d, err := e.newDriver(ctx, e.cfg.subnets())
	if err != nil {
		e.log.Warn("remove leftover tunnel", "err", err)
		return
	}
	if err := d.Cleanup(ctx); err != nil {
		e.log.Warn("remove leftover tunnel", "err", err)
	}
}

// dropTranslation removes, on a node that is no longer (or was, in a
// previous run) the active gateway, the conntrack entries of flows to or
// from global addresses (the supernet), the globalnet table, and those
// entries again: those it tracked as active carry its translation, and a
// flow the new active now sends this node (to a pod here) or this node's
// pods send through the new active would otherwise keep matching them
// (see pkg/nat, "Conntrack on failover"). The first deletion does not
// wait for nft (hundreds of ms on a loaded node, while the successor's
// first packets arrive); the second removes what the table translated
// meanwhile.
func (e *Engine) dropTranslation(ctx context.Context) {
	pol, err := clusterset.Read(ctx, e.broker)
	if err != nil {
		e.log.Warn("read the ClusterSet policy; removing conntrack entries of the default supernet", "err", err)
		pol = addrpolicy.DefaultPolicy()
	}
	forget := func() uint {
		n, err := nat.DeleteConntrack(e.cfg.Netns, []netip.Prefix{pol.Supernet})
		if err != nil {
			e.log.Warn("remove conntrack entries of global flows", "err", err)
		}
		return n
	}
	n := forget()
	if err := e.nat.Cleanup(ctx); err != nil {
		e.log.Warn("remove globalnet rules", "err", err)
		return
	}
	if n += forget(); n > 0 {
		e.log.Info("removed conntrack entries of global flows tracked while active", "entries", n)
	}
}

// newDriver builds the cable driver; subnets are the local subnets the
// tunnel carries (what the Endpoint announces).
func (e *Engine) newDriver(ctx context.Context, subnets []netip.Prefix) (cable.Driver, error) {
	if e.cfg.StateDir != "" {
		if err := os.MkdirAll(e.cfg.StateDir, 0o700); err != nil {
			return nil, fmt.Errorf("state dir: %w", err)
		}
	}
	return e.cfg.Drivers.New(ctx, e.cfg.CableDriver, cable.LocalEndpoint{
		ClusterID:  e.cfg.ClusterID,
		Interface:  e.cfg.TunnelDevice,
		Address:    e.cfg.PublicIP,
		Port:       e.cfg.Port,
		MTU:        e.cfg.MTU,
		StateDir:   e.cfg.StateDir,
		Netns:      e.cfg.Netns,
		RouteTable: e.cfg.RouteTable,
		Subnets:    subnets,
		Logger:     e.log.With("driver", e.cfg.CableDriver),
	})
}

func (e *Engine) setRole(r v1alpha1.HAStatus) {
	e.mu.Lock()
	e.role = r
	e.mu.Unlock()
	if r == v1alpha1.HAStatusActive {
		e.m.active.Set(1)
	} else {
		e.m.active.Set(0)
	}
}
