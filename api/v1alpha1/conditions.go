package v1alpha1

// Condition types and reasons shared by the objects of this group.
const (
	// ConditionValid is True when a remote object passed validation and was
	// programmed; False (with a reason below) when it was refused.
	ConditionValid = "Valid"

	// ReasonValid: every field was accepted.
	ReasonValid = "Valid"
	// ReasonInvalidCIDR: a CIDR is malformed, not canonical, the default
	// route or too short, in a reserved range or the clusterset VIP range,
	// overlaps another CIDR of the same object, or (Endpoint) lies outside
	// its Cluster's CIDRs; or the object has no CIDRs (pkg/addrpolicy).
	ReasonInvalidCIDR = "InvalidCIDR"
	// ReasonCIDRNotAllowed: a CIDR lies outside the address space the
	// ClusterSet's policy allows members to announce (ClusterSetPolicy
	// spec.allowedCIDRs), or a pod or service CIDR meets the globalnet
	// supernet.
	ReasonCIDRNotAllowed = "CIDRNotAllowed"
	// ReasonOverlappingCIDR: a CIDR overlaps this cluster's (pod, service
	// or global), a global CIDR the broker assigned to another cluster, a
	// CIDR another cluster claimed earlier (CIDRClaim), or an older
	// cluster's global CIDR (pkg/addrpolicy).
	ReasonOverlappingCIDR = "OverlappingCIDR"
	// ReasonUnclaimedGlobalCIDR: a Cluster announces a global CIDR that
	// the broker does not hold a claim for in that cluster's name.
	ReasonUnclaimedGlobalCIDR = "GlobalCIDRNotClaimed"
	// ReasonCIDRNotClaimed: a pod or service CIDR a cluster announces
	// directly lies inside no CIDRClaim of that cluster in the broker, so
	// it has no age to settle overlaps by (pkg/addrpolicy rule 7).
	ReasonCIDRNotClaimed = "CIDRNotClaimed"
	// ReasonInvalidCluster: the Endpoint's Cluster is invalid, so the
	// Endpoint is refused too.
	ReasonInvalidCluster = "InvalidCluster"
	// ReasonInvalidKey: the public key is not a WireGuard key.
	ReasonInvalidKey = "InvalidKey"
	// ReasonKeyInUse: the Endpoint's public key is claimed in the broker
	// by another cluster (a TunnelKey in its name), or by nobody while the
	// broker holds key claims: the cluster that claimed the key first
	// keeps it.
	ReasonKeyInUse = "KeyInUse"
	// ReasonInvalidAddress: an IP address or port is malformed.
	ReasonInvalidAddress = "InvalidAddress"
	// ConditionAllocated is True when a GlobalIngress holds its addresses.
	ConditionAllocated = "Allocated"
	// ReasonGlobalPoolExhausted: the cluster's global CIDR has no room.
	ReasonGlobalPoolExhausted = "GlobalPoolExhausted"
	// ReasonInvalidGlobalEgress: a namespace's causeway.dev/global-egress
	// label is not a number of egress IPs in range.
	ReasonInvalidGlobalEgress = "InvalidGlobalEgress"
	// ReasonTooManyPods: a namespace with its own global egress IPs has
	// more pods than a GlobalEgress holds.
	ReasonTooManyPods = "TooManyPods"
	// ReasonNoGlobalCIDR: the cluster has not claimed its global CIDR yet.
	ReasonNoGlobalCIDR = "NoGlobalCIDR"
)

// Labels put on objects this group owns.
const (
	// LabelClusterID names the cluster an object belongs to.
	LabelClusterID = "causeway.dev/cluster-id"
	// LabelGatewayNode marks nodes that may run a gateway.
	LabelGatewayNode = "causeway.dev/gateway"
	// LabelNode names the node an object belongs to (a TunnelKey: the
	// gateway node holding the private key).
	LabelNode = "causeway.dev/node"
	// LabelGlobalEgress on a Namespace asks globalnet for that many
	// global egress IPs of its own ("1" to "8"): its pods reach remote
	// clusters from them instead of the cluster-wide egress addresses.
	LabelGlobalEgress = "causeway.dev/global-egress"
)
