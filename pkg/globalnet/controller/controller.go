package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// Defaults of Config.
const (
	// DefaultQuarantine is how long released global addresses stay
	// reserved (Config.Quarantine).
	DefaultQuarantine   = 2 * time.Minute
	DefaultResyncPeriod = 5 * time.Minute
	DefaultWorkers      = 4
	// LeaderElectionID is the Lease in the local Causeway namespace that
	// elects the acting replica.
	LeaderElectionID = "causeway-globalnet"
)

// Config configures a Controller.
type Config struct {
	// ClusterID is this cluster's ID in the ClusterSet (the name of its
	// mirrored Cluster).
	ClusterID string
	// Namespace is Causeway's namespace in the local cluster: the
	// gateway's Cluster mirrors and the leader election Lease.
	Namespace string
	// Quarantine is how long the global addresses of a Service that is no
	// longer exported stay reserved (GlobalIngress releasedAt) before they
	// are freed; 0 means DefaultQuarantine.
	Quarantine time.Duration
	// ResyncPeriod is how often every object is re-checked.
	ResyncPeriod time.Duration
	// Workers is the number of Services synced in parallel.
	Workers int
	// LeaderElection makes only one replica per cluster act.
	LeaderElection bool
	// Log is the controller's logger.
	Log *slog.Logger
	// Metrics receives the controller's metrics (nil: not registered).
	Metrics prometheus.Registerer
}

// Controller is one cluster's globalnet controller.
type Controller struct {
	cfg Config
	log *slog.Logger
	mgr manager.Manager
	// local reads through the manager's caches; reader reads the API
	// server directly (the replay of the persisted allocations).
	local    client.Client
	reader   client.Reader
	recorder events.EventRecorder
	metrics  *metrics
	// trigger queues Services, egressTrigger namespaces from outside the
	// watches (those waiting for room, once addresses are freed).
	trigger       chan event.GenericEvent
	egressTrigger chan event.GenericEvent

	alloc allocation
}

// Rights of the controller in the local cluster (make generate-rbac turns
// these into the chart's templates/rbac/globalnet.yaml). It reads the
// exports, their Services and EndpointSlices, the Namespaces and Pods
// (namespace egress) and this cluster's Cluster mirror through its
// caches, and writes only GlobalIngress and GlobalEgress objects and
// Events: Warning Events on ServiceExports and Namespaces
// (events.k8s.io) and the leader election's in Causeway's namespace.
//
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=serviceexports,verbs=list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch
// +kubebuilder:rbac:groups=causeway.dev,resources=globalingresses,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=namespaces;pods,verbs=list;watch
// +kubebuilder:rbac:groups=causeway.dev,resources=globalegresses,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=clusters,verbs=list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=causeway-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=causeway-system,resources=events,verbs=create;patch

// New builds a controller for the local cluster (local: its identity).
func New(local *rest.Config, cfg Config) (*Controller, error) {
	if cfg.ClusterID == "" {
		return nil, errors.New("cluster ID is required")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "causeway-system"
	}
	if cfg.Quarantine <= 0 {
		cfg.Quarantine = DefaultQuarantine
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
	// A Service's own EndpointSlices only: not the multi-cluster ones the
	// MCS controller writes.
	ownSlices, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("slice selector: %w", err)
	}
	notImported, err := labels.NewRequirement(discoveryv1.LabelManagedBy, selection.NotEquals, []string{mcs.ManagedBy})
	if err != nil {
		return nil, fmt.Errorf("slice selector: %w", err)
	}
	resync := cfg.ResyncPeriod
	// Leader election with client-go's usual timings (as the MCS
	// controller's): a standby replica takes over 15 s after a crash, at
	// once after a clean shutdown (released on cancel). The GlobalIngress
	// objects, and the gateway's translation from them, stay meanwhile.
	le, renew, retry := 15*time.Second, 10*time.Second, 2*time.Second
	mgr, err := manager.New(local, manager.Options{
		Scheme: kube.NewScheme(),
		Logger: logr.FromSlogHandler(cfg.Log.Handler()),
		Cache: cache.Options{
			SyncPeriod:       &resync,
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&discoveryv1.EndpointSlice{}: {Label: labels.NewSelector().Add(*ownSlices, *notImported)},
				// The gateway's mirrors, in Causeway's namespace only.
				&causewayv1alpha1.Cluster{}: {Namespaces: map[string]cache.Config{cfg.Namespace: {}}},
				// Every pod of the cluster, reduced to what namespace
				// egress reads.
				&corev1.Pod{}: {Transform: podAddresses},
			},
		},
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              LeaderElectionID,
		LeaderElectionNamespace:       cfg.Namespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &le,
		RenewDeadline:                 &renew,
		RetryPeriod:                   &retry,
		Controller:                    config.Controller{SkipNameValidation: new(true)},
	})
	if err != nil {
		return nil, fmt.Errorf("local cluster manager: %w", err)
	}
	c := &Controller{
		cfg:           cfg,
		log:           cfg.Log,
		mgr:           mgr,
		local:         mgr.GetClient(),
		reader:        mgr.GetAPIReader(),
		recorder:      mgr.GetEventRecorder("globalnet"),
		metrics:       newMetrics(cfg.Metrics),
		trigger:       make(chan event.GenericEvent, 1024),
		egressTrigger: make(chan event.GenericEvent, 1024),
		alloc: allocation{
			held:          map[types.NamespacedName]causewayv1alpha1.GlobalIngressSpec{},
			egress:        map[string][]string{},
			waiting:       map[types.NamespacedName]bool{},
			waitingEgress: map[string]bool{},
		},
	}
	if cfg.Metrics != nil {
		cfg.Metrics.MustRegister(newPoolCollector(&c.alloc))
	}
	if err := c.setup(); err != nil {
		return nil, err
	}
	return c, nil
}

