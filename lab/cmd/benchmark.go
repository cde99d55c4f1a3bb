package labcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/bench"
)

func newBenchmarkCommand(dir *string) *cobra.Command {
	var from, to, output string
	r := bench.Runner{Duration: 5 * time.Second, Count: 2000}
	var streams []int
	var segments bool
	var rounds int
	cmd := &cobra.Command{
		Use:   "benchmark",
		Short: "Measure throughput or latency between two lab pods, against a raw veth baseline",
		Long: `Measure the dataplane between two pods of the lab (by default a client pod of
c1 and one of c3, so the path crosses the gateways' tunnel) and, in the same
run, the same measurement over a raw veth pair between two fresh network
namespaces. Every figure is reported with its ratio to that baseline.

A server pod in another cluster than the client is reached the way any
pod reaches it in every lab shape, globalnet or not: through the
clusterset VIP of a Service exported for the benchmark (the server pod
labelled causeway.dev/benchmark, Service and ServiceExport
causeway-bench-<pod> with the benchmark's ports), removed afterwards.`,
	}
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
	setup := func(cmd *cobra.Command) (client, server bench.Endpoint, base *bench.Baseline, cleanup func(), err error) {
		st, err := lab.Load(*dir)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if r.Self, err = os.Executable(); err != nil {
			return nil, nil, nil, nil, err
		}
		if r.IPerf3, err = exec.LookPath("iperf3"); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("iperf3 is needed: %w", err)
		}
		c, err := bench.NewLabPod(cmd.Context(), st, from)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		s, err := bench.NewLabPod(cmd.Context(), st, to)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		unexpose, err := s.ExposeTo(cmd.Context(), c, 2*time.Minute)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if base, err = bench.NewBaseline(fmt.Sprintf("cwb%d-", os.Getpid()%100000)); err != nil {
			unexpose()
			return nil, nil, nil, nil, err
		}
		return c, s, base, func() { base.Close(); unexpose() }, nil
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
		Long: `Measure TCP throughput with iperf3 from the --from pod to the --to pod, and
over a raw veth pair in the same run (1 and 4 streams by default).

With --segments, measure the cross-cluster path piece by piece instead, from
the cluster of --from to the cluster of --to, each piece added to the one
before: node network (pod to pod inside the server's cluster, across its
nodes), tunnel (gateway node to gateway node through the clusterset VIP:
gateways, cable, globalnet when on), + overlay (the client on a non-gateway
node), full path (both pods on non-gateway nodes). These and the baseline are
measured with every lab control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, which share the cores with the
datapath here but not on a real cluster's nodes) SIGSTOPped for the
measurement and resumed between two; a last row measures the full path with
them running. Each piece gets the iperf3 figures with their ratio to raw
veth, the machine's busy CPU seconds per GB moved (every process,
/proc/stat), and UDP request/response p50/p99, each the median over
--rounds rounds. The benchmark's pods (namespace default,
causeway-bench-<node>) and exports are removed afterwards.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if segments {
				return runSegments(cmd, *dir, from, to, output, bench.Segments{Runner: r, Streams: streams, Rounds: rounds, Timeout: 2 * time.Minute})
			}
			client, server, base, cleanup, err := setup(cmd)
			if err != nil {
				return err
			}
			defer cleanup()
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
	throughput.Flags().BoolVar(&segments, "segments", false, "measure the path piece by piece (see above) between the clusters of --from and --to")
	throughput.Flags().IntVar(&r.Count, "count", r.Count, "request/response round trips per segment and round (--segments)")
	throughput.Flags().IntVar(&rounds, "rounds", 3, "rounds of measurements (--segments): each figure is the median over them")

	latency := &cobra.Command{
		Use:   "latency",
		Short: "UDP request/response latency (sequential round trips)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, server, base, cleanup, err := setup(cmd)
			if err != nil {
				return err
			}
			defer cleanup()
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
	cmd.AddCommand(throughput, latency, newPropagationCommand(dir, &output), newScaleCommand(dir, &output), newSoakCommand(dir, &output))
	return cmd
}

// runLabBenchmark runs a benchmark that adds objects to the lab in dir:
// it loads the lab into p (and prepare, if set), removes what an earlier,
// interrupted run left (cleanup), calls run, and cleans up after it
// within timeout, after an interrupt (SIGINT, SIGTERM) too.
func runLabBenchmark(cmd *cobra.Command, dir string, p *bench.Propagation, timeout time.Duration,
	prepare func(*lab.State), cleanup, run func(context.Context) error) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	st, err := lab.Load(dir)
	if err != nil {
		return err
	}
	if p.Self, err = os.Executable(); err != nil {
		return err
	}
	p.Lab, p.Progress = st, cmd.ErrOrStderr()
	if prepare != nil {
		prepare(st)
	}
	if err := cleanup(ctx); err != nil {
		return fmt.Errorf("remove leftovers of an earlier run: %w", err)
	}
	err = run(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if cerr := cleanup(cctx); cerr != nil {
		err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
	}
	return err
}

// defaultPropagation is what `benchmark propagation` and `benchmark
// scale` measure export → reachable with unless told otherwise: Services
// of c1 backed by the demo's whereami pods, reached from c3's client pod.
func defaultPropagation() bench.Propagation {
	return bench.Propagation{
		Exporter:   "c1",
		Client:     "c3/demo/client",
		Namespace:  lab.DemoNamespace,
		Selector:   map[string]string{"app": "whereami"},
		Port:       80,
		TargetPort: 8080,
		Timeout:    2 * time.Minute,
		Poll:       2 * time.Millisecond,
	}
}

// newPropagationCommand is `causeway-lab benchmark propagation`.
func newPropagationCommand(dir, output *string) *cobra.Command {
	p := defaultPropagation()
	services, removals := 50, 20
	cmd := &cobra.Command{
		Use:   "propagation",
		Short: "Export → reachable via the clusterset VIP, and endpoint removed → gone from every node's VIP map",
		Long: `Measure the two convergence targets end to end in the lab (--from/--to do
not apply here):

  export: create --services Services in --export-cluster backed by the demo's
  whereami pods and export them one at a time; for each, the time from
  creating the ServiceExport until its ServiceImport (with the VIP) appears
  in the client's cluster, and until a TCP connect from --client to
  VIP:port succeeds (polled every 10 ms from inside the pod: eBPF connect4
  translation on its node, route to the gateway, tunnel, backend).

  removal: export a Service of its own, and --removals times add a backend
  pod, wait until it is in the VIP backend map of every node of every
  cluster (the route agents' pinned BPF maps, read every 2 ms), delete the
  pod and time until its address is gone from every node's map.

Everything the benchmark creates carries the label
causeway.dev/benchmark=propagation and is deleted at the end (and at the
start, should an earlier run have been interrupted).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res propagationResult
			err := runLabBenchmark(cmd, *dir, &p, p.Timeout, nil, p.Cleanup, func(ctx context.Context) error {
				var err error
				res, err = runPropagation(ctx, &p, services, removals)
				return err
			})
			if err != nil {
				return err
			}
			return printPropagation(cmd, *output, &p, res)
		},
	}
	f := cmd.Flags()
	f.IntVar(&services, "services", services, "services to export one at a time (0 skips the export measurement)")
	f.IntVar(&removals, "removals", removals, "backend pods to remove one at a time (0 skips the removal measurement)")
	f.StringVar(&p.Exporter, "export-cluster", p.Exporter, "cluster the services are created and exported in")
	f.StringVar(&p.Client, "client", p.Client, "pod of another cluster that connects to the VIPs, <cluster>/<namespace>/<pod>")
	f.DurationVar(&p.Timeout, "timeout", p.Timeout, "bound of one step (one export, one removal)")
	return cmd
}

// propagationResult is what `benchmark propagation` reports.
type propagationResult struct {
	Services int                   `json:"services"`
	Removals int                   `json:"removals"`
	Export   *bench.ExportResult   `json:"export,omitempty"`
	Withdraw *bench.WithdrawResult `json:"withdraw,omitempty"`
}

func runPropagation(ctx context.Context, p *bench.Propagation, services, removals int) (propagationResult, error) {
	res := propagationResult{Services: services, Removals: removals}
	if services > 0 {
		e, err := p.MeasureExport(ctx, services)
		if err != nil {
			return res, fmt.Errorf("export: %w", err)
		}
		res.Export = &e
	}
	if removals > 0 {
		w, err := p.MeasureWithdraw(ctx, removals)
		if err != nil {
			return res, fmt.Errorf("removal: %w", err)
		}
		res.Withdraw = &w
	}
	return res, nil
}

func printPropagation(cmd *cobra.Command, output string, p *bench.Propagation, res propagationResult) error {
	if output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	if e := res.Export; e != nil {
		printExport(tw, p, e)
	}
	if w := res.Withdraw; w != nil {
		if res.Export != nil {
			fmt.Fprintln(tw, "\t\t\t\t\t")
		}
		fmt.Fprintf(tw, "FROM BACKEND POD DELETED IN %s TO GONE FROM\tN\tP50 ms\tP90 ms\tP99 ms\tMAX ms\n", p.Exporter)
		for _, c := range w.Clusters {
			statsRow(tw, fmt.Sprintf("VIP maps of %s (%d nodes)", c.Cluster, c.Nodes), c.Stats)
		}
		statsRow(tw, "VIP maps of every node", w.All)
	}
	return tw.Flush()
}

func statsRow(w io.Writer, name string, s bench.Stats) {
	fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\n", name, s.N, s.P50MS, s.P90MS, s.P99MS, s.MaxMS)
}

// printExport writes the rows of an export → reachable measurement.
func printExport(w io.Writer, p *bench.Propagation, e *bench.ExportResult) {
	client, _, _ := strings.Cut(p.Client, "/")
	fmt.Fprintf(w, "FROM SERVICEEXPORT CREATED IN %s TO\tN\tP50 ms\tP90 ms\tP99 ms\tMAX ms\n", p.Exporter)
	statsRow(w, "ServiceImport with VIP in "+client, e.Imported)
	statsRow(w, "backend in the VIP map of the client's node", e.Programmed)
	statsRow(w, "TCP connect to VIP ok from "+p.Client, e.Reachable)
}

// newScaleCommand is `causeway-lab benchmark scale`.
func newScaleCommand(dir, output *string) *cobra.Command {
	s := bench.Scale{Members: 10, Services: 100, Writers: 16, Exports: 20, Steady: time.Minute, ResyncCluster: "c2", Timeout: 30 * time.Minute}
	p := defaultPropagation()
	cmd := &cobra.Command{
		Use:   "scale",
		Short: "The lab's real daemons while the broker holds --members simulated members exporting --services Services each",
		Long: `Add --members simulated members to the lab's broker, each a member identity
as ` + "`causewayctl deploy-broker`" + ` creates it, each exporting the same --services
Services (namespace ` + bench.ScaleNamespace + `) with its own broker credentials as its
MCS controller would: its liveness Lease renewed every second, one
ServiceExportRecord per Service built by the product's record code, the
Service's clusterset VIP allocated by the product's allocator. Simulated
members run no gateway and publish no gateway Endpoint: the real members
import their Services with their backends not ready and build no tunnel
to them. Then, with the lab's real members (c1, c2, c3: their gateways,
route agents, MCS and globalnet controllers as the chart runs them):

  converge: from the first write until every real member holds a
  ServiceImport with a VIP of every Service, listing every simulated member;
  then until every real member's MCS controller has an empty work queue
  (causeway_mcs_queue_depth 0 at three scrapes a second apart);

  export → reachable: --exports new exports in --export-cluster, each
  timed until a TCP connect from --client to its VIP succeeds (as
  ` + "`benchmark propagation`" + ` measures it) while the simulated members stay steady;

  daemons: RSS (VmRSS, VmHWM from /proc), Go heap (go_memstats_heap_alloc_bytes)
  and CPU seconds (process_cpu_seconds_total, during the benchmark) of
  every real daemon, its metrics read inside its network namespace; a
  daemon restarted during the run (a liveness probe, a crash) is marked
  restarted, its CPU seconds those of its new process;

  steady: each real daemon's CPU seconds during --steady after that,
  while nothing changes but the simulated members' Lease renewals;

  broker: etcd's key count and database size, the records, VIP allocations
  and Leases it holds, its API server's open watches and watch events per
  second during the export samples;

  resync: --resync-cluster's MCS controller Pod deleted, timed from the
  start of the new controller process until its causeway_mcs_imports gauge
  is back where it was.

When a step fails, what was measured before it is printed and the
command fails. Everything is removed at the end, on an interrupt too (and leftovers of
an interrupted run at the start): the simulated members' namespaces,
identities and VIP allocations in the broker, the namespace
` + bench.ScaleNamespace + ` in every real member, the export samples' Services.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			prepare := func(st *lab.State) { s.Lab, s.Progress, s.Export = st, cmd.ErrOrStderr(), &p }
			cleanup := func(ctx context.Context) error { return errors.Join(s.Cleanup(ctx), p.Cleanup(ctx)) }
			var res bench.ScaleResult
			err := runLabBenchmark(cmd, *dir, &p, s.Timeout, prepare, cleanup, func(ctx context.Context) error {
				var err error
				res, err = s.Run(ctx)
				return err
			})
			if res.WriteSeconds == 0 {
				return err // nothing measured
			}
			// What was measured before a step failed is printed too.
			return errors.Join(err, printScale(cmd, *output, &p, res))
		},
	}
	f := cmd.Flags()
	f.IntVar(&s.Members, "members", s.Members, "simulated members added to the broker")
	f.IntVar(&s.Services, "services", s.Services, "Services each simulated member exports (the same names in every member)")
	f.IntVar(&s.Exports, "exports", s.Exports, "export → reachable samples in the real members")
	f.IntVar(&s.Writers, "writers", s.Writers, "concurrent API requests of the simulated members")
	f.DurationVar(&s.Steady, "steady", s.Steady, "how long the daemons' CPU time is measured while nothing changes")
	f.StringVar(&s.ResyncCluster, "resync-cluster", s.ResyncCluster, "real member whose MCS controller is restarted to time its full resync")
	f.StringVar(&p.Exporter, "export-cluster", p.Exporter, "real member the export samples are created in")
	f.StringVar(&p.Client, "client", p.Client, "pod of another real member that connects to the samples' VIPs, <cluster>/<namespace>/<pod>")
	f.DurationVar(&s.Timeout, "timeout", s.Timeout, "bound of each wait (convergence, resync, cleanup)")
	return cmd
}

