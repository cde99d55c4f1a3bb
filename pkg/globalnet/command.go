// Package globalnet gives a cluster whose CIDRs overlap another's unique
// global addresses: a global CIDR from the clusterset supernet, a global
// IP:port pair per exported service port (ingress DNAT) and global source
// addresses for egress (SNAT).
package globalnet

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/pkg/daemon"
)

// MetricsPort is globalnet's default /metrics port.
const MetricsPort = 9533

// NewCommand returns the globalnet daemon's command.
func NewCommand() *cobra.Command {
	opts := daemon.DefaultOptions(MetricsPort)
	var supernet string
	cmd := daemon.Command("globalnet",
		"Causeway globalnet: global IP:port addresses when cluster CIDRs overlap",
		`Globalnet runs beside the active gateway. It allocates this cluster's
global CIDR from the clusterset supernet, gives every exported service
port a unique global IP:port pair, and SNATs egress traffic to global
addresses, programming netfilter in one transaction per sync.`,
		&opts, func(ctx context.Context, rt *daemon.Runtime) error {
			return rt.IdleUntilStopped(ctx, &opts)
		})
	cmd.Flags().StringVar(&supernet, "supernet", "242.0.0.0/8", "clusterset supernet global CIDRs are allocated from")
	return cmd
}
