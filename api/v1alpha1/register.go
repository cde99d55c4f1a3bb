package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every type in this package.
var GroupVersion = schema.GroupVersion{Group: "causeway.dev", Version: "v1alpha1"}

// AddToScheme adds this package's types to a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&Cluster{}, &ClusterList{},
		&Endpoint{}, &EndpointList{},
		&Gateway{}, &GatewayList{},
		&ServiceExportRecord{}, &ServiceExportRecordList{},
		&VIPAllocation{}, &VIPAllocationList{},
		&GlobalCIDR{}, &GlobalCIDRList{},
		&CIDRClaim{}, &CIDRClaimList{},
		&TunnelKey{}, &TunnelKeyList{},
		&GlobalIngress{}, &GlobalIngressList{},
		&GlobalEgress{}, &GlobalEgressList{},
		&ClusterSetPolicy{}, &ClusterSetPolicyList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
