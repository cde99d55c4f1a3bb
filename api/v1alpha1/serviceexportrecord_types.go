package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// ServiceExportRecordSpec is what one cluster publishes to the broker for
// one exported Service: the properties that KEP-1645 merges across the
// exporting clusters, plus the addresses other clusters use to reach it.
//
// +kubebuilder:validation:XValidation:rule="self.type == 'Headless' || (has(self.ports) && size(self.ports) > 0)",message="a ClusterSetIP export needs at least one port"
type ServiceExportRecordSpec struct {
	// ClusterID is the exporting cluster.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterID string `json:"clusterID"`

	// ServiceNamespace is the namespace of the exported Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ServiceNamespace string `json:"serviceNamespace"`

	// ServiceName is the name of the exported Service.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	ServiceName string `json:"serviceName"`

	// ExportCreationTimestamp is the creationTimestamp of the ServiceExport
	// in the exporting cluster, for information only. Conflicts are
	// resolved in favour of the oldest export (KEP-1645), aged by the
	// record object's metadata.creationTimestamp, which the broker API
	// server sets (a member could write any time here); ties go to the
	// smaller cluster ID.
	ExportCreationTimestamp metav1.Time `json:"exportCreationTimestamp"`

	// Type is ClusterSetIP, or Headless for a Service with clusterIP None.
	// +kubebuilder:validation:Enum=ClusterSetIP;Headless
	Type mcsv1beta1.ServiceImportType `json:"type"`

	// Ports are the Service's ports.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	Ports []RecordPort `json:"ports,omitempty"`

	// ClusterIPs are the Service's cluster IPs in the exporting cluster
	// (empty when headless): what a remote backend entry points at when
	// the networks are flat.
	// +optional
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="must be an IP address"
	// +listType=atomic
	ClusterIPs []string `json:"clusterIPs,omitempty"`

	// SessionAffinity is the Service's session affinity.
	// +optional
	// +kubebuilder:validation:Enum=ClientIP;None
	SessionAffinity corev1.ServiceAffinity `json:"sessionAffinity,omitempty"`

	// SessionAffinityConfig is the Service's session affinity configuration.
	// +optional
	SessionAffinityConfig *corev1.SessionAffinityConfig `json:"sessionAffinityConfig,omitempty"`

	// IPFamilies are the Service's IP families.
	// +optional
	// +kubebuilder:validation:MaxItems=2
	// +kubebuilder:validation:items:Enum=IPv4;IPv6
	// +listType=atomic
	IPFamilies []corev1.IPFamily `json:"ipFamilies,omitempty"`

	// InternalTrafficPolicy is the Service's internal traffic policy.
	// +optional
	// +kubebuilder:validation:Enum=Cluster;Local
	InternalTrafficPolicy *corev1.ServiceInternalTrafficPolicy `json:"internalTrafficPolicy,omitempty"`

	// TrafficDistribution is the Service's traffic distribution.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TrafficDistribution *string `json:"trafficDistribution,omitempty"`

	// ExportedLabels are the ServiceExport's spec.exportedLabels.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ExportedLabels map[string]string `json:"exportedLabels,omitempty"`

	// ExportedAnnotations are the ServiceExport's spec.exportedAnnotations.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ExportedAnnotations map[string]string `json:"exportedAnnotations,omitempty"`

	// ReadyEndpoints and ServingEndpoints count the Service's ready (not
	// terminating) and serving backends in the exporting cluster: distinct
	// addresses of the address type that has most, so a dual-stack pod
	// counts once. For a ClusterSetIP export they are all importers read
	// of its backends (the exporting cluster's ClusterIPs stand for them,
	// ready while ReadyEndpoints > 0, weighted by it). Only the record's
	// head (part 0) carries them, for the whole set.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ReadyEndpoints int32 `json:"readyEndpoints,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	ServingEndpoints int32 `json:"servingEndpoints,omitempty"`

	// Endpoints are, for a Headless export, the Service's backends in the
	// exporting cluster, copied from its EndpointSlices, ready or not
	// (importers render one endpoint per backend). Empty for ClusterSetIP
	// (ReadyEndpoints stands for them). At most 1 000 backends per object:
	// a larger set is split over parts (Part).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	Endpoints []RecordEndpoints `json:"endpoints,omitempty"`

	// Part places this object in a set of record objects that together
	// carry one export's endpoints; unset when the record is one object.
	// +optional
	Part *RecordPart `json:"part,omitempty"`
}

