package addrpolicy

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// Bounds of a remote export record. They repeat the CRD schema's limits
// (api/v1alpha1.ServiceExportRecordSpec) where it has them: a broker
// whose CRD is older, edited or absent must not widen what importers
// take in. MaxRecordBackends bounds the sum over all groups of a record
// joined from its head and parts (pkg/mcs.JoinRecord), which the schema
// cannot (each object passes it alone). MaxRecordEndpointCount bounds
// the claimed readyEndpoints/servingEndpoints (the weight importers give
// a ClusterSetIP export): Kubernetes' tested maximum of pods in a
// cluster.
const (
	MaxRecordPorts          = 100
	MaxRecordClusterIPs     = 2
	MaxRecordEndpointGroups = 100
	MaxRecordGroupPorts     = 100
	MaxRecordGroupBackends  = 1000
	MaxRecordBackends       = 10000
	MaxRecordEndpointCount  = 150000
	MaxRecordExportedMeta   = 64 // exportedLabels, exportedAnnotations entries each
	// MaxRecordAnnotationBytes bounds the exported annotations' keys and
	// values together (the API server's limit for an object's
	// annotations: they become the ServiceImport's).
	MaxRecordAnnotationBytes = 256 * 1024
	maxAppProtocol           = 256
	maxNodeName              = 253
	maxClientIPTimeout       = 86400
)

// RecordReason is why a remote export record is refused: the reason of
// the importer's RemoteRecordRefused condition and Event.
type RecordReason string

// The reasons, in the order the rules are applied.
const (
	// RecordTooLarge: more ports, ClusterIPs, groups, backends, claimed
	// ready/serving endpoints or exported labels/annotations than the
	// bounds above, or a string longer than its field allows.
	RecordTooLarge RecordReason = "RecordTooLarge"
	// RecordInvalidField: the type, a protocol, an address type, the
	// session affinity (or its timeout), an IP family, the cluster or
	// Service name, or an exported label is not a legal value, the
	// endpoint counts are negative or more ready than serving, the record
	// is a part of a split record rather than the joined one, or the
	// record names another cluster than the one it came from.
	RecordInvalidField RecordReason = "InvalidField"
	// RecordInvalidPort: a port, target port or global port outside
	// 1–65535, a ClusterSetIP export without ports, or two ports with
	// the same name or the same protocol and number.
	RecordInvalidPort RecordReason = "InvalidPort"
	// RecordInvalidAddress: an address does not parse, carries a zone, is
	// IPv4-mapped IPv6, or is not of its group's address type.
	RecordInvalidAddress RecordReason = "InvalidAddress"
	// RecordReservedAddress: an address is unspecified, broadcast, in a
	// reserved range (loopback, link-local, multicast, 0.0.0.0/8, …;
	// DefaultReserved, the supernet excepted), in the clusterset VIP
	// range.
	RecordReservedAddress RecordReason = "ReservedAddress"
	// RecordInvalidClaim: a subnet the cluster is reached through is not
	// a subnet Decide could have accepted (too short, e.g. a /1 half of
	// the default route, reserved, the VIP range, local space): the
	// mirror it came from is not to be trusted.
	RecordInvalidClaim RecordReason = "InvalidClaim"
	// RecordOutsideClaim: an address the importer would send traffic to
	// lies outside every subnet the cluster is reached through.
	RecordOutsideClaim RecordReason = "AddressOutsideClaim"
)

// RecordError is CheckRecord's refusal.
type RecordError struct {
	Reason  RecordReason
	Message string
}

func (e *RecordError) Error() string { return string(e.Reason) + ": " + e.Message }

