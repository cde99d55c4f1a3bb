package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ClusterSetPolicyName is the name of the one ClusterSetPolicy of a
// ClusterSet, in the broker (written by its administrator) and mirrored
// into every member cluster by the active gateway.
const ClusterSetPolicyName = "clusterset"

// ClusterSetPolicySpec is what must be the same on every member of the
// ClusterSet and what bounds each member. Only the broker administrator
// writes it; members read it. pkg/addrpolicy evaluates it (Policy): its
// defaults stand for every field left empty.
type ClusterSetPolicySpec struct {
	// AllowedCIDRs is the address space a member may announce: every pod,
	// service and global CIDR of a member lies inside one of them, or it
	// is refused by every other member. The globalnet supernet is always
	// allowed. Empty: the RFC 1918 ranges, 100.64.0.0/10 and fc00::/7.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="must be a CIDR"
	// +listType=set
	AllowedCIDRs []string `json:"allowedCIDRs,omitempty"`

	// VIPRange is the IPv4 clusterset VIP range. Empty: 243.0.0.0/12.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="must be an IPv4 CIDR"
	VIPRange string `json:"vipRange,omitempty"`

	// VIPRangeIPv6 is the IPv6 clusterset VIP range. Empty:
	// fd63:6175:7365::/108.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 6",message="must be an IPv6 CIDR"
	VIPRangeIPv6 string `json:"vipRangeIPv6,omitempty"`

	// Globalnet is the global address plan of clusters with overlapping
	// CIDRs.
	// +optional
	Globalnet GlobalnetPolicy `json:"globalnet,omitempty"`

	// Quotas bound what one member may write in the broker and what every
	// importer takes from one member.
	// +optional
	Quotas MemberQuotas `json:"quotas,omitempty"`
}

// GlobalnetPolicy is the ClusterSet's global address plan.
type GlobalnetPolicy struct {
	// Supernet holds every member's global CIDR. Empty: 242.0.0.0/8.
	// +optional
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4",message="must be an IPv4 CIDR"
	Supernet string `json:"supernet,omitempty"`

	// CIDRBits is the prefix length of one member's global CIDR: a
	// GlobalCIDR claim is a block of exactly this size. Zero: 24.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=29
	CIDRBits int32 `json:"cidrBits,omitempty"`
}

// MemberQuotas bound one member. Zero values pick the defaults of
// pkg/addrpolicy (DefaultQuotas).
type MemberQuotas struct {
	// ServiceExportRecords is the number of ServiceExportRecords a member
	// may hold in its broker namespace (its exported Services, each of
	// whose records may be split in parts): a ResourceQuota of the
	// broker, and the most any importer takes from one member.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ServiceExportRecords int32 `json:"serviceExportRecords,omitempty"`

	// Backends is the number of endpoints (backends over every record) an
	// importer takes from one member; the records beyond it are left out.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Backends int32 `json:"backends,omitempty"`

	// GlobalCIDRs is the number of GlobalCIDR claims of a member that
	// count: its oldest ones. Further claims are ignored by every member.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	GlobalCIDRs int32 `json:"globalCIDRs,omitempty"`

	// Objects is the number of Causeway objects of every other kind
	// (Clusters, Endpoints, CIDR claims, Leases, Events, …) a member may
	// hold in its broker namespace, each kind counted alone.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Objects int32 `json:"objects,omitempty"`
}

// ClusterSetPolicy is the ClusterSet's one policy: the address space
// members may announce, the clusterset VIP ranges, the globalnet plan and
// the per-member quotas. It is cluster scoped, named ClusterSetPolicyName,
// and written by the broker administrator (`causewayctl deploy-broker`);
// every daemon of every member reads it, none takes these settings from
// its own flags.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=causeway
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'clusterset'",message="the ClusterSet has one policy, named clusterset"
// +kubebuilder:printcolumn:name="VIP range",type=string,JSONPath=`.spec.vipRange`
// +kubebuilder:printcolumn:name="Supernet",type=string,JSONPath=`.spec.globalnet.supernet`
type ClusterSetPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterSetPolicySpec `json:"spec,omitempty"`
}

// ClusterSetPolicyList is a list of ClusterSetPolicies.
//
// +kubebuilder:object:root=true
type ClusterSetPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterSetPolicy `json:"items"`
}
