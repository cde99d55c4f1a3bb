package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/config"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// Defaults of Config.
const (
	DefaultDeadClusterTimeout = 10 * time.Second
	DefaultLivenessDuration   = 3 * time.Second
	DefaultResyncPeriod       = 5 * time.Minute
	DefaultWorkers            = 16
	// LeaderElectionID is the Lease in the local Causeway namespace that
	// elects the acting replica.
	LeaderElectionID = "causeway-mcs-controller"
)

// Config configures a Controller.
type Config struct {
	// ClusterID is this cluster's ID in the ClusterSet.
	ClusterID string
	// Namespace is Causeway's namespace in the local cluster (leader
	// election Lease).
	Namespace string
	// Policy is the ClusterSet's policy, read from the broker: its VIP
	// ranges (imports with the IPv6 family get their IPv6 VIP from
	// VIPRangeIPv6) and quotas. The zero value means
	// addrpolicy.DefaultPolicy().
	Policy addrpolicy.Policy
	// DeadClusterTimeout is how long after its liveness Lease expired a
	// cluster's endpoints are withdrawn.
	DeadClusterTimeout time.Duration
	// LivenessDuration is the liveness Lease's duration; it is renewed
	// every third of it.
	LivenessDuration time.Duration
	// ResyncPeriod is how often every Service exported or imported here
	// is re-checked (runVerify: one at a time, spread over the period).
	ResyncPeriod time.Duration
	// Workers is the number of Services synced in parallel.
	Workers int
	// LeaderElection makes only one replica per cluster act.
	LeaderElection bool
	// Log is the controller's logger.
	Log *slog.Logger
	// Metrics receives the controller's metrics (nil: not registered).
	Metrics prometheus.Registerer
	// BrokerHealth, if set, is told whether the last liveness renewal in
	// the broker worked.
	BrokerHealth func(error)
	// BrokerTokenLifetime, when set, makes the acting replica rotate the
	// broker token in Secret causeway-broker (broker.Rotator), requesting
	// tokens valid this long; zero leaves the token as it is.
	BrokerTokenLifetime time.Duration
}

// Controller is one cluster's MCS controller.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	mgr     manager.Manager
	broker  cluster.Cluster
	local   client.Client
	bclient client.Client
	breader client.Reader
	// reader reads the local API server directly (not the cache).
	reader   client.Reader
	alloc    *mcs.FamilyVIPAllocator
	recorder events.EventRecorder
	live     *liveness
	metrics  *metrics
	trigger  chan event.GenericEvent

	// quotas take each remote cluster's records up to its quota
	// (recordQuotas); requeue hands the Services whose records it took or
	// dropped to the controller's queue.
	quotas  *recordQuotas
	requeue requeuer

	// stores cache the cluster's Services, EndpointSlices,
	// ServiceExports and ServiceImports (localcache.go), brokerStores the
	// broker's records and VIP allocations (brokercache.go).
	stores       localStores
	brokerStores brokerStores

	mu sync.Mutex
	// services is what the controller remembers of each Service between
	// syncs (one map entry per Service, none for a Service it neither
	// exports, imports nor holds VIPs of); exports, imports and
	// sliceCount are its totals, for the gauges.
	services                     map[types.NamespacedName]serviceState
	exports, imports, sliceCount int
	// waitingVIP are Services whose VIP allocation found the range full.
	waitingVIP map[types.NamespacedName]bool
	// vipPendingSince holds, for each Service not imported here yet that
	// found no VIP allocated, when it first did (vipPendingWait).
	vipPendingSince map[types.NamespacedName]time.Time
	// refused holds, per Service, the remote records refused at its last
	// sync (cluster ID -> refusal), so that each refusal is reported once;
	// quotaReported the clusters over their quota reported while they are.
	refused       map[types.NamespacedName]map[string]string
	quotaReported map[string]bool
}