// Run runs the controller until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	return c.mgr.Start(ctx)
}

// WaitForSync waits until the caches the controller reads hold their
// initial lists (Run fills them), or ctx ends.
func (c *Controller) WaitForSync(ctx context.Context) error {
	if !c.mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("informer caches never synced: %w", ctx.Err())
	}
	return nil
}

func (c *Controller) setup() error {
	// A slice concerns the Service it belongs to.
	slice := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[discoveryv1.LabelServiceName]
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	})
	err := builder.ControllerManagedBy(c.mgr).
		Named("globalnet").
		WithOptions(ctrlcontroller.Options{MaxConcurrentReconciles: c.cfg.Workers}).
		Watches(&mcsv1beta1.ServiceExport{}, &handler.EnqueueRequestForObject{}).
		Watches(&corev1.Service{}, &handler.EnqueueRequestForObject{}).
		Watches(&discoveryv1.EndpointSlice{}, slice).
		Watches(&causewayv1alpha1.GlobalIngress{}, c.allocationObject()).
		// This cluster's mirrored Cluster: its spec (global and pod CIDRs)
		// concerns every export and every allocation.
		Watches(&causewayv1alpha1.Cluster{}, handler.EnqueueRequestsFromMapFunc(c.onOwnCluster),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(c.trigger, &handler.EnqueueRequestForObject{})).
		Complete(c.reconciler("service", func(ctx context.Context, req reconcile.Request) (time.Duration, error) {
			return c.sync(ctx, req.NamespacedName)
		}))
	if err != nil {
		return fmt.Errorf("build controller: %w", err)
	}
	return c.setupEgress()
}

// allocationObject maps a GlobalIngress to its Service, a GlobalEgress to
// its namespace; one updated (it may hold less) or deleted (after its
// quarantine) may free addresses for whatever waits for room.
func (c *Controller) allocationObject() handler.Funcs {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.ObjectNew)})
			c.wakeWaiting()
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
			c.wakeWaiting()
		},
	}
}

// onOwnCluster maps this cluster's mirrored Cluster to every exported
// Service and every GlobalIngress (the global CIDR may have changed).
func (c *Controller) onOwnCluster(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != c.cfg.Namespace || o.GetName() != c.cfg.ClusterID {
		return nil
	}
	var out []reconcile.Request
	var exports mcsv1beta1.ServiceExportList
	if err := c.local.List(ctx, &exports); err == nil {
		for _, se := range exports.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&se)})
		}
	}
	var gis causewayv1alpha1.GlobalIngressList
	if err := c.local.List(ctx, &gis); err == nil {
		for _, gi := range gis.Items {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&gi)})
		}
	}
	return out
}

// reconciler runs sync for one request (a Service, or a namespace:
// what), records its metrics and retries shortly, without an error,
// when the cache lagged behind our own writes.
func (c *Controller) reconciler(what string, sync func(context.Context, reconcile.Request) (time.Duration, error)) reconcile.Func {
	return func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		name := strings.TrimPrefix(req.String(), "/")
		start := time.Now()
		requeue, err := sync(ctx, req)
		c.metrics.observe(time.Since(start), err)
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			c.log.Debug("sync raced the cache", what, name, "err", err)
			return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("sync %s %s: %w", what, name, err)
		}
		return reconcile.Result{RequeueAfter: requeue}, nil
	}
}

// sync brings the GlobalIngress of one Service up to date: allocated
// while the Service is exported and its export valid (the rule of the
// MCS controller's record, mcs.NewExportRecord), released otherwise. It
// returns when to sync again without an event (a quarantine ending), 0
// for never.
func (c *Controller) sync(ctx context.Context, key types.NamespacedName) (time.Duration, error) {
	se := &mcsv1beta1.ServiceExport{}
	switch err := c.local.Get(ctx, key, se); {
	case apierrors.IsNotFound(err):
		se = nil
	case err != nil:
		return 0, fmt.Errorf("get ServiceExport: %w", err)
	case se.DeletionTimestamp != nil:
		se = nil
	}
	if se == nil {
		return c.syncIngress(ctx, key, nil, nil, nil)
	}
	svc := &corev1.Service{}
	switch err := c.local.Get(ctx, key, svc); {
	case apierrors.IsNotFound(err):
		svc = nil
	case err != nil:
		return 0, fmt.Errorf("get Service: %w", err)
	case svc.DeletionTimestamp != nil:
		svc = nil
	}
	if _, invalid := mcs.NewExportRecord(c.cfg.ClusterID, se, svc); invalid != nil {
		return c.syncIngress(ctx, key, se, nil, nil)
	}
	var slices discoveryv1.EndpointSliceList
	if err := c.local.List(ctx, &slices, client.InNamespace(key.Namespace), client.MatchingLabels{discoveryv1.LabelServiceName: key.Name}); err != nil {
		return 0, fmt.Errorf("list EndpointSlices: %w", err)
	}
	return c.syncIngress(ctx, key, se, svc, slices.Items)
}
