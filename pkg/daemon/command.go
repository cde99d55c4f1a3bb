package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
)

// Command builds the cobra command of a daemon: opts' flags are registered
// on it (the caller may add more) and running it calls Run.
func Command(component, short, long string, opts *Options, work func(ctx context.Context, rt *Runtime) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:           component,
		Short:         short,
		Long:          long,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: false,
		RunE: func(*cobra.Command, []string) error {
			return Run(component, opts, work)
		},
	}
	opts.AddFlags(cmd.Flags())
	cmd.AddCommand(metricsCommand(opts.MetricsAddr))
	return cmd
}

// RESTConfig is the local cluster's client configuration: --kubeconfig, or
// the in-cluster configuration when that flag is empty.
func (o *Options) RESTConfig() (*rest.Config, error) {
	return restConfig(o.Kubeconfig, "local cluster")
}

// BrokerRESTConfig is this cluster's identity in the broker. When the
// kubeconfig reads its token from a file (tokenFile, as in the chart's
// Secret causeway-broker, whose token the MCS controller rotates), the
// file is read again every minute and at once after a 401, so a daemon
// follows every rotation without a restart.
func (o *Options) BrokerRESTConfig() (*rest.Config, error) {
	if o.BrokerKubeconfig == "" {
		return nil, fmt.Errorf("--broker-kubeconfig is required")
	}
	cfg, err := restConfig(o.BrokerKubeconfig, "broker")
	if err != nil {
		return nil, err
	}
	return FollowTokenFile(cfg), nil
}

// FollowTokenFile makes cfg, when it reads its bearer token from a file,
// read the file again every minute and at once after a 401 (client-go
// alone does only the first).
func FollowTokenFile(cfg *rest.Config) *rest.Config {
	if cfg.BearerTokenFile == "" {
		return cfg
	}
	cfg.WrapTransport = transport.ResettableTokenSourceWrapTransport(transport.NewCachedFileTokenSource(cfg.BearerTokenFile))
	cfg.BearerToken, cfg.BearerTokenFile = "", ""
	return cfg
}

func restConfig(path, what string) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if path == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s kubeconfig %q: %w", what, path, err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// metricsCommand is every daemon's `metrics` subcommand: it prints the
// daemon's /metrics as served on addr (its --metrics-addr) in this host
// or Pod network namespace — what `causewayctl gather` collects through
// pods/exec, as the metrics listen on loopback.
func metricsCommand(addr string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "metrics",
		Short: "Print this daemon's Prometheus metrics, fetched from its --metrics-addr",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return fmt.Errorf("--metrics-addr %q: %w", addr, err)
			}
			if host == "" || net.ParseIP(host).IsUnspecified() {
				host = "127.0.0.1"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			url := "http://" + net.JoinHostPort(host, port) + "/metrics"
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("get %s: %w", url, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("get %s: %s", url, resp.Status)
			}
			if _, err := io.Copy(cmd.OutOrStdout(), resp.Body); err != nil {
				return fmt.Errorf("get %s: %w", url, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "metrics-addr", addr, "the daemon's --metrics-addr")
	return cmd
}
