// Package gateway is the gateway engine: candidates on gateway-labelled
// nodes elect one active gateway per cluster, which publishes the
// cluster's Endpoint to the broker and keeps a tunnel to every remote
// active gateway through a pkg/cable driver.
package gateway

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/pkg/daemon"
)

// MetricsPort is the gateway's default /metrics port.
const MetricsPort = 9531

// NewCommand returns the gateway daemon's command.
func NewCommand() *cobra.Command {
	opts := daemon.DefaultOptions(MetricsPort)
	return daemon.Command("gateway",
		"Causeway gateway: elects the active gateway and builds tunnels to remote clusters",
		`The gateway runs on every gateway-labelled node of a cluster (hostNetwork).
One candidate per cluster becomes active through a Lease; it publishes the
cluster's Endpoint to the broker and keeps an encrypted tunnel to every
remote cluster's active gateway.`,
		&opts, func(ctx context.Context, rt *daemon.Runtime) error {
			return rt.IdleUntilStopped(ctx, &opts)
		})
}
