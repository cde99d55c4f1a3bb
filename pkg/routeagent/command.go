// Package routeagent is the agent on every node: it routes remote cluster
// CIDRs to the active gateway (a VXLAN overlay to the gateway node from
// every other node), clamps the MSS of TCP to and from remote clusters,
// follows gateway failover, and owns the eBPF VIP datapath whose maps it
// keeps equal to the ServiceImports and EndpointSlices (VIPDesired).
//
// Layers: Compute (pure: inputs -> DesiredState), Dataplane (mechanism:
// Set diffs against the node; Linux implements it with netlink and one
// iptables-restore transaction), Agent + Runner (the daemon: informer
// events mark dirty, one bounded-frequency sync loop). README.md states
// the contract with the node.
package routeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/daemon"
	"github.com/causeway-net/causeway/pkg/inspect"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/reach"
	"github.com/causeway-net/causeway/pkg/vip"
)

// MetricsPort is the route agent's default /metrics port (127.0.0.1).
const MetricsPort = 9532

// HealthPort is the route agent's default /healthz and /readyz port (all
// interfaces; metrics stay on loopback).
const HealthPort = 9542

// flags are the route agent's own flags.
type flags struct {
	cgroupRoot, bpffs string
	nodeIP            string
	device            string
	vni, port         int
	overlayMTU        int
	tunnelMTU         int
	table             int
	iptablesBackend   string
	minInterval       time.Duration
	fullInterval      time.Duration
	cleanup           bool
	dryRun            bool
	vip               bool
	vipPinDir         string
	gatewayHealthPort int
}

// pinDir is where the VIP datapath's maps and links are pinned.
func (f *flags) pinDir() string {
	if f.vipPinDir != "" {
		return f.vipPinDir
	}
	return vip.PinDir(f.bpffs)
}

// GCPercent is the route agent's Go GC target (GOGC) when the GOGC
// environment variable does not set one. With many imports the agent is
// mostly its caches of ServiceImports and EndpointSlices, long-lived
// values: at Go's default of 100 the heap grows to twice them between
// collections. 50 caps the growth at half (BenchmarkVIPMemory, 50 000
// slices: RSS 133 -> 94 MiB; see README.md, Memory).
const GCPercent = 50

// NewCommand returns the route agent's command.
func NewCommand() *cobra.Command {
	opts := daemon.DefaultOptions(MetricsPort, HealthPort)
	opts.GCPercent = GCPercent
	f := flags{device: DefaultDevice, vni: DefaultVNI, port: DefaultPort, tunnelMTU: DefaultTunnelMTU,
		minInterval: 100 * time.Millisecond, fullInterval: 30 * time.Second, gatewayHealthPort: reach.DefaultGatewayPort}
	cmd := daemon.Command("route-agent",
		"Causeway route agent: routes to remote clusters and the clusterset VIP datapath",
		`The route agent runs on every node (hostNetwork). It routes remote
cluster CIDRs to the active gateway over a VXLAN overlay to the gateway
node, clamps the TCP MSS of traffic to and from remote clusters, follows
gateway failover, and loads the eBPF programs that translate clusterset
VIPs to backends at connect() time. The clusterset VIP ranges come from
the ClusterSet's policy as the active gateway mirrors it into the cluster
(ClusterSetPolicy "clusterset"): the agent waits for it, and restarts when
it changes. --cleanup removes everything it owns on the node and exits.`,
		&opts, func(ctx context.Context, rt *daemon.Runtime) error {
			return run(ctx, rt, &opts, &f)
		})
	fs := cmd.Flags()
	fs.StringVar(&f.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup v2 directory the VIP programs attach to")
	fs.StringVar(&f.bpffs, "bpffs", "/sys/fs/bpf", "bpffs mount where maps and links are pinned")
	fs.StringVar(&f.nodeIP, "node-ip", "", "this node's IPv4 address on the node network (default: the Node object's InternalIP)")
	fs.StringVar(&f.device, "vxlan-device", f.device, "name of the VXLAN overlay device")
	fs.IntVar(&f.vni, "vxlan-vni", f.vni, "VXLAN network identifier of the overlay")
	fs.IntVar(&f.port, "vxlan-port", f.port, "UDP port of the overlay on the node network")
	fs.IntVar(&f.overlayMTU, "overlay-mtu", 0, "MTU of the overlay device (0: the node interface's MTU minus 50)")
	fs.IntVar(&f.tunnelMTU, "tunnel-mtu", f.tunnelMTU, "MTU of the tunnels between gateways; TCP MSS is clamped to min(overlay, tunnel MTU) - 40")
	fs.IntVar(&f.table, "route-table", 0, "route table for the routes to remote clusters (0: main)")
	fs.StringVar(&f.iptablesBackend, "iptables-backend", "", `iptables binaries: "" (iptables-save/-restore on PATH), "nft" or "legacy"`)
	fs.DurationVar(&f.minInterval, "min-sync-interval", f.minInterval, "least time between two syncs")
	fs.DurationVar(&f.fullInterval, "full-sync-interval", f.fullInterval, "period of full syncs that repair outside changes")
	fs.BoolVar(&f.cleanup, "cleanup", false, "remove every device, route and chain the route agent owns on this node, then exit")
	fs.BoolVar(&f.dryRun, "dry-run", false, "compute and log the desired state without programming the node")
	fs.BoolVar(&f.vip, "vip", true, "load the eBPF clusterset VIP datapath and keep it equal to the ServiceImports and EndpointSlices")
	fs.IntVar(&f.gatewayHealthPort, "gateway-health-port", f.gatewayHealthPort, "TCP port of the gateways' health listener, where the active one says which remote clusters are unreachable (their VIP backends are withdrawn; 0: never)")
	fs.StringVar(&f.vipPinDir, "vip-pin-dir", "", "bpffs directory of the VIP datapath's pinned maps and links (default <bpffs>/causeway/vip)")

	// --cleanup needs no cluster identity and no API server.
	runE := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if !f.cleanup {
			return runE(c, args)
		}
		log := opts.NewLogger("route-agent")
		dp, err := newDataplane(&f, nil)
		if err != nil {
			return err
		}
		defer dp.Close()
		if err := dp.Cleanup(context.Background()); err != nil {
			return fmt.Errorf("cleanup: %w", err)
		}
		if err := vip.Cleanup(f.pinDir()); err != nil {
			return fmt.Errorf("cleanup VIP datapath: %w", err)
		}
		log.Info("cleanup done")
		return nil
	}
	cmd.AddCommand(inspect.NewCommand())
	return cmd
}

