package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ClusterSpec is what a member cluster announces to the ClusterSet.
type ClusterSpec struct {
	// ClusterID is the cluster's name in the ClusterSet, a DNS label. It
	// follows the About API (ClusterProperty cluster.clusterset.k8s.io)
	// where the cluster has one.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterID is immutable"
	ClusterID string `json:"clusterID"`

	// PodCIDRs are the cluster's pod networks.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	// +listType=set
	PodCIDRs []string `json:"podCIDRs"`

	// ServiceCIDRs are the cluster's service networks.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	// +listType=set
	ServiceCIDRs []string `json:"serviceCIDRs"`

	// GlobalCIDRs are the cluster's share of the globalnet supernet; empty
	// when globalnet is off.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	// +listType=set
	GlobalCIDRs []string `json:"globalCIDRs,omitempty"`
}

// ClusterStatus is what the local cluster concluded about a Cluster.
type ClusterStatus struct {
	// ObservedGeneration is the generation the conditions were computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Valid.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Cluster is one member of the ClusterSet.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=causeway
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.spec.podCIDRs`
// +kubebuilder:printcolumn:name="Services",type=string,JSONPath=`.spec.serviceCIDRs`
// +kubebuilder:printcolumn:name="Global",type=string,JSONPath=`.spec.globalCIDRs`
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterSpec   `json:"spec"`
	Status ClusterStatus `json:"status,omitempty"`
}

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}