// Local rights of the controller (make generate turns these into the
// chart's templates/rbac). Everything it reads goes through its caches
// (list and watch only); its writes are the ServiceImports and
// EndpointSlices it owns and the status of ServiceExports. Leader
// election takes a Lease and records Events in Causeway's namespace;
// export Events go to the ServiceExport's namespace (events.k8s.io).
//
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceexports,verbs=list;watch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceexports/status,verbs=patch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports,verbs=list;watch;create;update;delete
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceimports/status,verbs=patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=services;namespaces,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=causeway-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=causeway-system,resources=events,verbs=create;patch
//
// Globalnet: the GlobalIngress of each exported Service (in the
// Service's namespace), which the globalnet controller writes and this
// one only reads into the record, and the Clusters and Endpoints the
// gateway mirrors into Causeway's namespace (the other clusters'
// reachability).
//
// +kubebuilder:rbac:groups=causeway.dev,resources=globalingresses,verbs=list;watch
// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=clusters;endpoints,verbs=get;list;watch

// New builds a controller for the local cluster (local) syncing through
// the broker (brokerCfg, this cluster's broker identity).
func New(local, brokerCfg *rest.Config, cfg Config) (*Controller, error) {
	if cfg.ClusterID == "" {
		return nil, errors.New("cluster ID is required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "causeway-system"
	}
	if cfg.Policy.IsZero() {
		cfg.Policy = addrpolicy.DefaultPolicy()
	}
	vips, err := mcs.ParseVIPRange(cfg.Policy.VIPRange.String())
	if err != nil {
		return nil, err
	}
	vips6, err := mcs.ParseVIPRange(cfg.Policy.VIPRangeIPv6.String())
	if err != nil {
		return nil, err
	}
	if cfg.DeadClusterTimeout <= 0 {
		cfg.DeadClusterTimeout = DefaultDeadClusterTimeout
	}
	if cfg.LivenessDuration <= 0 {
		cfg.LivenessDuration = DefaultLivenessDuration
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	scheme := kube.NewScheme()
	// No cache reports its objects again on a timer (runVerify re-checks
	// the Services instead).
	noResync := ptrTo(time.Duration(0))
	// The objects there are many of are cached as plain values
	// (localcache.go, brokercache.go), and the clients never cache them.
	// The few others (Namespaces, GlobalIngresses, the gateway's mirrors,
	// liveness Leases) are in the managers' informer caches, each type
	// once (one informer shared by the watches and the reads), through a
	// transform keeping what is read.
	slim := newSlimmer(broker.Namespace(cfg.ClusterID), cfg.Policy.VIPRange, cfg.Policy.VIPRangeIPv6)
	// Each remote cluster's records are taken, and their specs kept, up to
	// its quota.
	slim.quotas = newRecordQuotas(cfg.Policy.Quotas)
	localCache := cache.Options{
		SyncPeriod:       noResync,
		DefaultTransform: stripManagedFields,
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Namespace{}: {Transform: slim.namespace},
			// The gateway's mirrors, in Causeway's namespace only.
			&causewayv1alpha1.Cluster{}:  {Namespaces: map[string]cache.Config{cfg.Namespace: {}}},
			&causewayv1alpha1.Endpoint{}: {Namespaces: map[string]cache.Config{cfg.Namespace: {}}},
		},
	}
	brokerCache := cache.Options{SyncPeriod: noResync, DefaultTransform: stripManagedFields}

	// Leader election with client-go's usual timings: a short renew
	// deadline lost leadership (and exited) while the API server was
	// saturated by 10 000 imports. A standby replica takes over 15 s after
	// a crash, at once after a clean shutdown (released on cancel); the
	// imports already written stay meanwhile.
	le := 15 * time.Second
	renew := 10 * time.Second
	retry := 2 * time.Second
	mgr, err := manager.New(local, manager.Options{
		Scheme: scheme,
		Logger: logr.FromSlogHandler(cfg.Log.Handler()),
		Cache:  localCache,
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{
			&corev1.Service{}, &discoveryv1.EndpointSlice{}, &mcsv1beta1.ServiceExport{}, &mcsv1beta1.ServiceImport{}}}},
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       cfg.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &le,
		RenewDeadline:                 &renew,
		RetryPeriod:                   &retry,
		Controller:                    config.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("local cluster manager: %w", err)
	}
	bc, err := cluster.New(brokerCfg, func(o *cluster.Options) {
		o.Scheme = scheme
		o.Cache = brokerCache
		o.Client = client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{
			&causewayv1alpha1.ServiceExportRecord{}, &causewayv1alpha1.VIPAllocation{}}}}
	})
	if err != nil {
		return nil, fmt.Errorf("broker client: %w", err)
	}
	if err := mgr.Add(bc); err != nil {
		return nil, err
	}
	c := &Controller{
		cfg:      cfg,
		log:      cfg.Log,
		mgr:      mgr,
		broker:   bc,
		local:    mgr.GetClient(),
		bclient:  bc.GetClient(),
		breader:  bc.GetAPIReader(),
		reader:   mgr.GetAPIReader(),
		recorder: mgr.GetEventRecorder("mcs-controller"),
		live:     newLiveness(cfg.ClusterID, cfg.LivenessDuration, cfg.DeadClusterTimeout, time.Now),
		trigger:  make(chan event.GenericEvent, 1024),
		services: map[types.NamespacedName]serviceState{},

		quotas:          slim.quotas,
		waitingVIP:      map[types.NamespacedName]bool{},
		vipPendingSince: map[types.NamespacedName]time.Time{},
		refused:         map[types.NamespacedName]map[string]string{},
		quotaReported:   map[string]bool{},
	}
	c.metrics = newMetrics(cfg.Metrics, c.requeue.depth)
	if c.stores, err = newLocalStores(local, scheme, slim); err != nil {
		return nil, err
	}
	if c.brokerStores, err = newBrokerStores(brokerCfg, scheme, slim, c.observeRecord); err != nil {
		return nil, err
	}
	if err := mgr.Add(c.allStores()); err != nil {
		return nil, err
	}
	if cfg.BrokerTokenLifetime > 0 {
		if err := mgr.Add(c.tokenRotator(brokerCfg)); err != nil {
			return nil, err
		}
	}
	if c.alloc, err = mcs.NewFamilyVIPAllocator(vips, vips6,
		cachedVIPStore{BrokerVIPStore: mcs.NewBrokerVIPStore(c.bclient, cfg.ClusterID), vips: c.brokerStores}, cfg.ClusterID); err != nil {
		return nil, err
	}
	if err := c.setup(); err != nil {
		return nil, err
	}
	return c, nil
}