// RecordPart is the position of one record object in a split export: the
// head (index 0, named <namespace>.<name>) carries the definition and the
// first endpoints, parts 1..count-1 (named
// <namespace>.<name>.<revision>-<index>) the rest. Importers use a set only
// when every part of the head's revision is there.
type RecordPart struct {
	// Index is 0 for the head, 1..Count-1 for the parts.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=9999
	Index int32 `json:"index"`

	// Count is the number of objects in the set, the head included.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=10000
	Count int32 `json:"count"`

	// Revision names the set: a hash of all its endpoints. Parts of
	// another revision are not part of it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+$`
	Revision string `json:"revision"`
}

// RecordEndpoints are backends sharing one address type and port mapping
// (one local EndpointSlice, or several merged).
type RecordEndpoints struct {
	// AddressType is IPv4 or IPv6.
	// +kubebuilder:validation:Enum=IPv4;IPv6
	AddressType string `json:"addressType"`

	// Ports map the Service's port names to the port the backends listen
	// on (the target port).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	Ports []RecordEndpointPort `json:"ports,omitempty"`

	// Backends are the backend addresses with their conditions.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=atomic
	Backends []RecordBackend `json:"backends"`
}

// RecordEndpointPort is one port of RecordEndpoints.
type RecordEndpointPort struct {
	// Name is the Service port's name ("" for an unnamed port).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// Port is the port number on the backend.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// RecordBackend is one backend of an exported Service.
type RecordBackend struct {
	// Address is the backend's (pod's) IP address.
	// +kubebuilder:validation:MaxLength=45
	Address string `json:"address"`

	// Hostname is the pod's hostname (headless Services).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Hostname string `json:"hostname,omitempty"`

	// NodeName is the node the backend runs on in the exporting cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`

	// GlobalIP is the backend's globalnet address (headless Services of a
	// cluster running globalnet): importers use it instead of Address.
	// +optional
	// +kubebuilder:validation:MaxLength=45
	GlobalIP string `json:"globalIP,omitempty"`
	// Zone is the backend's topology zone.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`

	// Ready, Serving and Terminating are the backend's EndpointSlice
	// conditions.
	// +optional
	Ready bool `json:"ready,omitempty"`
	// +optional
	Serving bool `json:"serving,omitempty"`
	// +optional
	Terminating bool `json:"terminating,omitempty"`
}

// RecordPort is one port of an exported Service.
type RecordPort struct {
	// Name is the port's name; empty only for a single-port Service.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// Protocol is TCP, UDP or SCTP.
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol corev1.Protocol `json:"protocol"`

	// Port is the Service port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// AppProtocol is the port's application protocol.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	AppProtocol *string `json:"appProtocol,omitempty"`

	// Global is the globalnet address of this port (ingress DNAT to the
	// Service), set only when the exporting cluster runs globalnet.
	// +optional
	Global *GlobalAddress `json:"global,omitempty"`
}

// GlobalAddress is a globalnet IP:port pair.
type GlobalAddress struct {
	// IP is an address of the exporting cluster's global CIDR.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
	IP string `json:"ip"`

	// Port is the port on IP.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// ServiceExportRecord is one cluster's export of one Service, as written to
// the broker. It lives in the exporting cluster's broker namespace
// (cluster-<id>) and is named <service namespace>.<service name>, so each
// cluster writes only its own records and reads everybody's. A headless
// export with more than 1 000 backends is split: that object is the head,
// further objects of the same kind are its parts (spec.part).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=causeway,shortName=ser
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterID`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.serviceNamespace`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.serviceName`
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.spec.readyEndpoints`
// +kubebuilder:printcolumn:name="Part",type=integer,JSONPath=`.spec.part.index`
// +kubebuilder:printcolumn:name="Of",type=integer,JSONPath=`.spec.part.count`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.spec.part.revision`
type ServiceExportRecord struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ServiceExportRecordSpec `json:"spec"`
}

// ServiceExportRecordList is a list of ServiceExportRecords.
//
// +kubebuilder:object:root=true
type ServiceExportRecordList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ServiceExportRecord `json:"items"`
}

// VIPAllocationSpec names the multi-cluster service a clusterset VIP
// belongs to.
type VIPAllocationSpec struct {
	// ServiceNamespace is the namespace of the ServiceImport.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceNamespace is immutable"
	ServiceNamespace string `json:"serviceNamespace"`

	// ServiceName is the name of the ServiceImport.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="serviceName is immutable"
	ServiceName string `json:"serviceName"`
}

// VIPAllocation claims one clusterset VIP in the broker. It is cluster
// scoped and named after the address (see mcs.VIPObjectName), so the
// API server's uniqueness of names makes a claim atomic: the first Create
// wins, every other allocator gets AlreadyExists and moves on.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=causeway
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.serviceNamespace`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.serviceName`
type VIPAllocation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec VIPAllocationSpec `json:"spec"`
}

// VIPAllocationList is a list of VIPAllocations.
//
// +kubebuilder:object:root=true
type VIPAllocationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VIPAllocation `json:"items"`
}
