package install

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

func gateway(name string, role v1alpha1.HAStatus, conns ...v1alpha1.Connection) v1alpha1.Gateway {
	return v1alpha1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: v1alpha1.GatewayStatus{HAStatus: role, Connections: conns}}
}

func conn(id string, st v1alpha1.ConnectionStatus, msg string) v1alpha1.Connection {
	return v1alpha1.Connection{ClusterID: id, Status: st, StatusMessage: msg}
}

func endpoint(id string, valid metav1.ConditionStatus, reason string) v1alpha1.Endpoint {
	return v1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: id}, Spec: v1alpha1.EndpointSpec{ClusterID: id},
		Status: v1alpha1.EndpointStatus{Conditions: []metav1.Condition{{Type: v1alpha1.ConditionValid, Status: valid, Reason: reason, Message: "m"}}}}
}

// The tunnel is up with an active gateway connected to one remote at
// least, or active with no remote at all; every other state is named.
func TestTunnelState(t *testing.T) {
	own := endpoint("c1", metav1.ConditionTrue, v1alpha1.ReasonValid)
	for _, tc := range []struct {
		name string
		gws  []v1alpha1.Gateway
		eps  []v1alpha1.Endpoint
		up   bool
		desc string
	}{
		{"no status", nil, nil, false, "no gateway has reported its status yet"},
		{"passive only", []v1alpha1.Gateway{gateway("n0", v1alpha1.HAStatusPassive), gateway("n1", "")}, nil, false,
			"no active gateway (n0 passive, n1 no status yet)"},
		{"first cluster", []v1alpha1.Gateway{gateway("n0", v1alpha1.HAStatusActive)}, []v1alpha1.Endpoint{own}, true,
			"gateway n0 active; no other cluster's gateway in the broker yet"},
		{"remote not programmed yet", []v1alpha1.Gateway{gateway("n0", v1alpha1.HAStatusActive)},
			[]v1alpha1.Endpoint{own, endpoint("c2", metav1.ConditionTrue, v1alpha1.ReasonValid)}, false,
			"gateway n0 active; c2 no tunnel yet"},
		{"connecting", []v1alpha1.Gateway{gateway("n0", v1alpha1.HAStatusActive, conn("c2", v1alpha1.Connecting, "waiting"))},
			[]v1alpha1.Endpoint{own, endpoint("c2", metav1.ConditionTrue, v1alpha1.ReasonValid)}, false,
			"gateway n0 active; c2 connecting (waiting)"},
		{"one of two connected, one refused", []v1alpha1.Gateway{gateway("n1", v1alpha1.HAStatusPassive),
			gateway("n0", v1alpha1.HAStatusActive, conn("c3", v1alpha1.Connected, "ok"), conn("c4", v1alpha1.ConnError, "no answer"))},
			[]v1alpha1.Endpoint{own, endpoint("c2", metav1.ConditionFalse, "OverlappingCIDR"), endpoint("c3", metav1.ConditionTrue, v1alpha1.ReasonValid)}, true,
			"gateway n0 active; c2 refused (OverlappingCIDR: m), c3 connected, c4 error (no answer)"},
		{"only refused", []v1alpha1.Gateway{gateway("n0", v1alpha1.HAStatusActive)},
			[]v1alpha1.Endpoint{own, endpoint("c2", metav1.ConditionFalse, "OverlappingCIDR")}, false,
			"gateway n0 active; c2 refused (OverlappingCIDR: m)"},
	} {
		up, desc := tunnelState("c1", tc.gws, tc.eps)
		if up != tc.up || desc != tc.desc {
			t.Errorf("%s: %v %q, want %v %q", tc.name, up, desc, tc.up, tc.desc)
		}
	}
}