func validate(f *flags) error {
	var errs []error
	if f.vni < 1 || f.vni > 1<<24-1 {
		errs = append(errs, fmt.Errorf("--vxlan-vni %d: must be 1..16777215", f.vni))
	}
	if f.gatewayHealthPort < 0 || f.gatewayHealthPort > 65535 {
		errs = append(errs, fmt.Errorf("--gateway-health-port %d: must be 0..65535", f.gatewayHealthPort))
	}
	if f.port < 1 || f.port > 65535 {
		errs = append(errs, fmt.Errorf("--vxlan-port %d: must be 1..65535", f.port))
	}
	if f.device == "" || len(f.device) > 15 {
		errs = append(errs, fmt.Errorf("--vxlan-device %q: must be 1..15 bytes", f.device))
	}
	if f.overlayMTU != 0 && f.overlayMTU < 576 || f.tunnelMTU < 576 {
		errs = append(errs, fmt.Errorf("--overlay-mtu %d / --tunnel-mtu %d: must be at least 576", f.overlayMTU, f.tunnelMTU))
	}
	if f.table < 0 || f.table == 253 || f.table == 255 {
		errs = append(errs, fmt.Errorf("--route-table %d: must be 0 (main) or a free table", f.table))
	}
	switch f.iptablesBackend {
	case "", "nft", "legacy":
	default:
		errs = append(errs, fmt.Errorf("--iptables-backend %q: must be empty, nft or legacy", f.iptablesBackend))
	}
	if f.nodeIP != "" {
		if ip, err := netip.ParseAddr(f.nodeIP); err != nil || !ip.Is4() {
			errs = append(errs, fmt.Errorf("--node-ip %q: must be an IPv4 address", f.nodeIP))
		}
	}
	return errors.Join(errs...)
}

