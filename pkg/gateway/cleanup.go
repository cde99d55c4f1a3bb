package gateway

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/globalnet"
)

// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=gateways,verbs=delete

// Cleanup removes what this gateway created on the node and in the API
// servers: the tunnel device (with its peers, routes and health-check
// address), this cluster's Endpoint in the broker when this node
// published it, and this node's Gateway object. The WireGuard key file is
// kept (cable drivers never delete it); mirrored objects belong to the
// cluster and are left to whichever gateway is active, or to uninstall.
func (e *Engine) Cleanup(ctx context.Context) error {
	e.driverMu.Lock()
	defer e.driverMu.Unlock()
	var errs []error
	d, err := e.newDriver(ctx, e.cfg.subnets())
	if err != nil {
		errs = append(errs, err)
	} else if err := d.Cleanup(ctx); err != nil {
		errs = append(errs, fmt.Errorf("remove tunnel: %w", err))
	}
	ep := &v1alpha1.Endpoint{}
	key := client.ObjectKey{Namespace: brokerNamespace(e.cfg.ClusterID), Name: e.cfg.ClusterID}
	// Read straight from the API (the broker cache is not started here).
	direct := e.brokerAPI
	if err := direct.Get(ctx, key, ep); err == nil && ep.Spec.Hostname == e.cfg.NodeName {
		if err := direct.Delete(ctx, ep); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete broker endpoint: %w", err))
		}
		// The cluster's last active gateway leaves: its global CIDR
		// goes back to the supernet.
		if e.cfg.Globalnet {
			if err := globalnet.ReleaseCIDR(ctx, direct, direct, e.cfg.ClusterID); err != nil {
				errs = append(errs, err)
			}
		}
	} else if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("get broker endpoint: %w", err))
	}
	if err := e.nat.Cleanup(ctx); err != nil {
		errs = append(errs, fmt.Errorf("remove globalnet rules: %w", err))
	}
	gw := &v1alpha1.Gateway{}
	gw.Namespace, gw.Name = e.cfg.Namespace, e.cfg.NodeName
	if err := e.local.Delete(ctx, gw); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete gateway object: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	e.log.Info("cleaned up", "device", e.cfg.device())
	return nil
}
