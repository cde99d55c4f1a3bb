package labcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/lab/netlab"
)

// NewCommand returns causeway-lab's root command.
func NewCommand() *cobra.Command {
	// The Kubernetes client libraries log through logr: only their
	// warnings and errors reach the user.
	ctrllog.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	dir := lab.DefaultDir
	if d := os.Getenv("CAUSEWAY_LAB_DIR"); d != "" {
		dir = d
	}
	cmd := &cobra.Command{
		Use:   "causeway-lab",
		Short: "A whole ClusterSet on this machine: real control planes, namespaces as nodes and pods",
		Long: `causeway-lab runs a ClusterSet on one Linux machine with no container runtime,
with Causeway installed in every cluster through its Helm chart, and
measures it. Every cluster is a real etcd + kube-apiserver +
kube-controller-manager + kube-scheduler, one more control plane is the
broker, every node and pod is a network namespace, a lab kubelet per node
runs pods as built-in programs, and kube-proxy runs in every node. Needs
root.

Default shape: clusters c1, c2, c3 with two nodes each (n0 is the gateway);
c1 and c2 share pod CIDR 10.244.0.0/16 and service CIDR 10.96.0.0/16, c3 uses
10.245.0.0/16 and 10.97.0.0/16; gateways meet on a WAN in 198.18.0.0/15.

causewayctl, the product's CLI, works on the lab like on any clusters:
export KUBECONFIG=$(causeway-lab kubeconfig) first.`,
		SilenceUsage: true,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", dir, "the lab's state directory ($CAUSEWAY_LAB_DIR)")
	cmd.AddCommand(
		newLabUpCommand(&dir),
		newLabDownCommand(&dir),
		newLabStatusCommand(&dir),
		newLabKubectlCommand(&dir),
		newLabKubeconfigCommand(&dir),
		newLabExecCommand(&dir),
		newLabLogsCommand(&dir),
		newLabSuperviseCommand(&dir),
		newLabKubeletCommand(&dir),
		newLabAppCommand(),
		newBenchmarkCommand(&dir),
	)
	return cmd
}

func newLabUpCommand(dir *string) *cobra.Command {
	cfg := lab.Config{Prefix: netlab.DefaultPrefix, Clusters: 3, Nodes: 2, BinDir: controlplane.DefaultBinDir()}
	var podCIDRs, svcCIDRs []string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the lab up (or repair it), deploy the demo, and say what to try",
		Long: `Bring the lab up: build the network, start the control planes, kubelets and
kube-proxies under one supervisor, install Causeway into every cluster through
its Helm chart as causewayctl join does (the kubelets run the chart's gateway
and route-agent DaemonSets and MCS controller Deployment), deploy the demo
(namespace demo: Deployment + Service whereami in c1 and c2, a client pod
everywhere) and wait until everything is ready. Running it again repairs what is missing and
never duplicates anything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.PodCIDRs, err = lab.ParseCIDRFlags("--pod-cidr", podCIDRs); err != nil {
				return err
			}
			if cfg.ServiceCIDRs, err = lab.ParseCIDRFlags("--service-cidr", svcCIDRs); err != nil {
				return err
			}
			if cfg.Self, err = os.Executable(); err != nil {
				return err
			}
			cfg.Dir = *dir
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			st, err := lab.Up(ctx, cfg, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return printTryThis(cmd, st)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Clusters, "clusters", cfg.Clusters, "number of member clusters (c1…cN)")
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "nodes per cluster")
	f.IntVar(&cfg.Gateways, "gateways", 1, "gateway candidates per cluster (the first nodes); one is active, the others take over on failure")
	f.StringSliceVar(&podCIDRs, "pod-cidr", nil, "a cluster's pod CIDR, as CLUSTER=CIDR (repeatable)")
	f.StringSliceVar(&svcCIDRs, "service-cidr", nil, "a cluster's service CIDR, as CLUSTER=CIDR (repeatable)")
	f.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "prefix of every namespace, cgroup and device the lab creates")
	f.StringVar(&cfg.BinDir, "k8s-bin", cfg.BinDir, "directory with etcd, kube-apiserver, … (hack/k8s-binaries.sh)")
	f.BoolVar(&cfg.NoDemo, "no-demo", false, "do not deploy the demo application")
	f.BoolVar(&cfg.NoInstall, "no-install", false, "do not install Causeway: print the causewayctl deploy-broker and join commands that install it as a user does")
	f.BoolVar(&cfg.NoGlobalnet, "no-globalnet", false, "run the gateways without globalnet (c1 and c2 overlap: only the older of the two is then reachable from c3)")
	f.StringVar(&cfg.IPFamily, "ip-family", lab.IPFamilyIPv4, "ipv4, or dual for dual-stack clusters (IPv6 pod and service CIDRs fd00:10:244:<i>::/64 and fd00:10:96:<i>::/112 besides the IPv4 ones)")
	f.StringVar(&cfg.Runtime, "runtime", lab.RuntimeLab, "what runs the nodes' pods: lab (the lab kubelet: pods as processes of the local binaries) or containerd (a real kubelet and containerd per node: pods as containers of Causeway's image and the lab image, `make image`)")
	f.StringVar(&cfg.ContainerdDir, "containerd-bin", lab.DefaultContainerdDir(), "directory with containerd, containerd-shim-runc-v2 and ctr, for --runtime containerd (hack/k8s-binaries.sh)")
	f.StringVar(&cfg.Cable, "cable", lab.DefaultCable, "the gateways' cable driver: wireguard (embedded wireguard-go), ipsec (strongSwan charon, userspace ESP) or vxlan (unencrypted)")
	return cmd
}

func printTryThis(cmd *cobra.Command, st *lab.State) error {
	self := os.Args[0] // as the user typed it, e.g. bin/causeway-lab
	// causewayctl, the product's CLI, is built next to causeway-lab.
	ctl := filepath.Join(filepath.Dir(self), "causewayctl")
	out := cmd.OutOrStdout()
	if st.NoInstall {
		lines, uninstall, err := st.JoinCommands(ctl)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "\nThe lab is up without Causeway: %s + broker. Install it as a user does, one command after the other:\n\n", strings.Join(st.Members(), ", "))
		for _, l := range lines {
			fmt.Fprintf(out, "  %s\n", l)
		}
		fmt.Fprintf(out, "\nRemove it from a cluster (here %s) with\n\n  %s\n", st.Members()[0], uninstall)
		return nil
	}
	fmt.Fprintf(out, "\nThe lab is up: %s + broker.\n\nTry this:\n", strings.Join(st.Members(), ", "))
	fmt.Fprintf(out, "  %s status\n", self)
	fmt.Fprintf(out, "  %s kubectl c1 -- get pods -A -o wide\n", self)
	fmt.Fprintf(out, "  %s kubectl c1 -- -n causeway-system get ds,deploy,pods   # Causeway, installed by its Helm chart\n", self)
	if st.Demo && st.RuntimeName() == lab.RuntimeContainerd {
		// No curl in Causeway's image, no CoreDNS in a containerd lab.
		fmt.Fprintf(out, "  ip=$(%s kubectl c1 -- get svc -n demo whereami -o jsonpath='{.spec.clusterIP}')\n", self)
		fmt.Fprintf(out, "  %s kubectl c1 -- exec -n demo client -- bash -c \"exec 3<>/dev/tcp/$ip/80; printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3\"\n", self)
	} else if st.Demo {
		fmt.Fprintf(out, "  %s exec c1/demo/client -- curl -s whereami.demo.svc.cluster.local\n", self)
		fmt.Fprintf(out, "  %s exec c1/demo/client -- curl -s $(%s kubectl c1 -- get svc -n demo whereami -o jsonpath='{.spec.clusterIP}')\n", self, self)
	}
	fmt.Fprintf(out, "  export KUBECONFIG=$(%s kubeconfig)   # contexts c1, c2, c3, broker; then causewayctl as on any clusters:\n", self)
	fmt.Fprintf(out, "  %s show connections\n", ctl)
	fmt.Fprintf(out, "  %s down\n", self)
	return nil
}

func newLabDownCommand(dir *string) *cobra.Command {
	prefix := netlab.DefaultPrefix
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the lab and remove everything it made",
		Long: `Stop every process of the lab and remove its namespaces, links, cgroups,
bpffs pins, WireGuard sockets and state directory. Fails if anything is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lab.Down(*dir, prefix, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", prefix, "prefix to clean up when the state directory is gone")
	return cmd
}

func newLabKubeconfigCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "kubeconfig [cluster|broker]",
		Short: "Print the path of a kubeconfig for the lab: one context per cluster, or one cluster's (or the broker's) admin kubeconfig",
		Long: `With no argument, writes one kubeconfig with an admin context per cluster
and the broker (contexts c1, c2, …, broker; current context c1) into the
lab's state directory and prints its path, for KUBECONFIG=$(…) or merging
into your own. With a cluster name, prints that cluster's own admin
kubeconfig.`,
		Example: `  export KUBECONFIG=$(causeway-lab kubeconfig)
  kubectl --context c2 get serviceimports -A`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := lab.Load(*dir)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				cp, err := st.ControlPlane(args[0])
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), cp.AdminKubeconfig)
				return nil
			}
			path, err := st.WriteMergedKubeconfig()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
}

func newLabKubectlCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "kubectl <cluster|broker> -- <kubectl args…>",
		Short: "Run kubectl against a cluster or the broker",
		Example: `  causeway-lab kubectl c1 -- get pods -A
  causeway-lab kubectl broker -- get namespaces`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := lab.Load(*dir)
			if err != nil {
				return err
			}
			cp, err := st.ControlPlane(args[0])
			if err != nil {
				return err
			}
			k := exec.Command(filepath.Join(st.BinDir, "kubectl"), append([]string{"--kubeconfig", cp.AdminKubeconfig}, args[1:]...)...)
			k.Stdin, k.Stdout, k.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			return exitCode(k.Run())
		},
	}
}

func newLabLogsCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "logs [unit]",
		Short: "List the lab's log files, or print one unit's log",
		Long: `Without an argument, list every log file of the lab. With one, print the log
of that unit: a control-plane process ("c1/kube-apiserver"), a node process
("c1/n0/kubelet", "c1/n0/kube-proxy"), a Pod's container
("c1/causeway-system/causeway-gateway-x7k2p/gateway") or the supervisor
("supervisor").`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := lab.Load(*dir)
			if err != nil {
				return err
			}
			files, err := st.LogFiles()
			if err != nil {
				return err
			}
			if len(args) == 0 {
				for _, f := range files {
					fmt.Fprintf(cmd.OutOrStdout(), "%-28s %s\n", f.Unit, f.Path)
				}
				return nil
			}
			for _, f := range files {
				if f.Unit == args[0] {
					b, err := os.ReadFile(f.Path)
					if err != nil {
						return err
					}
					_, err = cmd.OutOrStdout().Write(b)
					return err
				}
			}
			return fmt.Errorf("no log for unit %q (run `causeway-lab logs` for the list)", args[0])
		},
	}
}

func newLabSuperviseCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:    "supervise",
		Short:  "Run and restart every process of the lab (started by `lab up`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return lab.Supervise(ctx, *dir)
		},
	}
}

// exitCode turns a child's exit status into ours.
func exitCode(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	return err
}

func newLabKubeletCommand(dir *string) *cobra.Command {
	var cluster, node string
	cmd := &cobra.Command{
		Use:    "kubelet",
		Short:  "Run the lab kubelet of one node (a process of the lab supervisor)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return lab.RunKubelet(ctx, *dir, cluster, node)
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "the node's cluster")
	cmd.Flags().StringVar(&node, "node", "", "the node's name")
	return cmd
}
