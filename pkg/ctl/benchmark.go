package ctl

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/pkg/bench"
	"github.com/causeway-net/causeway/pkg/lab"
)

func newBenchmarkCommand() *cobra.Command {
	dir := lab.DefaultDir
	if d := os.Getenv("CAUSEWAY_LAB_DIR"); d != "" {
		dir = d
	}
	var from, to, output string
	r := bench.Runner{Duration: 5 * time.Second, Count: 2000}
	var streams []int
	cmd := &cobra.Command{
		Use:   "benchmark",
		Short: "Measure throughput or latency between two lab pods, against a raw veth baseline",
		Long: `Measure the dataplane between two pods of the lab (by default a client pod of
c1 and one of c3, so the path crosses the gateways' tunnel) and, in the same
run, the same measurement over a raw veth pair between two fresh network
namespaces. Every figure is reported with its ratio to that baseline.`,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", dir, "the lab's state directory")
	cmd.PersistentFlags().StringVar(&from, "from", "c1/demo/client", "client pod, <cluster>/<namespace>/<pod>")
	cmd.PersistentFlags().StringVar(&to, "to", "c3/demo/client", "server pod, <cluster>/<namespace>/<pod>")
	cmd.PersistentFlags().StringVarP(&output, "output", "o", "table", "table or json")

	type row struct {
		Path    string  `json:"path"`
		Streams int     `json:"streams,omitempty"`
		Gbps    float64 `json:"gbps,omitempty"`
		P50US   float64 `json:"p50US,omitempty"`
		P99US   float64 `json:"p99US,omitempty"`
		Ratio   float64 `json:"ratioToVeth"`
	}
	setup := func(cmd *cobra.Command) (client, server bench.Endpoint, base *bench.Baseline, err error) {
		st, err := lab.Load(dir)
		if err != nil {
			return nil, nil, nil, err
		}
		if r.Self, err = os.Executable(); err != nil {
			return nil, nil, nil, err
		}
		if r.IPerf3, err = exec.LookPath("iperf3"); err != nil {
			return nil, nil, nil, fmt.Errorf("iperf3 is needed: %w", err)
		}
		c, err := bench.NewLabPod(cmd.Context(), st, from)
		if err != nil {
			return nil, nil, nil, err
		}
		s, err := bench.NewLabPod(cmd.Context(), st, to)
		if err != nil {
			return nil, nil, nil, err
		}
		base, err = bench.NewBaseline(fmt.Sprintf("cwb%d-", os.Getpid()%100000))
		return c, s, base, err
	}
	print := func(cmd *cobra.Command, rows []row, latency bool) error {
		if output == "json" {
			return json.NewEncoder(cmd.OutOrStdout()).Encode(rows)
		}
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		if latency {
			fmt.Fprintln(tw, "PATH\tP50 µs\tP99 µs\tRATIO (p50, veth = 1)")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\n", r.Path, r.P50US, r.P99US, r.Ratio)
			}
		} else {
			fmt.Fprintln(tw, "PATH\tSTREAMS\tGBIT/S\tRATIO TO VETH")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\n", r.Path, r.Streams, r.Gbps, r.Ratio)
			}
		}
		return tw.Flush()
	}

	throughput := &cobra.Command{
		Use:   "throughput",
		Short: "TCP throughput with iperf3 (1 and 4 streams by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, server, base, err := setup(cmd)
			if err != nil {
				return err
			}
			defer base.Close()
			var rows []row
			for _, n := range streams {
				b, err := r.MeasureThroughput(cmd.Context(), base.B, base.A, n)
				if err != nil {
					return err
				}
				l, err := r.MeasureThroughput(cmd.Context(), server, client, n)
				if err != nil {
					return err
				}
				rows = append(rows,
					row{Path: "veth (baseline)", Streams: n, Gbps: b.Gbps, Ratio: 1},
					row{Path: client.Name() + " → " + server.Name(), Streams: n, Gbps: l.Gbps, Ratio: l.Gbps / b.Gbps})
			}
			return print(cmd, rows, false)
		},
	}
	throughput.Flags().IntSliceVar(&streams, "streams", []int{1, 4}, "parallel TCP streams, one measurement each")
	throughput.Flags().DurationVar(&r.Duration, "duration", r.Duration, "length of one measurement")

	latency := &cobra.Command{
		Use:   "latency",
		Short: "UDP request/response latency (sequential round trips)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, server, base, err := setup(cmd)
			if err != nil {
				return err
			}
			defer base.Close()
			b, err := r.MeasureLatency(cmd.Context(), base.B, base.A)
			if err != nil {
				return err
			}
			l, err := r.MeasureLatency(cmd.Context(), server, client)
			if err != nil {
				return err
			}
			return print(cmd, []row{
				{Path: "veth (baseline)", P50US: b.P50US, P99US: b.P99US, Ratio: 1},
				{Path: client.Name() + " → " + server.Name(), P50US: l.P50US, P99US: l.P99US, Ratio: l.P50US / b.P50US},
			}, true)
		},
	}
	latency.Flags().IntVar(&r.Count, "count", r.Count, "number of round trips")
	cmd.AddCommand(throughput, latency)
	return cmd
}
