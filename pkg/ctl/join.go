package ctl

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"helm.sh/helm/v4/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/install"
	"github.com/causeway-net/causeway/pkg/kube"
)

// joinFlags are join's flags.
type joinFlags struct {
	brokerKubeconfig, joinFile, kubeconfig, clusterID, clusterSet, namespace, out, brokerServer string
	podCIDRs, serviceCIDRs, gatewayNodes, set                                                   []string
	timeout                                                                                     time.Duration
}

func newJoinCommand() *cobra.Command {
	var f joinFlags
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Join a cluster to the ClusterSet: broker identity, and with a join file the whole install",
		Long: `Join a cluster to a ClusterSet.

With --join-file (written by causewayctl deploy-broker): claim the cluster ID
in the broker (refused when another cluster joined under it), store the
join file's member credentials as Secret causeway-system/causeway-broker,
discover the pod CIDRs (the nodes' spec.podCIDRs) and service CIDRs (the
API's ServiceCIDR objects) unless --pod-cidrs/--service-cidrs give them,
label the --gateway-node nodes causeway.dev/gateway=true, install the CRDs
and the Helm chart (server-side apply, field manager causewayctl; --set
gives chart values; the About API's ClusterProperty CRD only when the
cluster lacks it), write the About API's ClusterProperties
cluster.clusterset.k8s.io (the cluster ID) and clusterset.k8s.io (the
--clusterset name), wait until every daemon's Pods are Ready, then until
the cluster's tunnel is up: a gateway active and connected to at least one
other cluster (or active with none, while no other cluster's gateway is in
the broker). --timeout bounds both waits; on timeout join names what is not
Ready or not up.

With --broker-kubeconfig (a broker administrator): create the cluster's
broker namespace (cluster-<id>), ServiceAccount and RBAC, claim the cluster
ID with the new identity (refused like above), and store the resulting
broker kubeconfig as the Secret; install the chart yourself.

The gateway and MCS controller Pods mount the Secret (the daemons' own
ServiceAccounts may not read Secrets); its key "kubeconfig" reads the
token from its key "token", which the MCS controller rotates (it may patch
this Secret and no other). The cluster ID is --cluster-id, the
join file's, or the About API's ClusterProperty cluster.clusterset.k8s.io;
join refuses, before changing anything, a cluster whose ClusterProperties
name another ID or ClusterSet. Idempotent: joining again refreshes the credentials and the install.`,
		Example: `  causewayctl join --join-file c1.join.yaml --kubeconfig c1.yaml --gateway-node node-0
  causewayctl join --broker-kubeconfig broker-admin.yaml --kubeconfig c1.yaml --cluster-id c1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.joinFile, "join-file", "", "the cluster's join file from causewayctl deploy-broker (installs everything)")
	fs.StringVar(&f.brokerKubeconfig, "broker-kubeconfig", "", "kubeconfig with admin rights on the broker API server (creates the broker identity only)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig of the joining cluster (required)")
	fs.StringVar(&f.clusterID, "cluster-id", "", "the cluster's ID, a DNS label (default: the join file's, or the About API's cluster.clusterset.k8s.io)")
	fs.StringVar(&f.clusterSet, "clusterset", about.DefaultClusterSet, "the ClusterSet's name, written to the About API's ClusterProperty clusterset.k8s.io")
	fs.StringVar(&f.namespace, "namespace", kube.Namespace, "namespace of Causeway's objects in the joining cluster")
	fs.StringVar(&f.out, "output", "", "also write the broker kubeconfig to this file (mode 0600)")
	fs.StringSliceVar(&f.podCIDRs, "pod-cidrs", nil, "with --join-file: the cluster's pod CIDRs (default: the nodes' spec.podCIDRs)")
	fs.StringSliceVar(&f.serviceCIDRs, "service-cidrs", nil, "with --join-file: the cluster's service CIDRs (default: the API's ServiceCIDRs)")
	fs.StringSliceVar(&f.gatewayNodes, "gateway-node", nil, "with --join-file: label this node a gateway candidate (repeatable)")
	fs.StringArrayVar(&f.set, "set", nil, "with --join-file: a chart value, key=value as helm --set (repeatable)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "with --join-file: how long to wait for the daemons' Pods to be Ready and the tunnel to be up")
	fs.StringVar(&f.brokerServer, "broker-server", "", "the broker API server's URL as the cluster's Pods reach it, written into the Secret (default: the join file's, which join itself uses)")
	_ = cmd.MarkFlagRequired("kubeconfig")
	cmd.MarkFlagsOneRequired("join-file", "broker-kubeconfig")
	cmd.MarkFlagsMutuallyExclusive("join-file", "broker-kubeconfig")
	return cmd
}

func (f *joinFlags) run(cmd *cobra.Command) error {
	ctx := cmd.Context()
	say := func(format string, args ...any) { fmt.Fprintf(cmd.OutOrStdout(), format+"\n", args...) }
	local, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("cluster kubeconfig: %w", err)
	}
	cl, err := client.New(local, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return err
	}
	var raw []byte
	if f.joinFile != "" {
		if f.namespace != kube.Namespace {
			return fmt.Errorf("--namespace %s: the chart installs into %s only", f.namespace, kube.Namespace)
		}
		if raw, err = os.ReadFile(f.joinFile); err != nil {
			return fmt.Errorf("join file: %w", err)
		}
		id, err := broker.KubeconfigClusterID(raw)
		if err != nil {
			return fmt.Errorf("join file %s: %w", f.joinFile, err)
		}
		if f.clusterID != "" && f.clusterID != id {
			return fmt.Errorf("--cluster-id %s, but join file %s is cluster %s's", f.clusterID, f.joinFile, id)
		}
		f.clusterID = id
	}
	if f.clusterID == "" {
		if f.clusterID, err = about.ClusterID(ctx, cl); err != nil {
			return fmt.Errorf("no --cluster-id: %w", err)
		}
	}
	if msgs := validation.IsDNS1123Label(f.clusterID); len(msgs) > 0 {
		return fmt.Errorf("cluster ID %q: %v", f.clusterID, msgs)
	}
	if _, err := about.Check(ctx, cl, f.clusterID, f.clusterSet); err != nil {
		return err
	}
	if f.joinFile == "" {
		admin, err := clientcmd.BuildConfigFromFlags("", f.brokerKubeconfig)
		if err != nil {
			return fmt.Errorf("broker kubeconfig: %w", err)
		}
		if raw, err = broker.EnsureClusterIdentity(ctx, admin, f.clusterID); err != nil {
			return err
		}
	}
	// With a join file, everything is checked (the values by rendering the
	// chart) before anything changes in the broker or the cluster.
	var objs []*unstructured.Unstructured
	if f.joinFile != "" {
		if objs, err = f.render(ctx, cl, say); err != nil {
			return err
		}
	}
	// Either way, the cluster ID is claimed before the credentials are
	// stored: a second cluster under the same ID gets nothing.
	if err := install.Claim(ctx, cl, f.clusterID, raw); err != nil {
		return err
	}
	if f.brokerServer != "" {
		if raw, err = broker.WithServer(raw, f.brokerServer); err != nil {
			return err
		}
	}
	if err := install.StoreBrokerSecret(ctx, cl, f.namespace, raw); err != nil {
		return err
	}
	if f.out != "" {
		if err := os.WriteFile(f.out, raw, 0o600); err != nil {
			return err
		}
	}
	say("cluster %s joined the broker: namespace %s, credentials in Secret %s/%s",
		f.clusterID, broker.Namespace(f.clusterID), f.namespace, broker.Secret)
	if f.joinFile == "" {
		return nil
	}
	return f.install(ctx, local, cl, objs, say)
}

// render discovers the CIDRs not given and renders the chart.
func (f *joinFlags) render(ctx context.Context, cl client.Client, say func(string, ...any)) ([]*unstructured.Unstructured, error) {
	values := map[string]any{}
	for _, s := range f.set {
		if err := strvals.ParseInto(s, values); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	var err error
	if len(f.podCIDRs) == 0 {
		if f.podCIDRs, err = install.DiscoverPodCIDRs(ctx, cl); err != nil {
			return nil, fmt.Errorf("%w (--pod-cidrs)", err)
		}
		say("pod CIDRs from the nodes' spec.podCIDRs: %v (give --pod-cidrs with the cluster's whole pod CIDR if nodes will be added)", f.podCIDRs)
	}
	if len(f.serviceCIDRs) == 0 {
		if f.serviceCIDRs, err = install.DiscoverServiceCIDRs(ctx, cl); err != nil {
			return nil, fmt.Errorf("%w (--service-cidrs)", err)
		}
		say("service CIDRs from the API's ServiceCIDRs: %v", f.serviceCIDRs)
	}
	values["clusterID"] = f.clusterID
	values["podCIDRs"] = toAny(f.podCIDRs)
	values["serviceCIDRs"] = toAny(f.serviceCIDRs)
	values["namespace"] = map[string]any{"create": true}
	return chart.Render(values)
}

// install labels the gateways, installs objs (the rendered chart) and
// waits for the daemons, then for the tunnel.
func (f *joinFlags) install(ctx context.Context, local *rest.Config, cl client.Client, objs []*unstructured.Unstructured, say func(string, ...any)) error {
	gateways, err := install.LabelGateways(ctx, cl, f.gatewayNodes)
	if err != nil {
		return err
	}
	say("gateway nodes: %v", gateways)
	if err := install.Apply(ctx, local, cl, objs); err != nil {
		return err
	}
	say("installed the CRDs and the chart's %d objects (field manager %s)", len(objs), install.FieldOwner)
	if err := about.Ensure(ctx, cl, f.clusterID, f.clusterSet); err != nil {
		return err
	}
	say("ClusterProperties: %s=%s, %s=%s", about.ClusterIDProperty, f.clusterID, about.ClusterSetProperty, f.clusterSet)
	deadline := time.Now().Add(f.timeout)
	if err := install.WaitReady(ctx, cl, objs, f.timeout, func(s string) { say("%s", s) }); err != nil {
		return err
	}
	say("cluster %s: every daemon is Ready", f.clusterID)
	if err := install.WaitTunnel(ctx, cl, f.clusterID, time.Until(deadline), func(s string) { say("%s", s) }); err != nil {
		return err
	}
	say("cluster %s: the tunnel is up", f.clusterID)
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func newUninstallCommand() *cobra.Command {
	var kubeconfig, brokerServer string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what join created, in the cluster and in the broker",
		Long: `Remove Causeway from a member cluster: in the broker, through the cluster's
own broker identity (Secret causeway-system/causeway-broker), every object
the cluster wrote in its namespace, its Leases (the cluster ID's claim among
them) and its global CIDRs, and last its ServiceAccount, which revokes
every broker token the cluster was issued (the API server refuses them
within seconds); in the cluster, the chart's objects, namespace
causeway-system, the CRDs (with every ServiceExport and ServiceImport) and
the causeway.dev/gateway node label, the MCS controller's multicluster
EndpointSlices. Before all that it removes the daemons' datapath from
every node (tunnel devices, routes, chains, globalnet table, eBPF pins): it
deletes the DaemonSets and the MCS controller's Deployment and runs the
gateway and route agent once per node with --cleanup, as a Pod of the
DaemonSet's template, waiting until all have Succeeded (--timeout). The
broker namespace and roles stay (deploy-broker's): the same ID joins again
with a fresh join file from deploy-broker, which recreates the identity.`,
		Example: `  causewayctl uninstall --kubeconfig c1.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			say := func(s string) { fmt.Fprintln(cmd.OutOrStdout(), s) }
			local, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("cluster kubeconfig: %w", err)
			}
			cl, err := client.New(local, client.Options{Scheme: kube.NewScheme()})
			if err != nil {
				return err
			}
			// The nodes first, while the daemons' credentials still work.
			if err := install.CleanupNodes(ctx, cl, timeout, say); err != nil {
				return err
			}
			if err := install.LeaveBroker(ctx, cl, kube.Namespace, brokerServer, say); err != nil {
				return err
			}
			return install.Uninstall(ctx, cl, say)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "how long to wait for the daemons to stop and for each node's cleanup")
	cmd.Flags().StringVar(&brokerServer, "broker-server", "", "the broker API server's URL as uninstall reaches it (default: the Secret's, where the cluster's Pods reach it)")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}
