package routeagent

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/kube"
)

// informerLister lists Endpoints from an informer cache.
type informerLister struct {
	c  cache.Cache
	ns string
}

func (l informerLister) ListEndpoints(ctx context.Context) ([]v1alpha1.Endpoint, error) {
	var list v1alpha1.EndpointList
	if err := l.c.List(ctx, &list, client.InNamespace(l.ns)); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=endpoints,verbs=list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=causeway-system,resources=leases,verbs=list;watch

// WatchEndpoints starts an informer on the Endpoints of namespace ns and
// calls changed on every add, update and delete, and one on its Leases
// that calls leaseMoved with the old and new holder whenever the holder
// of the gateway Lease (kube.GatewayLease) changes. It returns once the
// cache has synced; the informers stop with ctx.
func WatchEndpoints(ctx context.Context, cfg *rest.Config, ns string, changed func(), leaseMoved func(from, to string)) (EndpointLister, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme:            kube.NewScheme(),
		DefaultNamespaces: map[string]cache.Config{ns: {}},
		DefaultTransform:  cache.TransformStripManagedFields(),
	})
	if err != nil {
		return nil, fmt.Errorf("endpoint cache: %w", err)
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.Endpoint{})
	if err != nil {
		return nil, fmt.Errorf("endpoint informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}); err != nil {
		return nil, fmt.Errorf("endpoint informer handler: %w", err)
	}
	leases, err := c.GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		return nil, fmt.Errorf("lease informer: %w", err)
	}
	if _, err := leases.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, now any) {
			if from, to := gatewayHolder(old), gatewayHolder(now); from != to {
				leaseMoved(from, to)
			}
		},
		DeleteFunc: func(old any) {
			if from := gatewayHolder(old); from != "" {
				leaseMoved(from, "")
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("lease informer handler: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		select {
		case err := <-errc:
			return nil, fmt.Errorf("endpoint cache: %w", err)
		default:
			return nil, fmt.Errorf("endpoint cache did not sync: %w", ctx.Err())
		}
	}
	return informerLister{c: c, ns: ns}, nil
}

// gatewayHolder is the holder of obj when it is the gateway Lease, else
// "" (also for a delete's tombstone).
func gatewayHolder(obj any) string {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name != kube.GatewayLease {
		return ""
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}
