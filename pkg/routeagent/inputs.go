package routeagent

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// Node is what the agent knows about the node it runs on.
type Node struct {
	ClusterID string
	Name      string
	IP        netip.Addr
}

// InputsFromEndpoints turns the mirrored Endpoints of causeway-system into
// Inputs (pure). The local cluster's Endpoint (named after its cluster ID)
// names the active gateway; it is used unless its Valid condition is
// False. A remote Endpoint is used only when Valid is True: the gateway
// validated it (its observedGeneration is not compared, so a remote
// gateway failover, which changes the spec first and the status after,
// does not withdraw that cluster's routes in between). The second result
// explains every Endpoint or subnet left out.
func InputsFromEndpoints(node Node, eps []v1alpha1.Endpoint, p Params) (Inputs, []string) {
	in := Inputs{NodeName: node.Name, NodeIP: node.IP, Params: p}
	var notes []string
	eps = slices.Clone(eps)
	slices.SortFunc(eps, func(a, b v1alpha1.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	for _, ep := range eps {
		valid := apimeta.FindStatusCondition(ep.Status.Conditions, v1alpha1.ConditionValid)
		if ep.Name == node.ClusterID {
			if valid != nil && valid.Status == metav1.ConditionFalse {
				notes = append(notes, fmt.Sprintf("local endpoint %s is not valid (%s): no gateway", ep.Name, valid.Reason))
				continue
			}
			ip, err := netip.ParseAddr(ep.Spec.PrivateIP)
			if err != nil {
				notes = append(notes, fmt.Sprintf("local endpoint %s: privateIP %q: no gateway", ep.Name, ep.Spec.PrivateIP))
				continue
			}
			in.Gateway = &Gateway{Hostname: ep.Spec.Hostname, NodeIP: ip.Unmap()}
			continue
		}
		if valid == nil || valid.Status != metav1.ConditionTrue {
			notes = append(notes, fmt.Sprintf("remote endpoint %s is not Valid=True: not routed", ep.Name))
			continue
		}
		r := Remote{ClusterID: ep.Name}
		for _, s := range ep.Spec.Subnets {
			pfx, err := netip.ParsePrefix(s)
			if err != nil {
				notes = append(notes, fmt.Sprintf("remote endpoint %s: subnet %q: %v", ep.Name, s, err))
				continue
			}
			r.Subnets = append(r.Subnets, pfx)
		}
		in.Remotes = append(in.Remotes, r)
	}
	return in, notes
}