func newDataplane(f *flags, rt *daemon.Runtime) (*Linux, error) {
	ipt, ipt6 := ExecIPTables{}, ExecIPTables{SaveBin: "ip6tables-save", RestoreBin: "ip6tables-restore"}
	if f.iptablesBackend != "" {
		ipt.SaveBin = "iptables-" + f.iptablesBackend + "-save"
		ipt.RestoreBin = "iptables-" + f.iptablesBackend + "-restore"
		ipt6.SaveBin = "ip6tables-" + f.iptablesBackend + "-save"
		ipt6.RestoreBin = "ip6tables-" + f.iptablesBackend + "-restore"
	}
	cfg := LinuxConfig{Device: f.device, Table: f.table, IPTables: ipt, IP6Tables: ipt6}
	if rt != nil {
		cfg.Logger = rt.Log
	}
	return NewLinux(cfg)
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups=causeway.dev,resources=clustersetpolicies,verbs=get

func run(ctx context.Context, rt *daemon.Runtime, opts *daemon.Options, f *flags) error {
	if err := validate(f); err != nil {
		return fmt.Errorf("invalid flags:\n%w", err)
	}
	cfg, err := opts.RESTConfig()
	if err != nil {
		return err
	}
	if err := rt.WaitForAPIServer(ctx, "local cluster", cfg); err != nil {
		return err
	}
	var nodeIP netip.Addr
	if f.nodeIP != "" {
		nodeIP = netip.MustParseAddr(f.nodeIP)
	} else {
		// Without its node address the agent programs nothing; it stays
		// not ready until the Node object says.
		if nodeIP, err = rt.NodeAddress(ctx, cfg, opts.NodeName, corev1.NodeInternalIP); err != nil {
			return err
		}
	}
	local, err := daemon.ParsePrefixes(append(append([]string{}, opts.PodCIDRs...), opts.ServiceCIDRs...))
	if err != nil {
		return err
	}
	// The clusterset VIP ranges and the globalnet supernet: the
	// ClusterSet's policy as the gateway mirrored it here; a change
	// restarts the agent (below).
	reader, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return fmt.Errorf("local client: %w", err)
	}
	policy, err := clusterset.Wait(ctx, clusterset.ReadMirror, reader, 2*time.Second, func(err error) { rt.SetReady("clusterset-policy", err) })
	if err != nil {
		return err
	}
	params := Params{Device: f.device, VNI: f.vni, Port: f.port, OverlayMTU: f.overlayMTU, TunnelMTU: f.tunnelMTU,
		Table: f.table, LocalCIDRs: local, VIPRange: policy.VIPRange, Supernet: policy.Supernet}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil {
		params.VIPRangeIPv6 = policy.VIPRangeIPv6 // not on nodes without IPv6
	}
	var dp Dataplane
	if f.dryRun {
		dp = &loggingDataplane{log: rt.Log}
		if params.OverlayMTU == 0 {
			params.OverlayMTU = 1500 - VXLANOverhead
		}
	} else {
		if params.OverlayMTU == 0 {
			mtu, err := NodeLinkMTU(nodeIP)
			if err != nil {
				return fmt.Errorf("overlay mtu (set --overlay-mtu): %w", err)
			}
			params.OverlayMTU = mtu - VXLANOverhead
		}
		ldp, err := newDataplane(f, rt)
		if err != nil {
			return err
		}
		defer ldp.Close()
		dp = ldp
	}
	rt.Log.Info("route agent", "nodeIP", nodeIP, "device", params.Device, "vni", params.VNI, "port", params.Port,
		"overlayMTU", params.OverlayMTU, "tunnelMTU", params.TunnelMTU, "vipRange", params.VIPRange, "vipRangeIPv6", params.VIPRangeIPv6, "dryRun", f.dryRun)

	metrics := NewMetrics(rt.Metrics)
	var runner *Runner
	var agent *Agent
	changed := func() {
		agent.Changed()
		runner.Kick()
	}
	var lister lazyLister
	agent = NewAgent(AgentConfig{
		Node:   Node{ClusterID: opts.ClusterID, Name: opts.NodeName, IP: nodeIP},
		Params: params, Endpoints: &lister, Dataplane: dp, Metrics: metrics, Logger: rt.Log,
	})
	runner = NewRunner(RunnerConfig{MinInterval: f.minInterval, FullInterval: f.fullInterval}, func(ctx context.Context, full bool) error {
		err := agent.Sync(ctx, full)
		rt.SetReady("sync", err)
		if err == nil {
			rt.SetReady("startup", nil)
		}
		return err
	})
	// From here on the agent stops only once its node no longer holds
	// the active gateway (or StopLinger passed): see lingerWhileGateway.
	ctx = lingerWhileGateway(ctx, agent, nodeIP, StopLinger, rt.Log)
	leaseMoved := func(from, to string) {
		agent.GatewayLeaseMoved(ctx, from, to, runner.Kick)
	}
	l, err := WatchEndpoints(ctx, cfg, opts.Namespace, changed, leaseMoved)
	if err != nil {
		return err
	}
	lister.set(l)
	if f.vip && !f.dryRun {
		var st unix.Statfs_t
		if err := unix.Statfs(f.bpffs, &st); err != nil || st.Type != unix.BPF_FS_MAGIC {
			return fmt.Errorf("VIP datapath: no bpffs at %s (mount -t bpf bpf %s, or run with --vip=false)", f.bpffs, f.bpffs)
		}
		table, err := vip.Open(vip.Config{PinDir: f.pinDir(), CgroupPath: f.cgroupRoot, Logger: rt.Log})
		if err != nil {
			return fmt.Errorf("VIP datapath: %w", err)
		}
		// Close keeps the programs attached and the maps pinned: VIPs keep
		// working while the agent restarts.
		defer table.Close()
		vipMetrics := NewVIPMetrics(rt.Metrics, table)
		vipCfg := VIPConfig{ClusterID: opts.ClusterID, Ranges: []netip.Prefix{policy.VIPRange, policy.VIPRangeIPv6}}
		var lastLeftOut int
		// src and reachable are set before the runner runs (the go
		// statements below).
		var src VIPSource
		var reachable *reach.Follower
		vipRunner := NewRunner(RunnerConfig{MinInterval: f.minInterval, FullInterval: f.fullInterval}, func(ctx context.Context, _ bool) error {
			cfg := vipCfg
			if reachable != nil {
				cfg.Unreachable = reachable.Unreachable()
			}
			st, err := SyncVIPs(ctx, cfg, src, table)
			rt.SetReady("vip", err)
			vipMetrics.observe(st, err)
			if len(st.LeftOut) != lastLeftOut {
				if len(st.LeftOut) > 0 {
					rt.Log.Warn("VIP table full: imports left out", "count", len(st.LeftOut), "limits", table.Limits(),
						"first", st.LeftOut[:min(len(st.LeftOut), 10)])
				} else {
					rt.Log.Info("VIP table holds every import again")
				}
				lastLeftOut = len(st.LeftOut)
			}
			return err
		})
		rt.SetReady("vip", errors.New("not synced yet"))
		if src, err = WatchVIPInputs(ctx, cfg, vipRunner.Kick); err != nil {
			return err
		}
		if f.gatewayHealthPort != 0 {
			// The active gateway's verdict on unreachable remotes,
			// read over the node network (no API server in the way).
			reachable = &reach.Follower{Log: rt.Log, OnChange: vipRunner.Kick, Addr: func() string {
				if gw := agent.ActiveGateway(); gw.IsValid() {
					return netip.AddrPortFrom(gw, uint16(f.gatewayHealthPort)).String()
				}
				return ""
			}}
			go reachable.Run(ctx)
		}
		go vipRunner.Run(ctx)
	}
	policyErr := make(chan error, 1)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		policyErr <- clusterset.Watch(runCtx, clusterset.ReadMirror, reader, policy, PolicyCheckInterval, rt.Log)
		cancel()
	}()
	runner.Run(runCtx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return <-policyErr
}