func refuseRecord(reason RecordReason, format string, args ...any) *RecordError {
	return &RecordError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Claim is what one remote cluster may claim in its export records.
type Claim struct {
	// ClusterID is the cluster whose broker namespace the record came
	// from (the only identity that may write there).
	ClusterID string
	// Tunnel is true when this cluster reaches the remote: its mirrored
	// Endpoint is Valid, and Subnets (that Endpoint's spec.subnets, the
	// verdict of Decide as the gateway published it) are the only
	// addresses its records may send traffic to. Without a tunnel the
	// importer renders the remote's backends not ready, and only the rules
	// that need no subnets apply.
	Tunnel  bool
	Subnets []netip.Prefix
}

// CheckRecord decides whether this cluster accepts a remote cluster's
// export record of one Service, nil or a *RecordError. It is the one
// authority importers consult: a refused record contributes nothing to
// the import (no port, no conflict, no backend).
//
// The rules, the first failing one refusing the record:
//
//  1. Sizes (RecordTooLarge): the bounds above and each string field's
//     length.
//  2. Fields (RecordInvalidField, RecordInvalidPort): legal enum values,
//     DNS-label names, spec.clusterID equal to claim.ClusterID, exported
//     labels that are valid labels; every port in 1–65535, protocol TCP,
//     UDP or SCTP, names and protocol/number pairs unique.
//  3. Addresses (RecordInvalidAddress, RecordReservedAddress): every
//     ClusterIP, backend address and global IP is a plain IP address
//     (no zone, not IPv4-mapped) outside the reserved ranges and the VIP
//     range; a backend's address has its group's family.
//  4. Claims (RecordInvalidClaim, RecordOutsideClaim), with a tunnel:
//     every subnet of claim passes Decide's syntax, reserved-space and
//     local-space rules again (a mirror edited by hand, or a gateway
//     configured differently, is not trusted blindly), and every address the importer sends traffic to lies
//     inside one of them. Those addresses follow pkg/mcs.SourceFromRecord
//     for an import of the record's own type (an export that lost the
//     type conflict serves nothing), per IP family (ReachedThroughGlobal):
//     a ClusterSetIP record is reached at its ClusterIPs, a Headless one
//     at its backend addresses — except that an address of a family the
//     record carries global addresses of is reached at its ports' global
//     IPs, resp. its backends' global IPs, only (globalnet translates
//     IPv4, so under globalnet IPv4 goes to global IP:port and IPv6
//     directly). An address of a family no subnet of claim has (Decide
//     left the cluster's IPv6 CIDRs out, or its gateway announces none)
//     is not reached: importers leave it out (Reaches), it refuses
//     nothing. The other addresses are the remote's own business (pod
//     IPs behind a ClusterIP, host-network backends, addresses hidden by
//     globalnet) and may overlap anybody's; they pass rule 3 only.
//
// cfg is the same Config as Decide's; its Claims, when set, are checked
// against the claim's subnets like a remote's CIDRs in Decide.
func CheckRecord(cfg Config, r *v1alpha1.ServiceExportRecordSpec, claim Claim) error {
	cfg = cfg.WithDefaults()
	if err := checkRecordSizes(r); err != nil {
		return err
	}
	if err := checkRecordFields(r, claim.ClusterID); err != nil {
		return err
	}
	headless := r.Type == mcsv1beta1.Headless
	type addr struct {
		what string
		a    netip.Addr
		// reached: the importer sends traffic to it (when its family
		// is in the claim).
		reached bool
	}
	var addrs []addr
	// parse checks the address s; forType: the import of the record's
	// type sends traffic to this kind of address; own: a ClusterIP or
	// backend address (not a global one), reached unless its family goes
	// through global addresses.
	parse := func(what, s string, forType, own bool, family string) error {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			return refuseRecord(RecordInvalidAddress, "%s %q is not an IP address", what, truncate(s, 60))
		case a.Zone() != "":
			return refuseRecord(RecordInvalidAddress, "%s %s carries a zone", what, a)
		case a.Is4In6():
			return refuseRecord(RecordInvalidAddress, "%s %s is an IPv4-mapped IPv6 address", what, a)
		case family == string(corev1.IPv4Protocol) && !a.Is4(), family == string(corev1.IPv6Protocol) && !a.Is6():
			return refuseRecord(RecordInvalidAddress, "%s %s is not an %s address", what, a, family)
		}
		reached := forType && (!own || !ReachedThroughGlobal(r, a))
		addrs = append(addrs, addr{what, a, reached})
		return nil
	}
	for _, s := range r.ClusterIPs {
		if err := parse("clusterIP", s, !headless, true, ""); err != nil {
			return err
		}
	}
	for _, p := range r.Ports {
		if p.Global != nil {
			if err := parse(fmt.Sprintf("port %q global IP", p.Name), p.Global.IP, !headless, false, ""); err != nil {
				return err
			}
		}
	}
	for _, g := range r.Endpoints {
		for _, b := range g.Backends {
			if err := parse("backend", b.Address, headless, true, g.AddressType); err != nil {
				return err
			}
			if b.GlobalIP != "" {
				if err := parse("backend "+b.Address+" global IP", b.GlobalIP, headless, false, ""); err != nil {
					return err
				}
			}
		}
	}
	for _, x := range addrs {
		if err := cfg.checkAddr(x.what, x.a); err != nil {
			return err
		}
	}
	if !claim.Tunnel {
		return nil
	}
	for _, p := range claim.Subnets {
		if v := cfg.checkPrefix(p.String(), p, spaceEither); v != nil {
			return refuseRecord(RecordInvalidClaim, "cluster %q is reached through %s, which no cluster may claim: %s", claim.ClusterID, p, v.Message)
		}
		if v := cfg.checkSpace(claim.ClusterID, []netip.Prefix{p}); v != nil {
			return refuseRecord(RecordInvalidClaim, "cluster %q is reached through %s, which no cluster may claim: %s", claim.ClusterID, p, v.Message)
		}
	}
	for _, x := range addrs {
		if x.reached && Reaches(claim.Subnets, x.a) && !Contains(claim.Subnets, x.a) {
			hint := ""
			if !ReachedThroughGlobal(r, x.a) {
				hint = " (the record carries no global address of its family)"
			}
			return refuseRecord(RecordOutsideClaim, "%s %s is outside the subnets cluster %q is reached through %s%s",
				x.what, x.a, claim.ClusterID, prefixList(claim.Subnets), hint)
		}
	}
	return nil
}

