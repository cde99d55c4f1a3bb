package daemon

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// AttemptTimeout bounds each attempt of the startup waits (API server,
// node address, ClusterSet policy): a request that hangs is given up and
// tried again rather than waited on for ever.
const AttemptTimeout = 10 * time.Second

// WaitForAPIServer polls cfg's server until it answers, reporting the
// readiness check named check meanwhile.
func (r *Runtime) WaitForAPIServer(ctx context.Context, check string, cfg *rest.Config) error {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = AttemptTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("%s client: %w", check, err)
	}
	return wait.PollUntilContextCancel(ctx, time.Second, true, func(context.Context) (bool, error) {
		v, err := dc.ServerVersion()
		if err != nil {
			r.SetReady(check, fmt.Errorf("%s unreachable: %w", check, err))
			return false, nil
		}
		r.SetReady(check, nil)
		r.Log.Info("connected", "to", check, "version", v.GitVersion)
		return true, nil
	})
}
