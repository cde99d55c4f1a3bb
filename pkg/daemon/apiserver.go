package daemon

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// WaitForAPIServer polls cfg's server until it answers, reporting the
// readiness check named check meanwhile.
func (r *Runtime) WaitForAPIServer(ctx context.Context, check string, cfg *rest.Config) error {
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
