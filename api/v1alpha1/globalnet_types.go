package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// GlobalCIDRSpec names the cluster a global CIDR belongs to.
type GlobalCIDRSpec struct {
	// ClusterID is the cluster that owns the CIDR.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterID is immutable"
	ClusterID string `json:"clusterID"`
}

// GlobalCIDR claims one global CIDR of the clusterset supernet in the
// broker for one cluster. It is cluster scoped and named after the CIDR
// (see globalnet.CIDRObjectName), so the API server's uniqueness of names
// makes a claim atomic: two clusters claiming the same range at the same
// moment cannot both succeed.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=causeway
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterID`
type GlobalCIDR struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec GlobalCIDRSpec `json:"spec"`
}

// GlobalCIDRList is a list of GlobalCIDRs.
//
// +kubebuilder:object:root=true
type GlobalCIDRList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalCIDR `json:"items"`
}

// GlobalIngressSpec is the globalnet allocation of one exported Service:
// what the active gateway translates. The globalnet controller writes it; the
// allocation is kept for as long as the Service is exported, across
// restarts and gateway failovers.
type GlobalIngressSpec struct {
	// ClusterIP is the Service's IPv4 cluster IP, the target of every port
	// (ClusterSetIP Services; empty when headless).
	// +optional
	// +kubebuilder:validation:MaxLength=15
	ClusterIP string `json:"clusterIP,omitempty"`
	// IP is the global IP every port of the Service shares.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	IP string `json:"ip,omitempty"`
	// Ports are the Service's ports with their global ports on IP.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	Ports []GlobalIngressPort `json:"ports,omitempty"`
	// Pods are the ready backing pods of a headless Service, one global IP
	// each (translated 1:1 both ways).
	// +optional
	// +kubebuilder:validation:MaxItems=1000
	// +listType=atomic
	Pods []GlobalPodAddress `json:"pods,omitempty"`
	// ReleasedAt is set when the Service stopped being exported: the
	// gateway no longer translates the addresses, and they stay reserved
	// (not handed to another Service) until the quarantine after this time
	// has passed, so that no old flow reaches a new Service. Microsecond
	// precision: a timestamp truncated to the second would shorten the
	// quarantine by up to a second.
	// +optional
	ReleasedAt *metav1.MicroTime `json:"releasedAt,omitempty"`
}

// GlobalIngressPort is one Service port's global port.
type GlobalIngressPort struct {
	// Name is the Service port's name.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`
	// Protocol is TCP, UDP or SCTP.
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol string `json:"protocol"`
	// Port is the Service port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// GlobalPort is the port on the global IP.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	GlobalPort int32 `json:"globalPort"`
}

// GlobalPodAddress is the global IP of one backing pod.
type GlobalPodAddress struct {
	// PodIP is the pod's address in its cluster.
	// +kubebuilder:validation:MaxLength=15
	PodIP string `json:"podIP"`
	// GlobalIP is the pod's global address.
	// +kubebuilder:validation:MaxLength=15
	GlobalIP string `json:"globalIP"`
}

// GlobalIngressStatus reports the allocation.
type GlobalIngressStatus struct {
	// Conditions: Allocated (False with reason GlobalPoolExhausted when the
	// cluster's global CIDR has no room left).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GlobalIngress holds the global IP:port pairs of one exported Service of
// this cluster. It lives in the Service's namespace under the Service's
// name.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=causeway,shortName=gi
// +kubebuilder:printcolumn:name="Cluster IP",type=string,JSONPath=`.spec.clusterIP`
// +kubebuilder:printcolumn:name="Global IP",type=string,JSONPath=`.spec.ip`
// +kubebuilder:printcolumn:name="Released",type=date,JSONPath=`.spec.releasedAt`
type GlobalIngress struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GlobalIngressSpec   `json:"spec,omitempty"`
	Status GlobalIngressStatus `json:"status,omitempty"`
}

// GlobalIngressList is a list of GlobalIngresses.
//
// +kubebuilder:object:root=true
type GlobalIngressList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalIngress `json:"items"`
}

// GlobalEgressSpec is the globalnet egress allocation of one namespace
// labelled causeway.dev/global-egress: the global IPs its pods' traffic
// to remote clusters leaves from, instead of the cluster-wide egress
// addresses. The globalnet controller writes it; the active gateway
// translates from it.
type GlobalEgressSpec struct {
	// IPs are the namespace's global egress IPs, in the order they were
	// allocated (as many as the label asks for). A pod leaves from
	// IPs[pod address mod len(IPs)].
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=15
	IPs []string `json:"ips,omitempty"`
	// Pods are the IPv4 addresses of the namespace's pods that are not
	// on the host network, not finished and inside the cluster's pod
	// CIDRs, sorted.
	// +optional
	// +kubebuilder:validation:MaxItems=10000
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=15
	Pods []string `json:"pods,omitempty"`
	// ReleasedAt is set when the namespace lost its label or was deleted:
	// the gateway no longer translates to the IPs, and they stay reserved
	// until the quarantine after this time has passed.
	// +optional
	ReleasedAt *metav1.MicroTime `json:"releasedAt,omitempty"`
}

// GlobalEgressStatus reports the allocation.
type GlobalEgressStatus struct {
	// Conditions: Allocated (False with reason GlobalPoolExhausted,
	// InvalidGlobalEgress or TooManyPods; the spec then keeps the IPs it
	// held before).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GlobalEgress holds the global egress IPs of one namespace of this
// cluster and the pod addresses they apply to. It is cluster scoped and
// named after the namespace, so that it outlives the namespace through
// its quarantine.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=causeway,shortName=ge
// +kubebuilder:printcolumn:name="IPs",type=string,JSONPath=`.spec.ips`
// +kubebuilder:printcolumn:name="Allocated",type=string,JSONPath=`.status.conditions[?(@.type=="Allocated")].status`
// +kubebuilder:printcolumn:name="Released",type=date,JSONPath=`.spec.releasedAt`
type GlobalEgress struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GlobalEgressSpec   `json:"spec,omitempty"`
	Status GlobalEgressStatus `json:"status,omitempty"`
}

// GlobalEgressList is a list of GlobalEgresses.
//
// +kubebuilder:object:root=true
type GlobalEgressList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GlobalEgress `json:"items"`
}
