package labcmd

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/pkg/ctl"
	"github.com/causeway-net/causeway/pkg/kube"
)

func newLabStatusCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the lab's clusters, nodes, pods, processes and tunnels",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := lab.Load(*dir)
			if err != nil {
				return err
			}
			return printLabStatus(cmd.Context(), cmd, st)
		},
	}
}

func printLabStatus(ctx context.Context, cmd *cobra.Command, st *lab.State) error {
	out := cmd.OutOrStdout()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if pid := st.SupervisorPID(); pid > 0 {
		fmt.Fprintf(out, "Lab in %s, supervisor pid %d.\n\n", st.Dir, pid)
	} else {
		fmt.Fprintf(out, "Lab in %s: supervisor NOT running (run `causeway-lab up` to repair).\n\n", st.Dir)
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tPOD CIDR\tSERVICE CIDR\tNODES\tAPI SERVER")
	clients := map[string]client.Client{}
	for _, name := range append([]string{"broker"}, st.Members()...) {
		cp, err := st.ControlPlane(name)
		if err != nil {
			return err
		}
		pods, svcs, nodes := "-", "-", "-"
		if c, ok := st.Topology.Cluster(name); ok {
			pods, svcs, nodes = c.PodCIDR.String(), c.ServiceCIDR.String(), fmt.Sprint(len(c.Nodes))
		}
		if rc, err := cp.RESTConfig(); err == nil {
			rc.Timeout = 5 * time.Second
			if cl, err := client.New(rc, client.Options{Scheme: kube.NewScheme()}); err == nil {
				clients[name] = cl
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", name, pods, svcs, nodes, cp.URL)
	}
	tw.Flush()

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNODE\tREADY\tINTERNAL IP\tPOD CIDR\tGATEWAY")
	for _, name := range st.Members() {
		nodes := &corev1.NodeList{}
		if err := clients[name].List(ctx, nodes); err != nil {
			fmt.Fprintf(tw, "%s\t(unreachable: %v)\n", name, err)
			continue
		}
		for _, n := range nodes.Items {
			ready := "False"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					ready = string(c.Status)
				}
			}
			ip := ""
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					ip = a.Address
				}
			}
			gw := ""
			if n.Labels["causeway.dev/gateway"] == "true" {
				gw = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", name, n.Name, ready, ip, n.Spec.PodCIDR, gw)
		}
	}
	tw.Flush()

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tNAMESPACE\tPOD\tNODE\tIP\tPHASE\tREADY\tRESTARTS")
	for _, name := range st.Members() {
		pods := &corev1.PodList{}
		if err := clients[name].List(ctx, pods); err != nil {
			continue
		}
		for _, p := range pods.Items {
			ready, restarts := strconv.FormatBool(kube.PodReady(&p)), int32(0)
			for _, c := range p.Status.ContainerStatuses {
				restarts += c.RestartCount
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", name, p.Namespace, p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.Phase, ready, restarts)
		}
	}
	tw.Flush()

	units, err := st.Status()
	if err == nil {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROCESS\tRUNNING\tPID\tRESTARTS\tLAST EXIT")
		for _, u := range units {
			fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%s\n", u.Name, u.Running, u.PID, u.Restarts, u.LastExit)
		}
		tw.Flush()
	}
	fmt.Fprintln(out, "\nTunnels:")
	members := map[string]client.Client{}
	for _, name := range st.Members() {
		members[name] = clients[name]
	}
	return ctl.PrintConnections(ctx, out, members)
}

func newLabExecCommand(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "exec <cluster>/<namespace>/<pod> -- <command…>",
		Short: "Run a host command inside a pod's network namespace and cgroup",
		Long: `Run a command of this machine (curl, dig, iperf3, ping, …) inside a lab pod:
in its network namespace and its cgroup, so the cgroup eBPF programs of the
pod's node apply to it as they do to the pod's own processes.`,
		Example: `  causeway-lab exec c1/demo/client -- curl -s whereami.demo.svc.cluster.local`,
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := lab.Load(*dir)
			if err != nil {
				return err
			}
			parts := strings.Split(args[0], "/")
			if len(parts) != 3 {
				return fmt.Errorf("%q: want <cluster>/<namespace>/<pod>", args[0])
			}
			path, err := exec.LookPath(args[1])
			if err != nil {
				return err
			}
			c, err := st.Exec(cmd.Context(), parts[0], parts[1], parts[2], path, args[2:], os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return exitCode(c.Wait())
		},
	}
}
