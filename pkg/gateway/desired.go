package gateway

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/cable"
)

// Reasons of the Valid condition that api/v1alpha1 does not define: they
// concern the pairing of a remote with this gateway rather than its
// addresses (those are pkg/addrpolicy's, with v1alpha1 reasons).
const (
	// ReasonClusterIDMismatch: the object's clusterID is not the cluster
	// whose broker namespace holds it.
	ReasonClusterIDMismatch = "ClusterIDMismatch"
	// ReasonDriverMismatch: the remote gateway speaks another cable driver.
	ReasonDriverMismatch = "DriverMismatch"
)

// Local is what validation needs to know about this cluster's gateway and
// the ClusterSet.
type Local struct {
	ClusterID string
	// Subnets are the local pod and service CIDRs.
	Subnets []netip.Prefix
	// NodeCIDRs are the networks of this gateway's public and private
	// addresses (its node network, the WAN it reaches remotes over): a
	// remote subnet overlapping one is refused.
	NodeCIDRs []netip.Prefix
	// GlobalCIDRs are this cluster's own global CIDRs; empty when
	// globalnet is off here. A remote subnet overlapping one is refused.
	GlobalCIDRs []netip.Prefix
	// GlobalClaims maps a cluster ID to the global CIDRs the broker's
	// claims (one cluster-scoped object per global CIDR) assign to it. A
	// remote Cluster announcing a global CIDR not claimed in its name is
	// refused (ReasonUnclaimedGlobalCIDR). nil: globalnet is off
	// ClusterSet-wide and the check is skipped.
	GlobalClaims map[string][]netip.Prefix
	// CIDRClaims maps a cluster ID to the pod and service CIDRs the
	// broker's CIDRClaims record it claims, each with the claim's
	// creation time: overlaps between remotes' direct CIDRs are settled
	// by them (addrpolicy rule 7, Config.CIDRClaims; nil: by the age of
	// the Cluster objects).
	CIDRClaims map[string]map[netip.Prefix]time.Time
	// KeyOwners maps a tunnel public key to the cluster the broker's
	// TunnelKey claims give it (broker.KeyOwners). A remote Endpoint
	// announcing a key not claimed in its name is refused
	// (ReasonKeyInUse). nil: keys are not checked (a driver without
	// keys).
	KeyOwners map[string]string
	// Policy is the ClusterSet's policy (allowed space, VIP ranges,
	// supernet); the zero value picks addrpolicy.DefaultPolicy().
	Policy addrpolicy.Policy
	// CableDriver is the local driver's name; remotes must speak it.
	CableDriver string
	// Port is the local tunnel port (VXLAN requires the same port
	// everywhere).
	Port uint16
}

// policy is the addrpolicy configuration local stands for.
func (l Local) policy() addrpolicy.Config {
	return addrpolicy.Config{
		LocalCIDRs: l.Subnets, NodeCIDRs: l.NodeCIDRs, GlobalCIDRs: l.GlobalCIDRs, Claims: l.GlobalClaims,
		CIDRClaims: l.CIDRClaims, KeyOwners: l.KeyOwners, Policy: l.Policy,
	}
}

// Remote is one cluster as read from the broker: its Cluster and its
// Endpoint, either of which may be missing. Their creation times are the
// age global CIDRs are settled by (the older object wins); direct CIDRs
// are settled by the broker's CIDR claims (Local.CIDRClaims).
type Remote struct {
	// ClusterID is the cluster whose broker namespace the objects came
	// from (the only identity allowed to write them).
	ClusterID       string
	Cluster         *v1alpha1.ClusterSpec
	ClusterCreated  time.Time
	Endpoint        *v1alpha1.EndpointSpec
	EndpointCreated time.Time
}

// Verdict is the outcome of validating one object.
type Verdict struct {
	Valid   bool
	Reason  string
	Message string
}

