package labcmd

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/causeway-net/causeway/lab/apps"
)

// newLabAppCommand runs the lab's built-in "images" as pod processes.
func newLabAppCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "app",
		Short:  "Built-in programs the lab kubelet runs as pods",
		Hidden: true,
	}
	var w apps.WhereamiConfig
	whereami := &cobra.Command{
		Use:   "whereami",
		Short: "HTTP and UDP server answering with its cluster, namespace, pod and the client's address",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			w.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			return apps.RunWhereami(ctx, w)
		},
	}
	w.AddFlags(whereami.Flags())
	client := &cobra.Command{
		Use:   "client",
		Short: "Idle until stopped (a pod to `lab exec` into)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return apps.RunClient(ctx)
		},
	}
	cmd.AddCommand(whereami, client, newRRCommand(), newProbeCommand(), newRequestsCommand())
	return cmd
}

func newProbeCommand() *cobra.Command {
	var c apps.ProbeConfig
	cmd := &cobra.Command{
		Use:   "probe",
		Short: "Read \"<id> <host:port>\" lines on stdin; print \"<id> ok <unix ns>\" once a TCP connect succeeds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return apps.RunProbe(ctx, c, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	c.AddFlags(cmd.Flags())
	return cmd
}

func newRRCommand() *cobra.Command {
	var c apps.RRConfig
	cmd := &cobra.Command{
		Use:   "rr",
		Short: "Measure UDP request/response latency against a whereami echo; prints JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return apps.RunRR(cmd.Context(), c, cmd.OutOrStdout())
		},
	}
	c.AddFlags(cmd.Flags())
	return cmd
}

func newRequestsCommand() *cobra.Command {
	var c apps.RequestsConfig
	cmd := &cobra.Command{
		Use:   "requests",
		Short: "GET a whereami URL every --interval on a new connection; print \"<unix ns> <cluster>\" (or FAIL) per request",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return apps.RunRequests(ctx, c, cmd.OutOrStdout())
		},
	}
	c.AddFlags(cmd.Flags())
	return cmd
}