// The broker token's rotation patches the one Secret the daemons mount,
// and reads no Secret.
//
// +kubebuilder:rbac:groups="",namespace=causeway-system,resources=secrets,resourceNames=causeway-broker,verbs=patch

// tokenRotator rotates the broker token of the acting replica (a runnable
// of the manager, started once elected).
func (c *Controller) tokenRotator(brokerCfg *rest.Config) manager.Runnable {
	r := &broker.Rotator{
		Broker:    brokerCfg,
		Local:     c.local,
		Namespace: c.cfg.Namespace,
		ClusterID: c.cfg.ClusterID,
		Lifetime:  c.cfg.BrokerTokenLifetime,
		Log:       c.log.With("loop", "broker-token"),
		Rotated:   func(exp time.Time) { c.metrics.tokenExpiry.Set(float64(exp.Unix())) },
		Failed:    func(error) { c.metrics.tokenFailed.Inc() },
	}
	return manager.RunnableFunc(r.Run)
}

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	return c.mgr.Start(ctx)
}

// WaitForSync waits until the caches the controller reads hold their
// initial lists (Run fills them), or ctx ends.
func (c *Controller) WaitForSync(ctx context.Context) error {
	if err := c.allStores().waitForSync(ctx); err != nil {
		return err
	}
	if !c.mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("informer caches never synced: %w", ctx.Err())
	}
	return nil
}

// allStores are the plain caches of the cluster and of the broker.
func (c *Controller) allStores() storeRunner {
	return storeRunner{c.stores.services, c.stores.slices, c.stores.exports, c.stores.imports,
		c.brokerStores.records, c.brokerStores.vips}
}

func (c *Controller) ownNamespace() string { return broker.Namespace(c.cfg.ClusterID) }

