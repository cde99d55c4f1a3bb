// Package gateway is the gateway engine: candidates on gateway-labelled
// nodes elect one active gateway per cluster with a Lease; the active one
// publishes the cluster's Cluster and Endpoint to the broker, mirrors
// every cluster's objects into the local cluster with a Valid condition
// (Compute, the pure policy), keeps a tunnel to every valid remote
// gateway through a pkg/cable driver, health-checks each tunnel and
// reports it in its Gateway object. See README.md for the contract with
// the node.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable/drivers"
	"github.com/causeway-net/causeway/pkg/daemon"
	"github.com/causeway-net/causeway/pkg/inspect"
	"github.com/causeway-net/causeway/pkg/reach"
)

// MetricsPort is the gateway's default /metrics port (127.0.0.1).
const MetricsPort = 9531

// HealthPort is the gateway's default /healthz and /readyz port (all
// interfaces; metrics stay on loopback).
const HealthPort = reach.DefaultGatewayPort

// flags are the gateway's own flags, beside daemon.Options.
type flags struct {
	publicIP, privateIP, healthCheckIP string
	port                               uint16
	portSet                            bool // --port given
	cableDriver, tunnelDevice          string
	mtu                                int
	stateDir, netns                    string
	routeTable                         int
	leaseDuration, renewDeadline       time.Duration
	retryPeriod                        time.Duration
	candidateProbePort                 uint16
	candidateProbeInterval             time.Duration
	candidateProbeMisses               int
	healthInterval, healthTimeout      time.Duration
	cleanup                            bool
	globalnet                          bool
}

// NewCommand returns the gateway daemon's command.
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

func NewCommand() *cobra.Command {
	opts := daemon.DefaultOptions(MetricsPort, HealthPort)
	f := flags{
		port: 4500, cableDriver: string(v1alpha1.CableWireGuard), tunnelDevice: "cw-gw",
		stateDir: "/var/lib/causeway/gateway", leaseDuration: DefaultLeaseDuration,
		renewDeadline: DefaultRenewDeadline, retryPeriod: DefaultRetryPeriod,
		candidateProbePort: DefaultCandidateProbePort, candidateProbeInterval: DefaultCandidateProbeInterval,
		candidateProbeMisses: DefaultCandidateProbeMisses,
	}
	var cmd *cobra.Command
	cmd = daemon.Command("gateway",
		"Causeway gateway: elects the active gateway and builds tunnels to remote clusters",
		`The gateway runs on every gateway-labelled node of a cluster (hostNetwork).
One candidate per cluster becomes active through a Lease; it publishes the
cluster's Endpoint to the broker and keeps an encrypted tunnel to every
remote cluster's active gateway.

With --globalnet the cluster is reached only through a global CIDR: the
active gateway claims one of --global-supernet in the broker, announces it
instead of the pod and service CIDRs, SNATs traffic to remote clusters to
its egress addresses (a labelled namespace's pods to that namespace's own:
GlobalEgress objects) and translates every exported service port's global
IP:port pair (GlobalIngress objects; both written by the globalnet
controller) to the Service's ClusterIP:port in nftables table ip
causeway-globalnet.

With --cleanup it removes everything it created (tunnel device and routes,
its health-check address, the globalnet rules, this cluster's Endpoint and
global CIDR claim in the broker if this node published it, its Gateway
object) and exits.`,
		&opts, func(ctx context.Context, rt *daemon.Runtime) error {
			f.portSet = cmd.Flags().Changed("port")
			cfg, err := f.config(&opts)
			if err != nil {
				return err
			}
			cfg.Metrics, cfg.Log = rt.Metrics, rt.Log
			// The route agents of the cluster follow the active
			// gateway's verdict on unreachable remotes here.
			cfg.Reach = reach.NewBoard()
			rt.HandleHealth(reach.Path, cfg.Reach)
			// Ready once it could take over (a rolling update waits
			// for it before stopping the next candidate).
			rt.SetReady("candidate", errors.New("caches and gateway Lease not yet synced"))
			cfg.Ready = func() { rt.SetReady("candidate", nil) }
			// --cleanup too: the config needs the address, and
			// cleanup talks to the API server anyway (this node's Gateway).
			if !cfg.PublicIP.IsValid() {
				if err := rt.WaitForAPIServer(ctx, "local cluster", cfg.Local); err != nil {
					return err
				}
				if cfg.PublicIP, err = rt.NodeAddress(ctx, cfg.Local, cfg.NodeName, corev1.NodeExternalIP, corev1.NodeInternalIP); err != nil {
					return err
				}
				rt.Log.Info("public IP from the Node", "ip", cfg.PublicIP)
			}
			e, err := New(cfg)
			if err != nil {
				return err
			}
			if f.cleanup {
				return e.Cleanup(ctx)
			}
			if err := rt.WaitForAPIServer(ctx, "local cluster", cfg.Local); err != nil {
				return err
			}
			if err := rt.WaitForAPIServer(ctx, "broker", cfg.Broker); err != nil {
				return err
			}
			rt.SetReady("startup", nil)
			return e.Run(ctx)
		})
	fs := cmd.Flags()
	fs.StringVar(&f.publicIP, "public-ip", f.publicIP, "address remote gateways connect to (default: the Node's ExternalIP, else its InternalIP)")
	fs.StringVar(&f.privateIP, "private-ip", f.privateIP, "this node's address on the cluster network, published for the route agent")
	fs.Uint16Var(&f.port, "port", f.port, "UDP port of the tunnel (vxlan: every gateway of the ClusterSet must use the same; ipsec: 500, the default with it)")
	fs.StringVar(&f.cableDriver, "cable-driver", f.cableDriver, "tunnel driver: wireguard, vxlan or ipsec")
	fs.StringVar(&f.tunnelDevice, "tunnel-device", f.tunnelDevice, "tunnel device name, ≤ 15 bytes, unique on the machine")
	fs.IntVar(&f.mtu, "mtu", f.mtu, "tunnel MTU (0: driver default)")
	fs.StringVar(&f.stateDir, "state-dir", f.stateDir, "directory for the WireGuard private key (never leaves the node) or charon's files (ipsec)")
	fs.StringVar(&f.netns, "netns", f.netns, "network namespace path to build the tunnel in (default: the process's own)")
	fs.IntVar(&f.routeTable, "route-table", f.routeTable, "routing table for remote subnets (0: main)")
	fs.StringVar(&f.healthCheckIP, "health-check-ip", f.healthCheckIP, "address inside the pod CIDR put on the tunnel device and published for health checks (empty: none)")
	fs.DurationVar(&f.healthInterval, "health-interval", DefaultHealthInterval, "period of the health-check echoes to every remote gateway")
	fs.DurationVar(&f.healthTimeout, "health-timeout", DefaultHealthTimeout, "a remote whose health checks were answered and then go unanswered this long is in error, and unreachable for the route agents' VIP backends; at least two intervals")
	fs.DurationVar(&f.leaseDuration, "lease-duration", f.leaseDuration, "gateway lease duration (whole seconds)")
	fs.DurationVar(&f.renewDeadline, "renew-deadline", f.renewDeadline, "timeout of one lease renewal; a renewal failing for longer is logged, and the active stays active (fail static) until it sees another holder")
	fs.DurationVar(&f.retryPeriod, "retry-period", f.retryPeriod, "lease renew interval of the active (passive candidates watch the lease) and retry interval after a failed lease request")
	fs.Uint16Var(&f.candidateProbePort, "candidate-probe-port", f.candidateProbePort, "UDP port on --private-ip where this candidate answers the other candidates' probes, the same on every candidate (0: no probes, a dead active is replaced when its lease expires)")
	fs.DurationVar(&f.candidateProbeInterval, "candidate-probe-interval", f.candidateProbeInterval, "how often a passive candidate probes the active one")
	fs.IntVar(&f.candidateProbeMisses, "candidate-probe-misses", f.candidateProbeMisses, "unanswered probes in a row (with no lease renewal seen for as long) after which a passive candidate takes the lease over before it expires, 1 to 10")
	fs.BoolVar(&f.globalnet, "globalnet", f.globalnet, "reach this cluster only through a global CIDR of the ClusterSet policy's supernet (for clusters whose pod/service CIDRs overlap another member's)")
	fs.BoolVar(&f.cleanup, "cleanup", false, "remove everything this gateway created and exit")
	cmd.AddCommand(inspect.NewCommand())
	return cmd
}

