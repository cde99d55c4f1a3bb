// Package routeagent is the agent on every node: it routes remote cluster
// CIDRs to the active gateway, clamps MSS, and owns the eBPF VIP datapath
// whose maps it keeps equal to the ServiceImports and EndpointSlices.
package routeagent

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/pkg/daemon"
)

// MetricsPort is the route agent's default /metrics port.
const MetricsPort = 9532

// NewCommand returns the route agent's command.
func NewCommand() *cobra.Command {
	opts := daemon.DefaultOptions(MetricsPort)
	var cgroupRoot, bpffs string
	cmd := daemon.Command("route-agent",
		"Causeway route agent: routes to remote clusters and the clusterset VIP datapath",
		`The route agent runs on every node (hostNetwork). It routes remote
cluster CIDRs to the active gateway and loads the eBPF programs that
translate clusterset VIPs to backends at connect() time.`,
		&opts, func(ctx context.Context, rt *daemon.Runtime) error {
			return rt.IdleUntilStopped(ctx, &opts)
		})
	cmd.Flags().StringVar(&cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup v2 directory the VIP programs attach to")
	cmd.Flags().StringVar(&bpffs, "bpffs", "/sys/fs/bpf", "bpffs mount where maps and links are pinned")
	return cmd
}