func (c *Controller) setup() error {
	record := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		r, ok := o.(*causewayv1alpha1.ServiceExportRecord)
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: r.Spec.ServiceNamespace, Name: r.Spec.ServiceName}}}
	})
	// A record concerns its Service.
	recordService := func(_ types.NamespacedName, v *cachedRecord) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: v.service}}
	}
	// An allocation concerns its Service, and any Service waiting for a
	// free address (the range was exhausted).
	vipService := func(_ types.NamespacedName, v *cachedVIP) []reconcile.Request {
		out := []reconcile.Request{{NamespacedName: v.service}}
		c.mu.Lock()
		for k := range c.waitingVIP {
			out = append(out, reconcile.Request{NamespacedName: k})
		}
		c.mu.Unlock()
		return out
	}
	// A new Namespace concerns the Services in it that the broker knows.
	namespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, key := range c.brokerStores.recordsOf("", o.GetName()) {
			out = append(out, reconcile.Request{NamespacedName: key})
		}
		return out
	})

	mirror := handler.EnqueueRequestsFromMapFunc(c.onMirror)

	err := builder.ControllerManagedBy(c.mgr).
		Named("mcs").
		WithOptions(ctrlcontroller.Options{MaxConcurrentReconciles: c.cfg.Workers}).
		WatchesRawSource(storeSource[cachedExport]{store: c.stores.exports, requests: byKey[cachedExport]}).
		WatchesRawSource(storeSource[cachedService]{store: c.stores.services, requests: byKey[cachedService]}).
		WatchesRawSource(storeSource[cachedImport]{store: c.stores.imports, requests: byKey[cachedImport]}).
		WatchesRawSource(storeSource[cachedSlice]{store: c.stores.slices, requests: func(key types.NamespacedName, v *cachedSlice) []reconcile.Request {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: key.Namespace, Name: v.service}}}
		}}).
		// A GlobalIngress concerns its Service (same namespace and name).
		Watches(&causewayv1alpha1.GlobalIngress{}, &handler.EnqueueRequestForObject{}).
		// A Cluster's status (the gateway's verdict) says nothing here;
		// its spec (CIDRs) does. An Endpoint's Valid condition does.
		Watches(&causewayv1alpha1.Cluster{}, mirror, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&causewayv1alpha1.Endpoint{}, mirror).
		Watches(&corev1.Namespace{}, namespace, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		WatchesRawSource(storeSource[cachedRecord]{store: c.brokerStores.records, requests: recordService}).
		WatchesRawSource(storeSource[cachedVIP]{store: c.brokerStores.vips, requests: vipService}).
		WatchesRawSource(source.Channel(c.trigger, record)).
		WatchesRawSource(&c.requeue).
		Complete(reconcile.Func(c.reconcile))
	if err != nil {
		return fmt.Errorf("build controller: %w", err)
	}
	if err := c.mgr.Add(manager.RunnableFunc(c.runVerify)); err != nil {
		return err
	}
	return c.mgr.Add(manager.RunnableFunc(c.runLiveness))
}

func (c *Controller) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	err := c.sync(ctx, req.NamespacedName)
	c.metrics.observe(time.Since(start), err)
	if err != nil {
		c.log.Debug("sync failed", "service", req.NamespacedName, "err", err)
	}
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		// The cache lags behind our own writes: try again shortly, without
		// reporting an error or growing the backoff.
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	return reconcile.Result{}, err
}

func ptrTo[T any](v T) *T { return &v }

// cachedVIPStore is the broker's VIP store (mcs.BrokerVIPStore, whose
// client reads VIPAllocations from the broker API server, not a cache)
// answering AllocatedTo and Holder from the plain cache of allocations:
// the allocator asks them for every candidate address and on every sync.
// Claim and Release stay with the API server: when a claim meets an
// existing object, the API server says who holds it (another cluster may
// have allocated it for the same Service a moment ago, before the cache
// saw it).
type cachedVIPStore struct {
	*mcs.BrokerVIPStore
	vips brokerStores
}

func (s cachedVIPStore) AllocatedTo(_ context.Context, svc types.NamespacedName) ([]mcs.VIPHold, error) {
	return s.vips.vipsOf(svc), nil
}

func (s cachedVIPStore) Holder(_ context.Context, addr netip.Addr) (mcs.VIPHold, bool, error) {
	v, ok := s.vips.vips.Get(types.NamespacedName{Name: mcs.VIPObjectName(addr)})
	return v.hold(addr), ok, nil
}