func (f *flags) config(opts *daemon.Options) (Config, error) {
	var errs []error
	addr := func(name, s string, required bool) netip.Addr {
		if s == "" {
			if required {
				errs = append(errs, fmt.Errorf("--%s is required", name))
			}
			return netip.Addr{}
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", name, err))
		}
		return a
	}
	cfg := Config{
		ClusterID:      opts.ClusterID,
		NodeName:       opts.NodeName,
		Namespace:      opts.Namespace,
		PublicIP:       addr("public-ip", f.publicIP, false),
		PrivateIP:      addr("private-ip", f.privateIP, false),
		HealthCheckIP:  addr("health-check-ip", f.healthCheckIP, false),
		HealthInterval: f.healthInterval,
		HealthTimeout:  f.healthTimeout,
		Port:           f.port,
		CableDriver:    f.cableDriver,
		TunnelDevice:   f.tunnelDevice,
		MTU:            f.mtu,
		StateDir:       f.stateDir,
		Netns:          f.netns,
		RouteTable:     f.routeTable,
		LeaseDuration:  f.leaseDuration,
		RenewDeadline:  f.renewDeadline,
		RetryPeriod:    f.retryPeriod,
		ReleaseOnStop:  true,

		CandidateProbePort:     f.candidateProbePort,
		CandidateProbeInterval: f.candidateProbeInterval,
		CandidateProbeMisses:   f.candidateProbeMisses,
		Drivers:                drivers.Registry(),
	}
	if k := cfg.Drivers[f.cableDriver]; k.Port != 0 {
		if f.portSet && f.port != k.Port {
			errs = append(errs, fmt.Errorf("--port %d: the %s driver listens on %d", f.port, f.cableDriver, k.Port))
		}
		cfg.Port = k.Port
	}
	cfg.PodCIDRs, _ = daemon.ParsePrefixes(opts.PodCIDRs)
	cfg.ServiceCIDRs, _ = daemon.ParsePrefixes(opts.ServiceCIDRs)
	cfg.Globalnet = f.globalnet
	var err error
	if cfg.Local, err = opts.RESTConfig(); err != nil {
		errs = append(errs, err)
	}
	if cfg.Broker, err = opts.BrokerRESTConfig(); err != nil {
		errs = append(errs, err)
	}
	return cfg, errors.Join(errs...)
}
