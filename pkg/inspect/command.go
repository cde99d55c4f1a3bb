// Package inspect is the daemons' `inspect` command: it reads the node
// the daemon runs on — links and addresses, routes of every table, rules,
// neighbours and FDB, WireGuard peers, kernel IPsec SAs, Causeway's
// nftables tables and iptables chains with counters, the pinned VIP maps
// — and prints it as one nodeview.Node in JSON. causewayctl runs it in
// the route agent Pod of a node through pods/exec (`show node`, `show
// vips`, `diagnose`, `gather`); it changes nothing on the node.
package inspect

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/pkg/vip"
)

// NewCommand returns the `inspect` subcommand of a daemon that runs in
// the node's network namespace.
func NewCommand() *cobra.Command {
	var bpffs, pinDir string
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Print this node's Causeway state as JSON (links, routes, rules, neighbours, FDB, WireGuard, IPsec, nftables, iptables, VIP maps)",
		Long: `inspect reads what the node this runs on holds — links and addresses, routes
of every table, policy rules, neighbours and FDB, WireGuard devices and
peers, kernel IPsec SAs, Causeway's nftables tables and iptables chains
with their counters, and the VIP datapath's pinned maps — and prints it
as JSON. It changes nothing. causewayctl runs it in the route agent Pod
of a node (show node, show vips, diagnose, gather); run by hand:

  kubectl -n causeway-system exec <route-agent pod> -- /usr/local/bin/route-agent inspect

Parts that cannot be read are listed under "errors".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pinDir == "" {
				pinDir = vip.PinDir(bpffs)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			if err := enc.Encode(Read(pinDir)); err != nil {
				return fmt.Errorf("write the node view: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&bpffs, "bpffs", "/sys/fs/bpf", "bpffs mount the route agent pins under (its --bpffs)")
	cmd.Flags().StringVar(&pinDir, "vip-pin-dir", "", "the VIP datapath's pin directory (the route agent's --vip-pin-dir; default <bpffs>/causeway/vip)")
	return cmd
}
