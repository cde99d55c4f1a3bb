package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/daemon"
	"github.com/causeway-net/causeway/pkg/kube"
)

// MetricsPort is the MCS controller's default /metrics port (127.0.0.1).
const MetricsPort = 9534

// GCPercent is the Go GC target (GOGC) of the controller when the GOGC
// environment variable does not set one. The controller is mostly its
// caches, long-lived values: with Go's default of 100 the heap grows to
// twice them before a collection, and the resident set with it; 25 caps
// the growth at a quarter (measured in BenchmarkScale, see
// pkg/mcs/README.md: the sync is API-bound, the collections cost CPU
// time only).
const GCPercent = 25

// PolicyCheckInterval is how often the controller reads the ClusterSet
// policy in the broker to notice a change.
const PolicyCheckInterval = 30 * time.Second

// HealthPort is the MCS controller's default /healthz and /readyz port (all
// interfaces; metrics stay on loopback).
const HealthPort = 9544

// NewCommand returns the mcs-controller daemon's command.
func NewCommand() *cobra.Command {
	opts := daemon.DefaultOptions(MetricsPort, HealthPort)
	opts.GCPercent = GCPercent
	var (
		deadAfter   = DefaultDeadClusterTimeout
		liveness    = DefaultLivenessDuration
		resync      = DefaultResyncPeriod
		workers     = DefaultWorkers
		leaderElect = true
		tokenLife   time.Duration
		qps         = float32(200)
		burst       = 400
	)
	cmd := daemon.Command("mcs-controller",
		"Causeway MCS controller: ServiceExports to the broker, ServiceImports and EndpointSlices from it",
		`The MCS controller runs once per cluster (replicas elect one leader through
the Lease causeway-mcs-controller in --namespace). It publishes every
ServiceExport of the cluster to the broker, merges all clusters' exports
(KEP-1645), allocates clusterset VIPs in the broker and writes the
ServiceImports and multi-cluster EndpointSlices of the ClusterSet here. It
takes the clusterset VIP ranges and the per-member quotas from the broker's
ClusterSetPolicy (and restarts when it changes). It renews the cluster's
liveness Lease in the broker and withdraws the
endpoints of clusters that stop renewing theirs. With
--broker-token-lifetime it keeps the broker token short-lived: at start
and then every half lifetime, it requests a fresh token for the cluster's
own broker identity and writes it into Secret causeway-broker (key
"token"), which every daemon reads through the mounted file.`,
		&opts, func(ctx context.Context, rt *daemon.Runtime) error {
			local, err := opts.RESTConfig()
			if err != nil {
				return err
			}
			brk, err := opts.BrokerRESTConfig()
			if err != nil {
				return err
			}
			if tokenLife != 0 && tokenLife < broker.MinTokenLifetime {
				return fmt.Errorf("--broker-token-lifetime %s: the API server issues no token shorter than %s", tokenLife, broker.MinTokenLifetime)
			}
			local.QPS, local.Burst, brk.QPS, brk.Burst = qps, burst, qps, burst
			if err := rt.WaitForAPIServer(ctx, "local cluster", local); err != nil {
				return err
			}
			// The ClusterSet's policy (VIP ranges, quotas) comes from
			// the broker, and a change of it restarts the controller.
			brokerReader, err := client.New(brk, client.Options{Scheme: kube.NewScheme()})
			if err != nil {
				return fmt.Errorf("broker client: %w", err)
			}
			policy, err := clusterset.Wait(ctx, clusterset.Read, brokerReader, 2*time.Second, func(err error) { rt.SetReady("clusterset-policy", err) })
			if err != nil {
				return err
			}
			rt.Log.Info("ClusterSet policy", "vipRange", policy.VIPRange, "vipRangeIPv6", policy.VIPRangeIPv6, "quotas", policy.Quotas)
			c, err := New(local, brk, Config{
				ClusterID:           opts.ClusterID,
				Namespace:           opts.Namespace,
				Policy:              policy,
				DeadClusterTimeout:  deadAfter,
				LivenessDuration:    liveness,
				ResyncPeriod:        resync,
				Workers:             workers,
				LeaderElection:      leaderElect,
				Log:                 rt.Log,
				Metrics:             rt.Metrics,
				BrokerHealth:        func(err error) { rt.SetReady("broker", err) },
				BrokerTokenLifetime: tokenLife,
			})
			if err != nil {
				return err
			}
			// Ready once every cache holds its initial list: a standby
			// replica too, whose caches run elected or not.
			go func() {
				if err := c.WaitForSync(ctx); err == nil {
					rt.SetReady("startup", nil)
				}
			}()
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error { return c.Run(gctx) })
			g.Go(func() error {
				return clusterset.Watch(gctx, clusterset.Read, brokerReader, policy, PolicyCheckInterval, rt.Log)
			})
			return g.Wait()
		})
	fs := cmd.Flags()
	fs.DurationVar(&deadAfter, "dead-cluster-timeout", deadAfter, "withdraw a cluster's endpoints this long after its liveness Lease expired")
	fs.DurationVar(&liveness, "liveness-lease-duration", liveness, "duration of this cluster's liveness Lease in the broker (renewed every third)")
	fs.DurationVar(&resync, "resync-period", resync, "every Service exported or imported here is re-checked once per period, one at a time, spread evenly over it (the caches report changes only)")
	fs.IntVar(&workers, "workers", workers, "Services synced in parallel")
	fs.Float32Var(&qps, "kube-api-qps", qps, "client-side rate limit of requests to each API server (local and broker)")
	fs.IntVar(&burst, "kube-api-burst", burst, "burst of requests to each API server above --kube-api-qps")
	fs.BoolVar(&leaderElect, "leader-elect", leaderElect, "elect one acting replica per cluster")
	fs.DurationVar(&tokenLife, "broker-token-lifetime", tokenLife, "rotate the broker token in Secret causeway-broker of --namespace, requesting tokens valid this long (at least 10m; 0: use --broker-kubeconfig's token as it is)")
	return cmd
}
