package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupVersion is the group and version of every type in this package.
var GroupVersion = schema.GroupVersion{Group: "causeway.dev", Version: "v1alpha1"}

var schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// AddToScheme adds this package's types to a scheme.
func AddToScheme(s *runtime.Scheme) error { return schemeBuilder.AddToScheme(s) }

func init() {
	schemeBuilder.Register(&Cluster{}, &ClusterList{}, &Endpoint{}, &EndpointList{}, &Gateway{}, &GatewayList{})
}
