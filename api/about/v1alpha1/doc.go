// Package v1alpha1 holds the About API's ClusterProperty (KEP-2149, group
// about.k8s.io): a cluster-scoped, named property of the cluster. The
// ClusterSet's seeds use two of them: cluster.clusterset.k8s.io (the
// cluster's ID in its ClusterSet) and clusterset.k8s.io (the ClusterSet's
// name). Causeway ships the CRD for clusters that lack it and never
// changes or removes one that another project installed.
//
// +kubebuilder:object:generate=true
// +groupName=about.k8s.io
package v1alpha1
