package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/kube"
)

// NodeAddress polls the Node object name until it has an IPv4 address of
// one of types and returns the first one, in the order of types (e.g.
// ExternalIP before InternalIP), reporting the readiness check "node
// address" meanwhile: a daemon without its node's address programs
// nothing. The caller's role needs get on nodes.
func (r *Runtime) NodeAddress(ctx context.Context, cfg *rest.Config, name string, types ...corev1.NodeAddressType) (netip.Addr, error) {
	cl, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return netip.Addr{}, err
	}
	var out netip.Addr
	err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		defer cancel()
		var node corev1.Node
		if err := cl.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			r.SetReady("node address", fmt.Errorf("get node %s: %w", name, err))
			return false, nil
		}
		if out = nodeIPv4(node.Status.Addresses, types); !out.IsValid() {
			r.SetReady("node address", fmt.Errorf("node %s has no IPv4 address of type %v", name, types))
			return false, nil
		}
		r.SetReady("node address", nil)
		return true, nil
	})
	return out, err
}

// nodeIPv4 is the first IPv4 address of addrs of the first type of types
// that has one.
func nodeIPv4(addrs []corev1.NodeAddress, types []corev1.NodeAddressType) netip.Addr {
	for _, t := range types {
		i := slices.IndexFunc(addrs, func(a corev1.NodeAddress) bool {
			ip, err := netip.ParseAddr(a.Address)
			return a.Type == t && err == nil && ip.Is4()
		})
		if i >= 0 {
			return netip.MustParseAddr(addrs[i].Address)
		}
	}
	return netip.Addr{}
}
