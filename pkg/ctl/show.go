package ctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// newShowCommand is `causewayctl show`: the ClusterSet's state, read from
// every member cluster. Each component adds its subcommands to the
// AddCommand list; they share the cluster flags (cs) and the output flag
// (out.format, see printTable).
func newShowCommand() *cobra.Command {
	cs := &clusterSetFlags{}
	out := &outputFlags{}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the ClusterSet's state (exports, imports, VIPs, connections, endpoints, gateways, a node's view) across its clusters",
		Args:  cobra.NoArgs,
	}
	cs.addFlags(cmd.PersistentFlags())
	out.addFlags(cmd.PersistentFlags())
	cmd.AddCommand(
		newShowExportsCommand(cs, out),
		newShowImportsCommand(cs, out),
		newShowVIPsCommand(cs, out),
		newShowNodeCommand(cs, out),
	)
	cmd.AddCommand(newShowGatewayCommands(cs, out)...)
	return cmd
}

// outputFlags select table (default) or JSON output.
type outputFlags struct{ format string }

func (o *outputFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.format, "output", "o", "table", "output format: table or json")
}

// print writes rows as JSON (the rows as they are) or as a table (header +
// cells).
func (o *outputFlags) print(w io.Writer, rows any, header []string, cells [][]string) error {
	switch o.format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(header, "\t"))
		for _, c := range cells {
			fmt.Fprintln(tw, strings.Join(c, "\t"))
		}
		return tw.Flush()
	default:
		return fmt.Errorf("--output %q: want table or json", o.format)
	}
}
