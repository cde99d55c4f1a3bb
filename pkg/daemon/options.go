// Package daemon is the runtime every Causeway daemon shares: the common
// flags, structured logging, an HTTP listener serving /metrics, /healthz
// and /readyz (loopback by default) and one serving only /healthz and
// /readyz (for the kubelet's probes), and a context that ends on SIGTERM or SIGINT so the daemon
// can shut down cleanly.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/kube"
)

// Options are the flags every daemon takes.
type Options struct {
	// Kubeconfig is the local cluster's kubeconfig; empty means in-cluster.
	Kubeconfig string
	// BrokerKubeconfig is this cluster's identity in the broker.
	BrokerKubeconfig string
	// ClusterID is this cluster's name in the ClusterSet (a DNS label);
	// empty: the About API's ClusterProperty cluster.clusterset.k8s.io in
	// the local cluster (ResolveClusterID).
	ClusterID string
	// NodeName is the node the daemon runs on.
	NodeName string
	// Namespace holds Causeway's own objects in the local cluster.
	Namespace string
	// PodCIDRs and ServiceCIDRs are the local cluster's networks.
	PodCIDRs     []string
	ServiceCIDRs []string
	// LogLevel is debug, info, warn or error; LogFormat text or json.
	LogLevel  string
	LogFormat string
	// MetricsAddr is where /metrics, /healthz and /readyz (and pprof with
	// Profiling) are served; empty or "0" turns the listener off. The
	// default is loopback only: the daemons run with host network, where
	// ":port" would open them on every interface of the node.
	MetricsAddr string
	// HealthAddr is where /healthz and /readyz alone are served, for the
	// kubelet's probes (which reach a host-network Pod at the node's
	// address); empty, "0" or equal to MetricsAddr: no separate listener.
	HealthAddr string
	// Profiling also serves Go's pprof handlers under /debug/pprof/ on
	// the metrics listener.
	Profiling bool
	// GCPercent is the Go GC target (GOGC) the daemon runs with when the
	// GOGC environment variable sets none; 0 keeps Go's default (100).
	// Not a flag: a daemon whose heap is mostly long-lived caches sets it
	// low, so that the heap (and the resident set with it) does not grow
	// to twice the caches between collections, at the price of CPU time.
	GCPercent int
}

// DefaultOptions returns the defaults for a daemon whose metrics listen on
// 127.0.0.1:metricsPort and whose health checks on :healthPort.
func DefaultOptions(metricsPort, healthPort int) Options {
	host, _ := os.Hostname()
	if n := os.Getenv("NODE_NAME"); n != "" {
		host = n
	}
	return Options{
		NodeName:    host,
		Namespace:   "causeway-system",
		LogLevel:    "info",
		LogFormat:   "text",
		MetricsAddr: fmt.Sprintf("127.0.0.1:%d", metricsPort),
		HealthAddr:  fmt.Sprintf(":%d", healthPort),
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the local cluster (empty: in-cluster config)")
	fs.StringVar(&o.BrokerKubeconfig, "broker-kubeconfig", o.BrokerKubeconfig, "kubeconfig of this cluster's identity in the broker API server")
	fs.StringVar(&o.ClusterID, "cluster-id", o.ClusterID, "this cluster's ID in the ClusterSet, a DNS label (default: the local cluster's About API ClusterProperty cluster.clusterset.k8s.io)")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of the node this daemon runs on (default: $NODE_NAME or the hostname)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "namespace of Causeway's objects in the local cluster")
	fs.StringSliceVar(&o.PodCIDRs, "pod-cidrs", o.PodCIDRs, "the local cluster's pod CIDRs, comma separated")
	fs.StringSliceVar(&o.ServiceCIDRs, "service-cidrs", o.ServiceCIDRs, "the local cluster's service CIDRs, comma separated")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "log level: debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "log format: text or json")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", o.MetricsAddr, `address serving /metrics, /healthz and /readyz, and pprof with --profiling; loopback by default, as the daemon may run with host network ("0" to disable)`)
	fs.StringVar(&o.HealthAddr, "health-addr", o.HealthAddr, `address serving only /healthz and /readyz, for the kubelet's probes ("0" or the --metrics-addr: no separate listener)`)
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "also serve Go pprof profiles under /debug/pprof/ on the metrics address")
}

// Validate reports every malformed option at once.
func (o *Options) Validate() error {
	var errs []error
	if o.ClusterID != "" {
		if err := validClusterID(o.ClusterID); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-id: %w", err))
		}
	}
	if o.NodeName == "" {
		errs = append(errs, errors.New("--node-name is required (or set NODE_NAME)"))
	}
	if _, err := ParsePrefixes(o.PodCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("--pod-cidrs: %w", err))
	}
	if _, err := ParsePrefixes(o.ServiceCIDRs); err != nil {
		errs = append(errs, fmt.Errorf("--service-cidrs: %w", err))
	}
	if _, err := parseLevel(o.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if o.LogFormat != "text" && o.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: must be text or json", o.LogFormat))
	}
	for _, a := range [][2]string{{"metrics-addr", o.MetricsAddr}, {"health-addr", o.HealthAddr}} {
		if on(a[1]) {
			if _, _, err := net.SplitHostPort(a[1]); err != nil {
				errs = append(errs, fmt.Errorf("--%s %q: %w", a[0], a[1], err))
			}
		}
	}
	return errors.Join(errs...)
}

func validClusterID(id string) error {
	if msgs := validation.IsDNS1123Label(id); len(msgs) > 0 {
		return fmt.Errorf("%q: %s", id, strings.Join(msgs, "; "))
	}
	return nil
}

// ResolveClusterID fills an empty ClusterID from the local cluster's About
// API (ClusterProperty cluster.clusterset.k8s.io, written by `causewayctl
// join`), trying for up to ResolveTimeout while the API server is not
// reachable.
func (o *Options) ResolveClusterID(ctx context.Context) error {
	if o.ClusterID != "" {
		return nil
	}
	cfg, err := o.RESTConfig()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return fmt.Errorf("local cluster client: %w", err)
	}
	var id string
	err = wait.PollUntilContextTimeout(ctx, time.Second, ResolveTimeout, true, func(ctx context.Context) (bool, error) {
		id, err = about.ClusterID(ctx, c)
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return false, err
		}
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("no --cluster-id, and the local cluster's About API does not name it: %w", err)
	}
	if err := validClusterID(id); err != nil {
		return fmt.Errorf("ClusterProperty %s: %w", about.ClusterIDProperty, err)
	}
	o.ClusterID = id
	return nil
}

// ResolveTimeout bounds how long ResolveClusterID waits for the local API
// server.
const ResolveTimeout = time.Minute

// ParsePrefixes parses CIDRs and refuses host bits, the default route and
// duplicates.
func ParsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	seen := map[netip.Prefix]bool{}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %w", c, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q has host bits set (did you mean %s?)", c, p.Masked())
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("%q is the default route", c)
		}
		if seen[p] {
			return nil, fmt.Errorf("%q is listed twice", c)
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: must be debug, info, warn or error", s)
	}
	return l, nil
}

// NewLogger builds the daemon's structured logger, tagged with component.
func (o *Options) NewLogger(component string) *slog.Logger {
	level, err := parseLevel(o.LogLevel)
	if err != nil {
		level = slog.LevelInfo
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, hopts)
	if o.LogFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, hopts)
	}
	return slog.New(h).With("component", component, "cluster", o.ClusterID, "node", o.NodeName)
}