// Condition renders v as the Valid condition for generation gen.
func (v Verdict) Condition(gen int64) metav1.Condition {
	st := metav1.ConditionTrue
	if !v.Valid {
		st = metav1.ConditionFalse
	}
	return metav1.Condition{Type: v1alpha1.ConditionValid, Status: st, Reason: v.Reason, Message: v.Message, ObservedGeneration: gen}
}

// ClusterState is the decision for one cluster of the ClusterSet.
type ClusterState struct {
	ClusterID string
	// Cluster and Endpoint are the verdicts; nil when the object is absent.
	Cluster, Endpoint *Verdict
}

// Desired is the plain value a sync computes: the verdict for every
// cluster (mirrored into the local cluster with conditions) and the
// cable connections to program (only valid remote Endpoints).
type Desired struct {
	Clusters    []ClusterState
	Connections []cable.Connection
	// HealthTargets maps a connected cluster to its health-check address
	// (only clusters that published one).
	HealthTargets map[string]netip.Addr
}

var valid = Verdict{Valid: true, Reason: v1alpha1.ReasonValid, Message: "accepted"}

// Compute validates every remote and returns the desired state. It is
// pure. The local cluster's own objects (remote.ClusterID ==
// local.ClusterID) are always Valid and never become connections.
//
// Compute checks what concerns the pairing with this gateway (clusterID,
// cable driver, public address and port, key, health-check address); every
// decision about subnets — syntax, reserved ranges, overlaps with this
// cluster and between remotes (the older claim wins), global CIDRs and their
// claims, an Endpoint inside its Cluster, the health-check address inside
// the Endpoint's subnets — and whether an Endpoint's key is claimed in its
// cluster's name is pkg/addrpolicy's (Decide). An object refused here
// claims no subnets there.
func Compute(local Local, remotes []Remote) Desired {
	rs := slices.Clone(remotes)
	slices.SortFunc(rs, func(a, b Remote) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	out := Desired{HealthTargets: map[string]netip.Addr{}}

	// Pairing checks, one object at a time; the survivors go to the policy.
	states := make([]ClusterState, len(rs))
	conns := make([]cable.Connection, len(rs))
	health := make([]netip.Addr, len(rs))
	var pol []addrpolicy.Remote
	for i, r := range rs {
		st := ClusterState{ClusterID: r.ClusterID}
		if r.ClusterID == local.ClusterID {
			if r.Cluster != nil {
				st.Cluster = ptr.To(valid)
			}
			if r.Endpoint != nil {
				st.Endpoint = ptr.To(valid)
			}
			states[i] = st
			continue
		}
		pr := addrpolicy.Remote{ClusterID: r.ClusterID}
		if c := r.Cluster; c != nil {
			pr.Cluster = &addrpolicy.Cluster{PodCIDRs: c.PodCIDRs, ServiceCIDRs: c.ServiceCIDRs, GlobalCIDRs: c.GlobalCIDRs, Created: r.ClusterCreated}
			if c.ClusterID != r.ClusterID {
				v := Verdict{Reason: ReasonClusterIDMismatch, Message: fmt.Sprintf("clusterID %q published by cluster %q", c.ClusterID, r.ClusterID)}
				st.Cluster = &v
				pr.Cluster.Refused = v.Message
			}
		}
		if e := r.Endpoint; e != nil {
			v, conn, hc := checkEndpoint(local, r.ClusterID, e)
			if v.Valid {
				conns[i], health[i] = conn, hc
				pr.Endpoint = &addrpolicy.Endpoint{Subnets: e.Subnets, HealthCheckIP: hc, Created: r.EndpointCreated}
				if !conn.PublicKey.IsZero() {
					pr.Endpoint.PublicKey = e.PublicKey
				}
			} else {
				st.Endpoint = &v
			}
		}
		states[i] = st
		pol = append(pol, pr)
	}

	// Subnets: the policy's verdicts (a cluster ID given twice gets one
	// Decision refusing both).
	decisions := map[string]addrpolicy.Decision{}
	for _, d := range addrpolicy.Decide(local.policy(), pol) {
		decisions[d.ClusterID] = d
	}
	for i, r := range rs {
		if r.ClusterID == local.ClusterID {
			continue
		}
		d := decisions[r.ClusterID]
		st := &states[i]
		if d.Cluster != nil {
			st.Cluster = fromPolicy(d.Cluster)
		}
		if d.Endpoint == nil {
			continue
		}
		st.Endpoint = fromPolicy(d.Endpoint)
		if !d.Endpoint.Valid {
			continue
		}
		conn := conns[i]
		conn.Subnets = d.Accepted()
		out.Connections = append(out.Connections, conn)
		if hc := health[i]; hc.IsValid() {
			out.HealthTargets[r.ClusterID] = hc
		}
	}
	out.Clusters = states
	return out
}

func fromPolicy(v *addrpolicy.Verdict) *Verdict {
	return &Verdict{Valid: v.Valid, Reason: v.Reason, Message: v.Message}
}

// checkEndpoint checks the pairing of a remote Endpoint with this gateway
// (not its subnets) and returns the connection it asks for, without
// subnets, and its parsed health-check address (for the policy to place).
func checkEndpoint(local Local, id string, e *v1alpha1.EndpointSpec) (Verdict, cable.Connection, netip.Addr) {
	bad := func(reason, format string, args ...any) (Verdict, cable.Connection, netip.Addr) {
		return Verdict{Reason: reason, Message: fmt.Sprintf(format, args...)}, cable.Connection{}, netip.Addr{}
	}
	if e.ClusterID != id {
		return bad(ReasonClusterIDMismatch, "clusterID %q published by cluster %q", e.ClusterID, id)
	}
	if string(e.CableDriver) != local.CableDriver {
		return bad(ReasonDriverMismatch, "cable driver %q, this gateway speaks %q", e.CableDriver, local.CableDriver)
	}
	ip, err := netip.ParseAddr(e.PublicIP)
	if err != nil {
		return bad(v1alpha1.ReasonInvalidAddress, "publicIP %q is not an IP address", e.PublicIP)
	}
	ip = ip.Unmap()
	if ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || (ip.Is4() && ip.As4() == [4]byte{255, 255, 255, 255}) {
		return bad(v1alpha1.ReasonInvalidAddress, "publicIP %s is not a unicast address", ip)
	}
	if e.Port < 1 || e.Port > 65535 {
		return bad(v1alpha1.ReasonInvalidAddress, "port %d out of range 1-65535", e.Port)
	}
	if local.CableDriver == string(v1alpha1.CableVXLAN) && uint16(e.Port) != local.Port {
		return bad(v1alpha1.ReasonInvalidAddress, "vxlan port %d, every gateway must use %d", e.Port, local.Port)
	}
	if local.CableDriver == string(v1alpha1.CableVXLAN) && !ip.Is4() {
		return bad(v1alpha1.ReasonInvalidAddress, "vxlan needs an IPv4 publicIP, got %s", ip)
	}
	var key cable.Key
	if local.CableDriver == string(v1alpha1.CableWireGuard) || local.CableDriver == string(v1alpha1.CableIPsec) {
		// WireGuard's key, or the X25519 key ipsec derives the pair's
		// pre-shared key from.
		key, err = cable.ParseKey(e.PublicKey)
		if err != nil || key.IsZero() {
			return bad(v1alpha1.ReasonInvalidKey, "publicKey %q is not a %s public key", truncate(e.PublicKey, 60), local.CableDriver)
		}
	}
	var hc netip.Addr
	if e.HealthCheckIP != "" {
		hc, err = netip.ParseAddr(e.HealthCheckIP)
		if err != nil {
			return bad(v1alpha1.ReasonInvalidAddress, "healthCheckIP %q is not an IP address", e.HealthCheckIP)
		}
		hc = hc.Unmap()
	}
	return valid, cable.Connection{
		ClusterID: id,
		Endpoint:  netip.AddrPortFrom(ip, uint16(e.Port)),
		PublicKey: key,
	}, hc
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
