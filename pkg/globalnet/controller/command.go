package controller

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/pkg/daemon"
)

// MetricsPort is the globalnet controller's default /metrics port
// (127.0.0.1).
const MetricsPort = 9533

// HealthPort is the globalnet controller's default /healthz and /readyz
// port (all interfaces; metrics stay on loopback).
const HealthPort = 9543

// NewCommand returns the globalnet daemon's command.
func NewCommand() *cobra.Command {
	opts := daemon.DefaultOptions(MetricsPort, HealthPort)
	var (
		quarantine  = DefaultQuarantine
		resync      = DefaultResyncPeriod
		workers     = DefaultWorkers
		leaderElect = true
	)
	cmd := daemon.Command("globalnet",
		"Causeway globalnet controller: the global IP:port pairs and pod IPs of this cluster's exported Services, and labelled namespaces' egress IPs",
		`The globalnet controller runs once per cluster when globalnet is on
(replicas elect one leader through the Lease causeway-globalnet in
--namespace). Out of this cluster's global CIDR (its mirrored Cluster in
--namespace, which the active gateway claims in the broker and writes), it
gives every port of every exported ClusterSetIP Service a unique (global
IP, global port) pair and every ready pod of an exported headless Service
inside the cluster's pod CIDRs a global IP, and writes each Service's
allocation as a GlobalIngress (the Service's namespace and name). A
namespace labelled causeway.dev/global-egress=<1-8> gets that many
global egress IPs of its own, written with its pods' addresses as the
GlobalEgress named after it. The active gateway translates from those
objects; the MCS controller publishes the exports' addresses in the
export records. A Service no longer exported, or a namespace no longer
labelled, keeps its addresses reserved for --quarantine.`,
		&opts, func(ctx context.Context, rt *daemon.Runtime) error {
			local, err := opts.RESTConfig()
			if err != nil {
				return err
			}
			if err := rt.WaitForAPIServer(ctx, "local cluster", local); err != nil {
				return err
			}
			c, err := New(local, Config{
				ClusterID:      opts.ClusterID,
				Namespace:      opts.Namespace,
				Quarantine:     quarantine,
				ResyncPeriod:   resync,
				Workers:        workers,
				LeaderElection: leaderElect,
				Log:            rt.Log,
				Metrics:        rt.Metrics,
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
			return c.Run(ctx)
		})
	fs := cmd.Flags()
	fs.DurationVar(&quarantine, "quarantine", quarantine, "how long the global addresses of a Service no longer exported, or of a namespace no longer labelled, stay reserved before they are freed")
	fs.DurationVar(&resync, "resync-period", resync, "full resync period")
	fs.IntVar(&workers, "workers", workers, "Services (and namespaces) synced in parallel")
	fs.BoolVar(&leaderElect, "leader-elect", leaderElect, "elect one acting replica per cluster")
	return cmd
}
