package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// TunnelKeySpec names the cluster a tunnel public key belongs to.
type TunnelKeySpec struct {
	// ClusterID is the cluster whose gateway holds the private key.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterID is immutable"
	ClusterID string `json:"clusterID"`
	// PublicKey is the gateway's public key as its Endpoint publishes it
	// (base64 of 32 bytes).
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="publicKey is immutable"
	PublicKey string `json:"publicKey"`
}

// TunnelKey claims one tunnel public key (WireGuard's, or the X25519 key
// of ipsec) in the broker for one cluster. It is cluster scoped and
// named after the key (the lowercase hex SHA-256 of its 32 bytes, see
// broker.TunnelKeyName), so the API server's uniqueness of names makes a
// claim atomic: a key announced by two clusters has one owner, the one
// that claimed it first. It carries the labels LabelClusterID and
// LabelNode (the gateway node holding the private key: each gateway
// candidate of a cluster has its own key).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=causeway
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[0-9a-f]{64}$')",message="name must be the lowercase hex SHA-256 of the public key (64 characters)"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.metadata.labels.causeway\.dev/node`
type TunnelKey struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec TunnelKeySpec `json:"spec"`
}

// TunnelKeyList is a list of TunnelKeys.
//
// +kubebuilder:object:root=true
type TunnelKeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TunnelKey `json:"items"`
}
