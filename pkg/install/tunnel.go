package install

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/kube"
)

// tunnelState decides from what the gateways report in the member
// cluster (their Gateway objects and the Endpoints they mirror from the
// broker) whether the cluster's tunnel is up, and describes it. It is up
// when a gateway is active and connected to at least one remote cluster,
// or, while no other cluster has an Endpoint in the broker, when a gateway
// is active with no connection (the first cluster of a ClusterSet; a
// remote whose Endpoint the gateway refused keeps the tunnel down). The
// active gateway writes its status only after its first sync, which
// mirrored the broker's Endpoints and programmed a connection to each
// valid one, so an active gateway without connections has seen no
// remote.
func tunnelState(clusterID string, gateways []v1alpha1.Gateway, endpoints []v1alpha1.Endpoint) (bool, string) {
	var active *v1alpha1.Gateway
	var roles []string
	for i := range gateways {
		g := &gateways[i]
		role := string(g.Status.HAStatus)
		if role == "" {
			role = "no status yet"
		}
		roles = append(roles, g.Name+" "+role)
		if g.Status.HAStatus == v1alpha1.HAStatusActive && (active == nil || connected(g) > connected(active)) {
			active = g
		}
	}
	if active == nil {
		if len(roles) == 0 {
			return false, "no gateway has reported its status yet"
		}
		return false, "no active gateway (" + strings.Join(roles, ", ") + ")"
	}
	states := map[string]string{}
	for _, c := range active.Status.Connections {
		s := string(c.Status)
		if c.Status != v1alpha1.Connected && c.StatusMessage != "" {
			s += " (" + c.StatusMessage + ")"
		}
		states[c.ClusterID] = s
	}
	for _, ep := range endpoints {
		id := ep.Spec.ClusterID
		if id == clusterID {
			continue
		}
		cond := meta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionValid)
		switch {
		case cond != nil && cond.Status == "False":
			states[id] = "refused (" + cond.Reason + ": " + cond.Message + ")"
		case states[id] == "":
			states[id] = "no tunnel yet"
		}
	}
	head := "gateway " + active.Name + " active"
	if len(states) == 0 {
		return true, head + "; no other cluster's gateway in the broker yet"
	}
	ids := slices.Sorted(maps.Keys(states))
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + " " + states[id]
	}
	return connected(active) > 0, head + "; " + strings.Join(parts, ", ")
}

// connected counts a gateway's connected tunnels.
func connected(g *v1alpha1.Gateway) int {
	n := 0
	for _, c := range g.Status.Connections {
		if c.Status == v1alpha1.Connected {
			n++
		}
	}
	return n
}

// WaitTunnel waits, at most timeout, until the tunnel of cluster
// clusterID is up (see tunnelState), reporting each change of its state
// through progress. On timeout the error says what is not up.
func WaitTunnel(ctx context.Context, c client.Client, clusterID string, timeout time.Duration, progress func(string)) error {
	last := ""
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var gws v1alpha1.GatewayList
		if err := c.List(ctx, &gws, client.InNamespace(kube.Namespace)); err != nil {
			return false, fmt.Errorf("list Gateways: %w", err)
		}
		var eps v1alpha1.EndpointList
		if err := c.List(ctx, &eps, client.InNamespace(kube.Namespace)); err != nil {
			return false, fmt.Errorf("list Endpoints: %w", err)
		}
		up, s := tunnelState(clusterID, gws.Items, eps.Items)
		if s != last {
			last = s
			progress("tunnel: " + s)
		}
		return up, nil
	})
	if err != nil && last != "" && ctx.Err() == nil {
		return fmt.Errorf("tunnel not up after %s: %s", timeout, last)
	}
	return err
}