func printScale(cmd *cobra.Command, output string, p *bench.Propagation, res bench.ScaleResult) error {
	if output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	const mib = 1 << 20
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SIMULATED MEMBERS\tSERVICES EACH\tWRITTEN IN s\tIMPORTED EVERYWHERE AFTER s\tQUEUES EMPTY AFTER s\tLEASE RENEWALS FAILED")
	fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.1f\t%.1f\t%d\n", res.Members, res.Services, res.WriteSeconds, res.ConvergeSeconds, res.SettledSeconds, res.LeaseRenewalFailures)
	// A section is printed once measured (a failed step ends the run).
	if len(res.Daemons) > 0 {
		fmt.Fprintln(tw, "\t\t\t")
		fmt.Fprintf(tw, "DAEMON\tPID\tRSS MiB\tPEAK RSS MiB\tHEAP MiB\tCPU s (BENCHMARK)\tCPU s (STEADY %.0f s)\tCPU s (TOTAL)\n", res.SteadySeconds)
		for _, d := range res.Daemons {
			name := d.Name
			if d.Restarted {
				name += " (restarted)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\n", name, d.PID, float64(d.RSSBytes)/mib, float64(d.PeakRSSBytes)/mib,
				float64(d.HeapBytes)/mib, d.CPUSeconds, d.SteadyCPUSeconds, d.TotalCPUSeconds)
		}
	}
	if e := res.Export; e != nil {
		fmt.Fprintln(tw, "\t\t\t\t\t\t")
		printExport(tw, p, e)
	}
	if r := res.Resync; r.Seconds > 0 {
		fmt.Fprintln(tw, "\t\t\t\t\t\t")
		fmt.Fprintln(tw, "RESYNC\tIMPORTS\tFROM PROCESS START s\tFROM POD DELETION s")
		fmt.Fprintf(tw, "MCS controller of %s\t%.0f\t%.2f\t%.2f\n", r.Cluster, r.Imports, r.Seconds, r.FromDeleteSeconds)
	}
	if b := res.Broker; b.Objects > 0 {
		fmt.Fprintln(tw, "\t\t\t")
		fmt.Fprintln(tw, "BROKER\tETCD KEYS\tETCD DB MiB\tRECORDS\tVIP ALLOCATIONS\tLEASES\tWATCHES (CAUSEWAY, LEASES)\tWATCH EVENTS/s")
		fmt.Fprintf(tw, "broker\t%d\t%.1f\t%d\t%d\t%d\t%d (%d)\t%.1f\n", b.Objects, float64(b.DBBytes)/mib, b.Records, b.VIPAllocations, b.Leases,
			b.Watches, b.CausewayWatches, b.WatchEventsPerSecond)
	}
	return tw.Flush()
}

