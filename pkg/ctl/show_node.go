package ctl

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/pkg/nodeview"
)

// showNodeSkipsTable is the routing table `show node` leaves out of its
// human view (the kernel's local table; -o json has every table).
const showNodeSkipsTable = 255

func newShowNodeCommand(cs *clusterSetFlags, out *outputFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "node <cluster>/<node>",
		Short: "Everything Causeway holds on one node: links, routes, rules, neighbours, FDB, tunnels, IPsec SAs, nftables, iptables, VIP maps",
		Long: `show node prints one node's view as the node holds it: links with their
addresses, MTU and counters, routes of every table (-o json includes the
kernel's local table), policy rules, neighbours and FDB entries, WireGuard
devices and peers (endpoint, handshake age, bytes), kernel IPsec SAs,
Causeway's nftables tables and iptables chains with their counters, and
the VIP datapath's pinned maps.

It runs the route agent's inspect command in the route agent Pod of the
node through pods/exec: the user needs create on pods/exec in
causeway-system, no access to the node.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			clusters, err := cs.clusters()
			if err != nil {
				return err
			}
			nodes, err := selectNodes(cmd.Context(), clusters, args[0])
			if err != nil {
				return err
			}
			v, err := nodes[0].inspect(cmd.Context())
			if err != nil {
				return err
			}
			if out.format == "json" {
				return out.print(cmd.OutOrStdout(), v, nil, nil)
			}
			return printNode(cmd.OutOrStdout(), args[0], v)
		},
	}
}

// printNode writes the human view of a node: one table per section.
func printNode(w io.Writer, name string, v *nodeview.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	section := func(title string, header string) {
		fmt.Fprintf(tw, "\n%s\n%s\n", title, header)
	}
	fmt.Fprintf(tw, "NODE %s (hostname %s, read %s)\n", name, v.Hostname, v.Time.Format("2006-01-02 15:04:05Z"))
	for _, e := range v.Errors {
		fmt.Fprintf(tw, "error: %s\n", e)
	}
	section("SYSCTLS", "NAME\tVALUE")
	for _, k := range slices.Sorted(maps.Keys(v.Sysctls)) {
		fmt.Fprintf(tw, "%s\t%s\n", k, v.Sysctls[k])
	}
	section("LINKS", "NAME\tKIND\tSTATE\tMTU\tADDRESSES\tRX BYTES\tTX BYTES")
	for _, l := range v.Links {
		state := "down"
		if l.Up {
			state = "up"
		}
		kind := l.Kind
		if l.VNI != 0 {
			kind += fmt.Sprintf(" vni %d port %d", l.VNI, l.Port)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\n", l.Name, kind, state, l.MTU, dash(strings.Join(l.Addrs, " ")), l.RxBytes, l.TxBytes)
	}
	section("ROUTES", "TABLE\tTYPE\tDESTINATION\tVIA\tDEV\tPROTO\tMETRIC")
	for _, r := range v.Routes {
		if r.Table != showNodeSkipsTable {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\n", r.Table, r.Type, r.Dst, dash(r.Gw), dash(r.Dev), r.Proto, r.Metric)
		}
	}
	section("RULES", "FAMILY\tPRIORITY\tFROM\tTO\tMARK\tTABLE")
	for _, r := range v.Rules {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", r.Family, r.Priority, dash(r.Src), dash(r.Dst), dash(r.Mark), r.Table)
	}
	section("NEIGHBOURS", "DEV\tIP\tMAC\tSTATE")
	for _, n := range v.Neighbours {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Dev, n.IP, dash(n.MAC), n.State)
	}
	section("FDB", "DEV\tMAC\tDESTINATION")
	for _, f := range v.FDB {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.Dev, f.MAC, dash(f.Dst))
	}
	section("WIREGUARD", "DEVICE\tPEER\tENDPOINT\tALLOWED IPS\tHANDSHAKE AGE\tRX BYTES\tTX BYTES")
	for _, d := range v.WireGuard {
		fmt.Fprintf(tw, "%s (%s, port %d)\t%s\t\t\t\t\t\n", d.Name, d.Type, d.ListenPort, d.PublicKey)
		for _, p := range d.Peers {
			age := "never"
			if p.HandshakeAgeSeconds >= 0 {
				age = fmt.Sprintf("%.0fs", p.HandshakeAgeSeconds)
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%d\t%d\n", p.PublicKey, dash(p.Endpoint), strings.Join(p.AllowedIPs, " "), age, p.RxBytes, p.TxBytes)
		}
	}
	section("IPSEC SAS", "SRC\tDST\tPROTO\tMODE\tSPI\tBYTES\tPACKETS")
	for _, s := range v.IPsec {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.Src, s.Dst, s.Proto, s.Mode, s.SPI, s.Bytes, s.Packets)
	}
	section("IPTABLES", "FAMILY\tTABLE\tCHAIN\tRULE")
	for _, c := range v.Iptables {
		for _, r := range c.Rules {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Family, c.Table, c.Chain, r)
		}
		if len(c.Rules) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t(empty)\n", c.Family, c.Table, c.Chain)
		}
	}
	section("VIP MAPS", "VIP\tBACKENDS (wWEIGHT)\tAFFINITY")
	for _, s := range v.VIPs {
		bs := make([]string, 0, len(s.Backends))
		for _, b := range s.Backends {
			bs = append(bs, fmt.Sprintf("%s w%d", b.Address, b.Weight))
		}
		fmt.Fprintf(tw, "%s:%d/%s\t%s\t%ds\n", s.VIP, s.Port, s.Protocol, dash(strings.Join(bs, ", ")), s.AffinitySeconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range v.Nftables {
		fmt.Fprintf(w, "\nNFTABLES %s %s\n%s", t.Family, t.Name, t.Text)
	}
	return nil
}