// StopLinger bounds how long a stopping agent goes on while its node
// holds the active gateway.
const StopLinger = 5 * time.Second

// lingerWhileGateway returns a context that ends with ctx — unless the
// node holds the active gateway when ctx ends: then it ends once the
// agent has applied a state routing through another node, or after
// bound. A rolling update replaces the gateway and the route agent of a
// node at about the same time (two DaemonSets, one node at a time
// each); the gateway hands over by a clean stop, and the node's pods
// reach the new active only through this node's routes, which only this
// agent changes. Without the linger they would point at the node's own
// departed tunnel until the next agent had started and synced (seconds).
func lingerWhileGateway(ctx context.Context, agent *Agent, nodeIP netip.Addr, bound time.Duration, log *slog.Logger) context.Context {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer cancel()
		<-ctx.Done()
		if agent.ActiveGateway() != nodeIP {
			return
		}
		log.Info("stopping once the active gateway has left this node", "bound", bound)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(bound)
		for {
			select {
			case <-deadline:
				log.Info("stopping: the active gateway stayed on this node", "waited", bound)
				return
			case <-tick.C:
				if gw := agent.ActiveGateway(); gw != nodeIP {
					log.Info("stopping: this node routes through the new active gateway", "gateway", gw)
					return
				}
			}
		}
	}()
	return out
}

// PolicyCheckInterval is how often the agent reads the mirrored ClusterSet
// policy to notice a change.
const PolicyCheckInterval = 30 * time.Second
