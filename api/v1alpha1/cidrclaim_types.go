package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// CIDRClaimSpec is one pod or service CIDR a member cluster announces
// directly (not through globalnet).
type CIDRClaimSpec struct {
	// CIDR is the claimed pod or service CIDR, in canonical form. The
	// object's name is its DNS-safe form (addrpolicy.CIDRClaimName).
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cidr is immutable"
	CIDR string `json:"cidr"`
	// ClusterID is the cluster that claims the CIDR: the member owning
	// the broker namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterID is immutable"
	ClusterID string `json:"clusterID"`
}

// CIDRClaim records in the broker, in the member's namespace
// cluster-<id>, that the member announces one pod or service CIDR
// directly. Its creationTimestamp is when the member first claimed the
// CIDR: importers settle overlapping CIDRs of two members by it, the
// older claim wins (pkg/addrpolicy rule 7). The member's active gateway
// writes one per direct CIDR before it publishes its Cluster and deletes
// those it no longer announces; leaving the ClusterSet deletes them all.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=causeway
// +kubebuilder:printcolumn:name="CIDR",type=string,JSONPath=`.spec.cidr`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CIDRClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CIDRClaimSpec `json:"spec"`
}

// CIDRClaimList is a list of CIDRClaims.
//
// +kubebuilder:object:root=true
type CIDRClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CIDRClaim `json:"items"`
}
