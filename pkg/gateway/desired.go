package gateway

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable"
)

// Reasons of the Valid condition that api/v1alpha1 does not define: they
// concern the pairing of a remote with this gateway rather than a field's
// syntax.
const (
	// ReasonClusterIDMismatch: the object's clusterID is not the cluster
	// whose broker namespace holds it.
	ReasonClusterIDMismatch = "ClusterIDMismatch"
	// ReasonDriverMismatch: the remote gateway speaks another cable driver.
	ReasonDriverMismatch = "DriverMismatch"
	// ReasonInvalidCluster: the Endpoint's cluster announced an invalid
	// Cluster object, so its Endpoint is refused too.
	ReasonInvalidCluster = "InvalidCluster"
)

// Local is what validation needs to know about this cluster's gateway.
type Local struct {
	ClusterID string
	// Subnets are the local pod and service CIDRs.
	Subnets []netip.Prefix
	// CableDriver is the local driver's name; remotes must speak it.
	CableDriver string
	// Port is the local tunnel port (VXLAN requires the same port
	// everywhere).
	Port uint16
}

// Remote is one cluster as read from the broker: its Cluster and its
// Endpoint, either of which may be missing. Created is the age used to
// settle overlaps (the older object wins).
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

// Compute validates every remote against local and against each other and
// returns the desired state. It is pure. The local cluster's own objects
// (remote.ClusterID == local.ClusterID) are always Valid and never become
// connections. Overlaps between two remotes are settled by age: the
// object created first keeps its subnets and the newer one is refused (a
// working tunnel is never broken by a newcomer), ties broken by cluster ID.
func Compute(local Local, remotes []Remote) Desired {
	rs := slices.Clone(remotes)
	slices.SortFunc(rs, func(a, b Remote) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	out := Desired{HealthTargets: map[string]netip.Addr{}}
	states := make(map[string]*ClusterState, len(rs))

	// Pass 1: each object on its own.
	type candidate struct {
		id      string
		subnets []netip.Prefix
		created time.Time
		verdict *Verdict
		isEP    bool
	}
	var cands []candidate
	clusterSubnets := map[string][]netip.Prefix{}
	epConns := map[string]cable.Connection{}
	epHealth := map[string]netip.Addr{}
	for _, r := range rs {
		st := &ClusterState{ClusterID: r.ClusterID}
		states[r.ClusterID] = st
		own := r.ClusterID == local.ClusterID
		if r.Cluster != nil {
			v := valid
			if !own {
				var subs []netip.Prefix
				v, subs = checkCluster(local, r.ClusterID, r.Cluster)
				if v.Valid {
					clusterSubnets[r.ClusterID] = subs
					cands = append(cands, candidate{r.ClusterID, subs, r.ClusterCreated, nil, false})
				}
			}
			st.Cluster = &v
		}
		if r.Endpoint != nil {
			v := valid
			if !own {
				var conn cable.Connection
				var hc netip.Addr
				v, conn, hc = checkEndpoint(local, r.ClusterID, r.Endpoint)
				if v.Valid {
					epConns[r.ClusterID] = conn
					if hc.IsValid() {
						epHealth[r.ClusterID] = hc
					}
					cands = append(cands, candidate{r.ClusterID, conn.Subnets, r.EndpointCreated, nil, true})
				}
			}
			st.Endpoint = &v
		}
	}
	for i := range cands {
		st := states[cands[i].id]
		if cands[i].isEP {
			cands[i].verdict = st.Endpoint
		} else {
			cands[i].verdict = st.Cluster
		}
	}

	// Pass 2: overlaps between remotes, oldest first. A cluster's Cluster
	// and Endpoint never conflict with each other, only with other
	// clusters' objects.
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	type claim struct {
		p  netip.Prefix
		id string
	}
	var claims []claim
	for _, c := range cands {
		var conflict string
		for _, p := range c.subnets {
			for _, cl := range claims {
				if cl.id != c.id && p.Overlaps(cl.p) {
					conflict = fmt.Sprintf("subnet %s overlaps %s of cluster %q (older)", p, cl.p, cl.id)
					break
				}
			}
			if conflict != "" {
				break
			}
		}
		if conflict != "" {
			*c.verdict = Verdict{Reason: v1alpha1.ReasonOverlappingCIDR, Message: conflict}
			continue
		}
		for _, p := range c.subnets {
			claims = append(claims, claim{p, c.id})
		}
	}

	// Pass 3: an Endpoint of an invalid Cluster is refused; an Endpoint
	// must announce only subnets of its Cluster when the Cluster is known.
	for _, r := range rs {
		st := states[r.ClusterID]
		if r.ClusterID == local.ClusterID || st.Endpoint == nil || !st.Endpoint.Valid {
			continue
		}
		if st.Cluster != nil && !st.Cluster.Valid {
			*st.Endpoint = Verdict{Reason: ReasonInvalidCluster, Message: fmt.Sprintf("cluster %q is invalid: %s", r.ClusterID, st.Cluster.Message)}
			continue
		}
		if subs, ok := clusterSubnets[r.ClusterID]; ok && st.Cluster != nil {
			for _, p := range epConns[r.ClusterID].Subnets {
				if !slices.ContainsFunc(subs, func(q netip.Prefix) bool { return q.Bits() <= p.Bits() && q.Contains(p.Addr()) }) {
					*st.Endpoint = Verdict{Reason: v1alpha1.ReasonInvalidCIDR, Message: fmt.Sprintf("subnet %s is not one of cluster %q's CIDRs", p, r.ClusterID)}
					break
				}
			}
		}
	}

	for _, r := range rs {
		st := states[r.ClusterID]
		out.Clusters = append(out.Clusters, *st)
		if st.Endpoint != nil && st.Endpoint.Valid && r.ClusterID != local.ClusterID {
			out.Connections = append(out.Connections, epConns[r.ClusterID])
			if hc, ok := epHealth[r.ClusterID]; ok {
				out.HealthTargets[r.ClusterID] = hc
			}
		}
	}
	return out
}

// checkCluster validates a remote Cluster on its own.
func checkCluster(local Local, id string, c *v1alpha1.ClusterSpec) (Verdict, []netip.Prefix) {
	if c.ClusterID != id {
		return Verdict{Reason: ReasonClusterIDMismatch, Message: fmt.Sprintf("clusterID %q published by cluster %q", c.ClusterID, id)}, nil
	}
	// With globalnet the cluster is reached through its global CIDRs only;
	// its own pod/service CIDRs may then overlap others'.
	cidrs := slices.Concat(c.PodCIDRs, c.ServiceCIDRs)
	if len(c.GlobalCIDRs) > 0 {
		cidrs = c.GlobalCIDRs
	}
	subs, v := checkSubnets(local, cidrs)
	if !v.Valid {
		return v, nil
	}
	return v, subs
}

// checkEndpoint validates a remote Endpoint on its own and returns the
// connection it asks for and its health-check address.
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
	if ip.IsUnspecified() || ip.IsLoopback() || ip.IsMulticast() || ip.IsLinkLocalUnicast() || ip == netip.IPv4Unspecified() || (ip.Is4() && ip.As4() == [4]byte{255, 255, 255, 255}) {
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
	if local.CableDriver == string(v1alpha1.CableWireGuard) {
		key, err = cable.ParseKey(e.PublicKey)
		if err != nil || key.IsZero() {
			return bad(v1alpha1.ReasonInvalidKey, "publicKey %q is not a WireGuard public key", truncate(e.PublicKey, 60))
		}
	}
	subs, v := checkSubnets(local, e.Subnets)
	if !v.Valid {
		return v, cable.Connection{}, netip.Addr{}
	}
	var hc netip.Addr
	if e.HealthCheckIP != "" {
		hc, err = netip.ParseAddr(e.HealthCheckIP)
		if err != nil {
			return bad(v1alpha1.ReasonInvalidAddress, "healthCheckIP %q is not an IP address", e.HealthCheckIP)
		}
		hc = hc.Unmap()
		if !slices.ContainsFunc(subs, func(p netip.Prefix) bool { return p.Contains(hc) }) {
			return bad(v1alpha1.ReasonInvalidAddress, "healthCheckIP %s is outside the endpoint's subnets", hc)
		}
	}
	return valid, cable.Connection{
		ClusterID: id,
		Endpoint:  netip.AddrPortFrom(ip, uint16(e.Port)),
		PublicKey: key,
		Subnets:   subs,
	}, hc
}

// checkSubnets parses cidrs and refuses malformed ones, the default route,
// overlaps among themselves and overlaps with the local subnets.
func checkSubnets(local Local, cidrs []string) ([]netip.Prefix, Verdict) {
	if len(cidrs) == 0 {
		return nil, Verdict{Reason: v1alpha1.ReasonInvalidCIDR, Message: "no subnets"}
	}
	var subs []netip.Prefix
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		switch {
		case err != nil:
			return nil, Verdict{Reason: v1alpha1.ReasonInvalidCIDR, Message: fmt.Sprintf("%q is not a CIDR", truncate(s, 60))}
		case p != p.Masked():
			return nil, Verdict{Reason: v1alpha1.ReasonInvalidCIDR, Message: fmt.Sprintf("%s has host bits set", p)}
		case p.Bits() == 0:
			return nil, Verdict{Reason: v1alpha1.ReasonInvalidCIDR, Message: fmt.Sprintf("%s is the default route", p)}
		}
		for _, q := range subs {
			if p.Overlaps(q) && p != q {
				return nil, Verdict{Reason: v1alpha1.ReasonInvalidCIDR, Message: fmt.Sprintf("%s overlaps %s of the same object", p, q)}
			}
		}
		for _, q := range local.Subnets {
			if p.Overlaps(q) {
				return nil, Verdict{Reason: v1alpha1.ReasonOverlappingCIDR, Message: fmt.Sprintf("%s overlaps local %s (globalnet is off)", p, q)}
			}
		}
		subs = append(subs, p)
	}
	slices.SortFunc(subs, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), a.Bits()-b.Bits())
	})
	return slices.Compact(subs), valid
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
