// Package v1alpha1 holds Causeway's own API types, group causeway.dev,
// version v1alpha1: the Cluster a member announces, the Endpoint of its
// active gateway, the Gateway status each gateway candidate reports, the
// ServiceExportRecord a cluster publishes for each exported Service, and
// the claims in the broker: the VIPAllocation of a clusterset VIP, the
// GlobalCIDR of a global CIDR, the TunnelKey of a gateway's tunnel public
// key.
//
// In the broker every cluster writes only into its own namespace
// (cluster-<id>); the gateway mirrors the other clusters' objects into the
// local cluster's causeway-system namespace.
//
// +kubebuilder:object:generate=true
// +groupName=causeway.dev
package v1alpha1