// runLiveness renews this cluster's liveness Lease and re-evaluates the
// other clusters' Leases; it runs on the leader only.
func (c *Controller) runLiveness(ctx context.Context) error {
	inf, err := c.broker.GetCache().GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return fmt.Errorf("lease informer: %w", err)
	}
	onLease := func(obj any, deleted bool) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Name != LivenessLeaseName {
			return
		}
		id, ok := broker.ClusterIDFromNamespace(l.Namespace)
		if !ok {
			return
		}
		if deleted {
			c.live.forget(id)
			return
		}
		c.live.observe(id, l.ResourceVersion)
	}
	reg, err := inf.AddEventHandler(leaseHandler{on: onLease})
	if err != nil {
		return fmt.Errorf("lease handler: %w", err)
	}
	defer func() { _ = inf.RemoveEventHandler(reg) }()

	renewEvery := c.cfg.LivenessDuration / 3
	tick := time.NewTicker(min(renewEvery, time.Second))
	defer tick.Stop()
	var lastRenew time.Time
	failing := false
	for {
		if time.Since(lastRenew) >= renewEvery {
			err := c.renewLease(ctx)
			if c.cfg.BrokerHealth != nil {
				c.cfg.BrokerHealth(err)
			}
			if err != nil {
				c.metrics.renewals.WithLabelValues("error").Inc()
				if !failing {
					c.log.Warn("cannot renew the liveness lease in the broker; endpoints stay as they are", "err", err)
				}
				failing = true
			} else {
				c.metrics.renewals.WithLabelValues("success").Inc()
				c.live.renewed()
				lastRenew = time.Now()
				if failing {
					c.log.Info("liveness lease in the broker renewed again")
				}
				failing = false
			}
		}
		changed, alive, dead := c.live.check()
		c.metrics.clusters.WithLabelValues("alive").Set(float64(alive))
		c.metrics.clusters.WithLabelValues("dead").Set(float64(dead))
		for _, id := range changed {
			c.log.Info("cluster liveness changed", "peer", id, "alive", c.live.alive(id))
			c.requeueCluster(ctx, id)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// requeueCluster queues every Service the cluster exports.
func (c *Controller) requeueCluster(ctx context.Context, id string) {
	for _, key := range c.brokerStores.recordsOf(broker.Namespace(id), "") {
		select {
		case c.trigger <- event.GenericEvent{Object: &causewayv1alpha1.ServiceExportRecord{
			Spec: causewayv1alpha1.ServiceExportRecordSpec{ServiceNamespace: key.Namespace, ServiceName: key.Name}}}:
		case <-ctx.Done():
			return
		}
	}
}

func (c *Controller) renewLease(ctx context.Context) error {
	return RenewLivenessLease(ctx, c.bclient, c.cfg.ClusterID, c.cfg.LivenessDuration)
}

// RenewLivenessLease creates or renews cluster clusterID's liveness Lease
// (LivenessLeaseName in its broker namespace) through bc, a broker client
// with that cluster's identity, for duration; the call is bounded by
// duration too. Every other cluster's controller declares clusterID dead
// when the Lease stops changing (see Config.DeadClusterTimeout).
func RenewLivenessLease(ctx context.Context, bc client.Client, clusterID string, duration time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	now := metav1.NewMicroTime(time.Now())
	secs := int32(max(1, duration/time.Second))
	key := types.NamespacedName{Namespace: broker.Namespace(clusterID), Name: LivenessLeaseName}
	var l coordinationv1.Lease
	err := bc.Get(ctx, key, &l)
	if apierrors.IsNotFound(err) {
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo(clusterID), LeaseDurationSeconds: &secs,
				AcquireTime: &now, RenewTime: &now},
		}
		err = bc.Create(ctx, &l)
		if apierrors.IsAlreadyExists(err) {
			return nil // the cache lagged; renew next time
		}
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds, l.Spec.HolderIdentity = &now, &secs, ptrTo(clusterID)
	return bc.Update(ctx, &l)
}

type leaseHandler struct{ on func(obj any, deleted bool) }

func (h leaseHandler) OnAdd(obj any, _ bool) { h.on(obj, false) }
func (h leaseHandler) OnUpdate(_, obj any)   { h.on(obj, false) }
func (h leaseHandler) OnDelete(obj any)      { h.on(obj, true) }
