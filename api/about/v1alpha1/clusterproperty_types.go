package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is group about.k8s.io, version v1alpha1.
var GroupVersion = schema.GroupVersion{Group: "about.k8s.io", Version: "v1alpha1"}

// AddToScheme adds this package's types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ClusterProperty{}, &ClusterPropertyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// ClusterProperty is one property of the cluster, named by its metadata
// name (e.g. cluster.clusterset.k8s.io).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/pull/3084"
// +kubebuilder:printcolumn:name="Value",type=string,JSONPath=`.spec.value`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ClusterProperty struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterPropertySpec `json:"spec"`
}

// ClusterPropertySpec is the property's value.
type ClusterPropertySpec struct {
	// Value is the property's value.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128000
	Value string `json:"value"`
}

// ClusterPropertyList is a list of ClusterProperties.
//
// +kubebuilder:object:root=true
type ClusterPropertyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProperty `json:"items"`
}