// ReachedThroughGlobal reports whether importers reach r's own address a
// (a ClusterIP or a backend address) through r's global addresses rather
// than at a itself: when r carries a global address (a port's global
// pair, a backend's global IP) of a's IP family. It is the one per-family
// address rule of export records. Globalnet allocates from an IPv4
// supernet and translates IPv4 only, so under globalnet an IPv4 address
// is reached at its global IP(:port) — the clusters' IPv4 CIDRs may
// overlap — and an IPv6 address directly, through the tunnel: the
// clusters' IPv6 CIDRs must be unique in the ClusterSet, which Decide
// checks (a cluster whose IPv6 CIDRs overlap has them left out, and then
// Reaches says its IPv6 addresses are not reached). Without globalnet
// every address is reached directly.
func ReachedThroughGlobal(r *v1alpha1.ServiceExportRecordSpec, a netip.Addr) bool {
	same := func(s string) bool {
		g, err := netip.ParseAddr(s)
		return err == nil && g.Unmap().Is4() == a.Unmap().Is4()
	}
	for _, p := range r.Ports {
		if p.Global != nil && same(p.Global.IP) {
			return true
		}
	}
	for _, g := range r.Endpoints {
		for _, b := range g.Backends {
			if b.GlobalIP != "" && same(b.GlobalIP) {
				return true
			}
		}
	}
	return false
}

// Reaches reports whether the tunnel to a cluster, reaching subnets
// (Claim.Subnets, a Valid Endpoint's spec.subnets), carries a's IP family
// at all: a family without a subnet (a cluster whose IPv6 CIDRs Decide
// left out, a gateway announcing none) is not reached, and importers
// leave its addresses out of the import instead of sending traffic to
// them with no route. An address of a carried family is reached only
// inside the subnets (Contains; CheckRecord refuses a record that names
// one outside).
func Reaches(subnets []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range subnets {
		if p.Addr().Is4() == a.Is4() {
			return true
		}
	}
	return false
}