// newSoakCommand is `causeway-lab benchmark soak`.
func newSoakCommand(dir, output *string) *cobra.Command {
	p := defaultPropagation()
	s := bench.Soak{Samples: 2, Failover: "c2", Duration: 30 * time.Minute, Interval: 100 * time.Millisecond,
		Settle: 30 * time.Second, Timeout: 2 * time.Minute}
	var url string
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Churn the lab for --duration with traffic flowing; compare every daemon and node before and after",
		Long: `While --client requests --url (default: the clusterset VIP of demo/whereami,
exported from c1 and c2 for the soak when not exported yet) every --interval,
each request on a new connection, repeat until --duration has passed:

  export: --samples Services exported from --export-cluster, each timed
  until a TCP connect from --client to its VIP succeeds, then unexported
  and awaited gone from every node's VIP map;

  scale: --failover-cluster's whereami Deployment scaled to 2 and back to 1;

  gateway failover (the lab up with --gateways 2): --failover-cluster's active gateway process killed
  (SIGKILL), until another node is active and the killed one is back;

  restarts: --failover-cluster's kube-apiserver, --export-cluster's MCS
  controller and the route agent of --client's node killed (SIGKILL) and
  awaited back.

Gateway failovers and scale-downs are fault windows (from the fault until
the new active gateway or the pod's removal, plus 1 s): a request may fail
in one, and each window reports its failures; a request failing outside
every window is a failure of the soak. Every round ends with the active
gateway back where it started. A warm-up round comes first; --settle after
it, every daemon's RSS and goroutines and every node's routes, nftables set
and map elements, VIP map entries and long-lived conntrack entries (more
than 5 min to live: established TCP, not TIME_WAIT or UDP) are measured, and
again --settle after the last round, and compared: routes (each one that
differs is named), nftables
elements and VIP entries must be back exactly, RSS within +25 % + 8 MiB,
goroutines within +10 % + 10, conntrack entries within +50 % + 200. The
command fails when a request failed outside the windows or a figure grew
beyond its tolerance.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res bench.SoakResult
			var unexport func(context.Context) error
			prepare := func(st *lab.State) { s.Lab, s.Self, s.Export, s.Progress = st, p.Self, &p, cmd.ErrOrStderr() }
			err := runLabBenchmark(cmd, *dir, &p, s.Timeout, prepare, p.Cleanup, func(ctx context.Context) error {
				var err error
				if s.URL = url; s.URL == "" {
					if s.URL, unexport, err = bench.ExportWhereami(ctx, s.Lab, p.Client, []string{p.Exporter, s.Failover}, s.Timeout); err != nil {
						return err
					}
				}
				res, err = s.Run(ctx)
				return err
			})
			if unexport != nil {
				err = errors.Join(err, unexport(context.WithoutCancel(cmd.Context())))
			}
			if err != nil {
				return err
			}
			if err := printSoak(cmd, *output, res); err != nil {
				return err
			}
			if res.FailedOutside > 0 || len(res.Growth) > 0 {
				return fmt.Errorf("soak failed: %d requests failed outside the fault windows; %d figures grew beyond their tolerance", res.FailedOutside, len(res.Growth))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&s.Duration, "duration", s.Duration, "how long rounds of churn are started")
	f.DurationVar(&s.Interval, "interval", s.Interval, "time between two requests of the client")
	f.DurationVar(&s.Settle, "settle", s.Settle, "wait after the last round before the final snapshot")
	f.IntVar(&s.Samples, "samples", s.Samples, "Services exported and unexported per round")
	f.StringVar(&s.Failover, "failover-cluster", s.Failover, "cluster whose gateways fail over, whose API server restarts and whose whereami scales")
	f.StringVar(&p.Exporter, "export-cluster", p.Exporter, "cluster the churn's Services are exported from, whose MCS controller restarts")
	f.StringVar(&p.Client, "client", p.Client, "pod that requests --url and connects to the churn's VIPs, <cluster>/<namespace>/<pod>")
	f.StringVar(&url, "url", "", "whereami URL the client requests (default: the clusterset VIP of demo/whereami)")
	f.DurationVar(&s.Timeout, "timeout", s.Timeout, "bound of each wait")
	return cmd
}

func printSoak(cmd *cobra.Command, output string, res bench.SoakResult) error {
	if output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
	}
	const mib = 1 << 20
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SECONDS\tROUNDS\tREQUESTS\tFAILED\tFAILED OUTSIDE WINDOWS\tEXPORT → REACHABLE P50 ms\tP99 ms")
	fmt.Fprintf(tw, "%.0f\t%d\t%d\t%d\t%d\t%.0f\t%.0f\n", res.Seconds, res.Rounds, res.Requests, res.Failed, res.FailedOutside, res.Export.P50MS, res.Export.P99MS)
	fmt.Fprintln(tw, "\t\t\t\t\t\t")
	fmt.Fprintln(tw, "FAULT WINDOW\tSECONDS\tFAILED\tFAILED FOR s")
	for _, w := range res.Windows {
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%.2f\n", w.Fault, w.End.Sub(w.Start).Seconds(), w.Failed, w.FailedSeconds)
	}
	fmt.Fprintln(tw, "\t\t\t")
	fmt.Fprintln(tw, "DAEMON\tRSS MiB BEFORE\tAFTER\tGOROUTINES BEFORE\tAFTER")
	for _, b := range res.Before.Daemons {
		a, _ := res.After.Daemon(b.Name)
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%d\t%d\n", b.Name, float64(b.RSSBytes)/mib, float64(a.RSSBytes)/mib, b.Goroutines, a.Goroutines)
	}
	fmt.Fprintln(tw, "\t\t\t\t")
	fmt.Fprintln(tw, "NODE\tROUTES BEFORE\tAFTER\tNFT ELEMENTS BEFORE\tAFTER\tVIP SERVICES/BACKENDS BEFORE\tAFTER\tCONNTRACK BEFORE\tAFTER")
	for _, b := range res.Before.Nodes {
		a, _ := res.After.Node(b.Name)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d/%d\t%d/%d\t%d\t%d\n", b.Name, b.Routes, a.Routes, b.NftElements, a.NftElements,
			b.VIPServices, b.VIPBackends, a.VIPServices, a.VIPBackends, b.Conntrack, a.Conntrack)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range res.Growth {
		fmt.Fprintln(cmd.OutOrStdout(), "GROWTH: "+g)
	}
	return nil
}

// runSegments is `benchmark throughput --segments`.
func runSegments(cmd *cobra.Command, dir, from, to, output string, seg bench.Segments) error {
	st, err := lab.Load(dir)
	if err != nil {
		return err
	}
	if seg.Runner.Self, err = os.Executable(); err != nil {
		return err
	}
	if seg.Runner.IPerf3, err = exec.LookPath("iperf3"); err != nil {
		return fmt.Errorf("iperf3 is needed: %w", err)
	}
	clientCluster, _, _ := strings.Cut(from, "/")
	serverCluster, _, _ := strings.Cut(to, "/")
	if clientCluster == serverCluster {
		return fmt.Errorf("--segments: --from and --to are in the same cluster %s; the segments cross clusters", clientCluster)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	seg.Lab, seg.Client, seg.Server = st, clientCluster, serverCluster
	segs, err := seg.Run(ctx)
	if err != nil {
		return err
	}
	if output == "json" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(segs)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEGMENT\tSTREAMS\tGBIT/S\tRATIO TO VETH\tCPU S/GB\tRR P50 µs\tRR P99 µs")
	for _, s := range segs {
		for _, t := range s.Throughput {
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.3f\t%.2f\t%.1f\t%.1f\n", s.Name, t.Streams, t.Gbps, t.RatioToVeth, t.CPUSecondsPerGB, s.P50US, s.P99US)
		}
	}
	fmt.Fprintln(tw)
	for _, s := range segs {
		fmt.Fprintf(tw, "%s:\t%s → %s\n", s.Name, s.From, s.To)
	}
	return tw.Flush()
}
