// Package ctl is causewayctl, the user's command line: deploying a
// broker, joining clusters, exporting services, showing and diagnosing
// the ClusterSet's state down to each node, and gathering a support
// archive. It talks to the clusters through the Kubernetes API only.
package ctl

import (
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// NewCommand returns causewayctl's root command.
func NewCommand() *cobra.Command {
	// The Kubernetes client libraries log through logr: only their
	// warnings and errors reach the user.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	root := &cobra.Command{
		Use:   "causewayctl",
		Short: "Causeway: Kubernetes Services reachable across clusters (Multi-Cluster Services API)",
		Long: `causewayctl drives Causeway, a cross-cluster dataplane implementing the
Kubernetes Multi-Cluster Services API: export a Service from one cluster and
reach it from pods of every cluster of the ClusterSet through a clusterset VIP
or <svc>.<ns>.svc.clusterset.local.`,
		SilenceUsage: true,
	}
	root.AddCommand(newVersionCommand(), newBenchmarkCommand())
	root.AddCommand(newExportCommand(), newUnexportCommand(), newShowCommand(), newDeployBrokerCommand(), newJoinCommand(), newUninstallCommand(), newDiagnoseCommand(), newGatherCommand())
	return root
}