// checkAddr refuses an address no record may name: unspecified,
// broadcast, in the VIP range or in a reserved range outside the
// supernet.
func (cfg Config) checkAddr(what string, a netip.Addr) error {
	if a.IsUnspecified() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return refuseRecord(RecordReservedAddress, "%s %s is not a unicast address", what, a)
	}
	if cfg.Policy.VIPRange.Contains(a) {
		return refuseRecord(RecordReservedAddress, "%s %s is in the clusterset VIP range %s", what, a, cfg.Policy.VIPRange)
	}
	if cfg.Policy.VIPRangeIPv6.Contains(a) {
		return refuseRecord(RecordReservedAddress, "%s %s is in the IPv6 clusterset VIP range %s", what, a, cfg.Policy.VIPRangeIPv6)
	}
	if cfg.Policy.Supernet.Contains(a) {
		return nil
	}
	for _, r := range DefaultReserved() {
		if r.Contains(a) {
			return refuseRecord(RecordReservedAddress, "%s %s is in the reserved range %s", what, a, r)
		}
	}
	return nil
}

func checkRecordSizes(r *v1alpha1.ServiceExportRecordSpec) error {
	too := func(what string, n, limit int) error {
		if n > limit {
			return refuseRecord(RecordTooLarge, "%d %s, at most %d", n, what, limit)
		}
		return nil
	}
	long := func(what, s string, limit int) error {
		if len(s) > limit {
			return refuseRecord(RecordTooLarge, "%s is %d bytes long, at most %d", what, len(s), limit)
		}
		return nil
	}
	total := 0
	for _, g := range r.Endpoints {
		total += len(g.Backends)
	}
	errs := []error{
		too("ports", len(r.Ports), MaxRecordPorts),
		too("clusterIPs", len(r.ClusterIPs), MaxRecordClusterIPs),
		too("endpoint groups", len(r.Endpoints), MaxRecordEndpointGroups),
		too("backends", total, MaxRecordBackends),
		too("ready endpoints", int(r.ReadyEndpoints), MaxRecordEndpointCount),
		too("serving endpoints", int(r.ServingEndpoints), MaxRecordEndpointCount),
		too("IP families", len(r.IPFamilies), 2),
		too("exported labels", len(r.ExportedLabels), MaxRecordExportedMeta),
		too("exported annotations", len(r.ExportedAnnotations), MaxRecordExportedMeta),
	}
	if r.TrafficDistribution != nil {
		errs = append(errs, long("trafficDistribution", *r.TrafficDistribution, validation.DNS1123LabelMaxLength))
	}
	for _, p := range r.Ports {
		errs = append(errs, long("port name", p.Name, validation.DNS1123LabelMaxLength))
		if p.AppProtocol != nil {
			errs = append(errs, long("appProtocol", *p.AppProtocol, maxAppProtocol))
		}
	}
	for _, g := range r.Endpoints {
		errs = append(errs, too("ports in a group", len(g.Ports), MaxRecordGroupPorts),
			too("backends in a group", len(g.Backends), MaxRecordGroupBackends))
		for _, p := range g.Ports {
			errs = append(errs, long("target port name", p.Name, validation.DNS1123LabelMaxLength))
		}
		for _, b := range g.Backends {
			errs = append(errs, long("backend address", b.Address, 45), long("backend global IP", b.GlobalIP, 45),
				long("hostname", b.Hostname, validation.DNS1123LabelMaxLength),
				long("nodeName", b.NodeName, maxNodeName), long("zone", b.Zone, validation.DNS1123LabelMaxLength))
		}
	}
	size := 0
	for k, v := range r.ExportedAnnotations {
		size += len(k) + len(v)
	}
	errs = append(errs, too("bytes of exported annotations", size, MaxRecordAnnotationBytes))
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkRecordFields(r *v1alpha1.ServiceExportRecordSpec, clusterID string) error {
	bad := func(format string, args ...any) error { return refuseRecord(RecordInvalidField, format, args...) }
	if r.ClusterID != clusterID {
		return bad("clusterID %q in a record of cluster %q", truncate(r.ClusterID, 63), clusterID)
	}
	for _, f := range [][2]string{{"clusterID", r.ClusterID}, {"serviceNamespace", r.ServiceNamespace}, {"serviceName", r.ServiceName}} {
		if len(validation.IsDNS1123Label(f[1])) > 0 {
			return bad("%s %q is not a DNS label", f[0], truncate(f[1], 63))
		}
	}
	if r.Type != mcsv1beta1.ClusterSetIP && r.Type != mcsv1beta1.Headless {
		return bad("type %q is neither ClusterSetIP nor Headless", truncate(string(r.Type), 63))
	}
	if r.ReadyEndpoints < 0 || r.ServingEndpoints < 0 || r.ReadyEndpoints > r.ServingEndpoints {
		return bad("readyEndpoints %d, servingEndpoints %d: counts are not negative, and a ready endpoint serves", r.ReadyEndpoints, r.ServingEndpoints)
	}
	if r.Part != nil {
		return bad("part %d of %d of a split record, not the joined record", r.Part.Index, r.Part.Count)
	}
	switch r.SessionAffinity {
	case "", corev1.ServiceAffinityNone, corev1.ServiceAffinityClientIP:
	default:
		return bad("sessionAffinity %q is neither None nor ClientIP", truncate(string(r.SessionAffinity), 63))
	}
	if c := r.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		if t := *c.ClientIP.TimeoutSeconds; t < 1 || t > maxClientIPTimeout {
			return bad("sessionAffinityConfig timeout %d outside 1–%d", t, maxClientIPTimeout)
		}
	}
	if p := r.InternalTrafficPolicy; p != nil && *p != corev1.ServiceInternalTrafficPolicyCluster && *p != corev1.ServiceInternalTrafficPolicyLocal {
		return bad("internalTrafficPolicy %q is neither Cluster nor Local", truncate(string(*p), 63))
	}
	for _, f := range r.IPFamilies {
		if f != corev1.IPv4Protocol && f != corev1.IPv6Protocol {
			return bad("IP family %q is neither IPv4 nor IPv6", truncate(string(f), 63))
		}
	}
	// In key order, so that the refusal named does not depend on map order.
	for _, k := range slices.Sorted(maps.Keys(r.ExportedLabels)) {
		v := r.ExportedLabels[k]
		if msgs := slices.Concat(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)); len(msgs) > 0 {
			return bad("exported label %q=%q: %s", truncate(k, 63), truncate(v, 63), strings.Join(msgs, "; "))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.ExportedAnnotations)) {
		if msgs := validation.IsQualifiedName(strings.ToLower(k)); len(msgs) > 0 {
			return bad("exported annotation %q: %s", truncate(k, 63), strings.Join(msgs, "; "))
		}
	}

	port := func(what string, n int32) error {
		if n < 1 || n > 65535 {
			return refuseRecord(RecordInvalidPort, "%s %d outside 1–65535", what, n)
		}
		return nil
	}
	if r.Type == mcsv1beta1.ClusterSetIP && len(r.Ports) == 0 {
		return refuseRecord(RecordInvalidPort, "a ClusterSetIP export without ports")
	}
	names := map[string]bool{}
	numbers := map[string]bool{}
	for _, p := range r.Ports {
		switch p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			return bad("port %q protocol %q is not TCP, UDP or SCTP", p.Name, truncate(string(p.Protocol), 63))
		}
		if err := port(fmt.Sprintf("port %q", p.Name), p.Port); err != nil {
			return err
		}
		if p.Global != nil {
			if err := port(fmt.Sprintf("port %q global port", p.Name), p.Global.Port); err != nil {
				return err
			}
		}
		num := fmt.Sprintf("%s/%d", p.Protocol, p.Port)
		if names[p.Name] || numbers[num] {
			return refuseRecord(RecordInvalidPort, "port %q (%s) is listed twice", p.Name, num)
		}
		names[p.Name], numbers[num] = true, true
	}
	for _, g := range r.Endpoints {
		if g.AddressType != string(corev1.IPv4Protocol) && g.AddressType != string(corev1.IPv6Protocol) {
			return bad("address type %q is neither IPv4 nor IPv6", truncate(g.AddressType, 63))
		}
		for _, p := range g.Ports {
			if err := port(fmt.Sprintf("target port %q", p.Name), p.Port); err != nil {
				return err
			}
		}
	}
	return nil
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}
