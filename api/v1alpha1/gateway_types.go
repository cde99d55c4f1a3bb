package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// HAStatus is a gateway candidate's role.
// +kubebuilder:validation:Enum=active;passive
type HAStatus string

// The gateway roles.
const (
	HAStatusActive  HAStatus = "active"
	HAStatusPassive HAStatus = "passive"
)

// ConnectionStatus is the state of one tunnel.
// +kubebuilder:validation:Enum=connecting;connected;error
type ConnectionStatus string

// The tunnel states.
const (
	Connecting ConnectionStatus = "connecting"
	Connected  ConnectionStatus = "connected"
	ConnError  ConnectionStatus = "error"
)

// LatencyRTT summarises the health-check round trips of a tunnel.
type LatencyRTT struct {
	// Last, Min, Max, Average are Go duration strings, e.g. "1.2ms".
	Last    string `json:"last,omitempty"`
	Min     string `json:"min,omitempty"`
	Max     string `json:"max,omitempty"`
	Average string `json:"average,omitempty"`
	// LossPercent is the share of recent health checks that got no answer.
	LossPercent int32 `json:"lossPercent,omitempty"`
}

// Connection is one tunnel from this gateway to a remote cluster.
type Connection struct {
	// ClusterID is the remote cluster.
	ClusterID string `json:"clusterID"`
	// Endpoint is the remote gateway as it was programmed.
	Endpoint EndpointSpec `json:"endpoint"`
	// Status of the tunnel.
	Status ConnectionStatus `json:"status"`
	// StatusMessage explains Status.
	// +optional
	StatusMessage string `json:"statusMessage,omitempty"`
	// LatencyRTT of the health checks.
	// +optional
	LatencyRTT *LatencyRTT `json:"latencyRTT,omitempty"`
	// LastHandshake is the time of the tunnel's last handshake, when the
	// driver has handshakes.
	// +optional
	LastHandshake *metav1.Time `json:"lastHandshake,omitempty"`
}

// GatewayStatus is reported by the gateway candidate on one node.
type GatewayStatus struct {
	// HAStatus is this candidate's role.
	HAStatus HAStatus `json:"haStatus,omitempty"`
	// TunnelDevice is the network device this candidate's tunnels use
	// on its node (set while active).
	// +optional
	// +kubebuilder:validation:MaxLength=15
	TunnelDevice string `json:"tunnelDevice,omitempty"`
	// LocalEndpoint is what this gateway publishes when active.
	// +optional
	LocalEndpoint *EndpointSpec `json:"localEndpoint,omitempty"`
	// Connections are the tunnels this gateway holds (none when passive).
	// +optional
	// +listType=map
	// +listMapKey=clusterID
	// +kubebuilder:validation:MaxItems=256
	Connections []Connection `json:"connections,omitempty"`
	// Conditions: Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Gateway is the status of the gateway candidate on one node; its name is
// the node name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=causeway
// +kubebuilder:printcolumn:name="HA",type=string,JSONPath=`.status.haStatus`
type Gateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status GatewayStatus `json:"status,omitempty"`
}

// GatewayList is a list of Gateways.
//
// +kubebuilder:object:root=true
type GatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Gateway `json:"items"`
}
