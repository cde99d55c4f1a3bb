package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// CableDriver names a tunnel driver of pkg/cable.
// +kubebuilder:validation:Enum=wireguard;vxlan;ipsec
type CableDriver string

// The cable drivers.
const (
	CableWireGuard CableDriver = "wireguard"
	CableVXLAN     CableDriver = "vxlan"
	CableIPsec     CableDriver = "ipsec"
)

// EndpointSpec describes a cluster's active gateway: how to reach it and
// which subnets lie behind it.
type EndpointSpec struct {
	// ClusterID is the cluster this gateway serves.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterID string `json:"clusterID"`

	// Hostname is the gateway's node name.
	// +kubebuilder:validation:MaxLength=253
	Hostname string `json:"hostname"`

	// CableDriver is the tunnel driver the gateway speaks.
	CableDriver CableDriver `json:"cableDriver"`

	// PublicIP is the address remote gateways connect to.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	PublicIP string `json:"publicIP"`

	// PrivateIP is the gateway's address on its cluster's node network.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	PrivateIP string `json:"privateIP,omitempty"`

	// Port is the UDP port the tunnel listens on.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// PublicKey is the gateway's public key (base64 of 32 bytes): WireGuard's,
	// or for ipsec the X25519 key each pair's IKE pre-shared key is derived
	// from (the two gateways of a pair only can derive it); empty for
	// vxlan. The private key never leaves the node.
	// +optional
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=$`
	PublicKey string `json:"publicKey,omitempty"`

	// Subnets are the CIDRs reachable through this gateway: the cluster's
	// pod and service CIDRs, or its global CIDRs under globalnet.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	// +listType=set
	Subnets []string `json:"subnets"`

	// HealthCheckIP is an address inside the tunnel that answers the
	// gateway health checks.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	HealthCheckIP string `json:"healthCheckIP,omitempty"`

	// BackendConfig carries driver-specific settings.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	BackendConfig map[string]string `json:"backendConfig,omitempty"`
}

// EndpointStatus is what the local cluster concluded about an Endpoint.
type EndpointStatus struct {
	// ObservedGeneration is the generation the conditions were computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Valid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Endpoint is the active gateway of one cluster, as published to the broker.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=causeway
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.spec.hostname`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.cableDriver`
// +kubebuilder:printcolumn:name="Public IP",type=string,JSONPath=`.spec.publicIP`
type Endpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EndpointSpec   `json:"spec"`
	Status EndpointStatus `json:"status,omitempty"`
}

// EndpointList is a list of Endpoints.
//
// +kubebuilder:object:root=true
type EndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Endpoint `json:"items"`
}
