package broker

import (
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// BoundsPolicyName names the ValidatingAdmissionPolicy (and its binding)
// that bounds what a member writes by the ClusterSet's policy.
const BoundsPolicyName = "causeway-member-bounds"

// Size bounds of what a member writes in the broker, beyond its CRD
// schemas (which cap each list on its own).
const (
	// MaxRecordItems bounds one ServiceExportRecord object's endpoints:
	// its backends plus its groups' ports, over all groups. It is
	// pkg/mcs.MaxRecordItems, the most the MCS controller puts in one
	// object before it splits a record into parts.
	MaxRecordItems = 1000
	// MaxAnnotationBytes bounds the metadata annotations (keys and values)
	// of one member object.
	MaxAnnotationBytes = 64 * 1024
	// MaxLabels bounds the number of metadata labels of one member object.
	MaxLabels = 64
	// MaxBackendConfigValue bounds each value of an Endpoint's
	// spec.backendConfig.
	MaxBackendConfigValue = 1024
)

// BoundsPolicy is the ValidatingAdmissionPolicy that holds every member
// to the ClusterSet's policy (its parameter: the ClusterSetPolicy named
// v1alpha1.ClusterSetPolicyName; while it is missing every member write
// it matches is refused). For requests of a member identity it refuses
//
//   - a GlobalCIDR whose name (pkg/globalnet.CIDRObjectName) is not a
//     block of exactly spec.globalnet.cidrBits inside
//     spec.globalnet.supernet (Forbidden);
//   - a VIPAllocation whose name (pkg/mcs.VIPObjectName) is not an
//     address inside the VIP range of its family (Forbidden);
//   - a Cluster whose pod or service CIDRs, or an Endpoint whose subnets,
//     are not canonical CIDRs of at least /8 (IPv4) or /16 (IPv6) inside
//     spec.allowedCIDRs, clear of the VIP ranges and the supernet — an
//     Endpoint's subnet may lie in the supernet instead — and a Cluster
//     whose global CIDRs are not blocks of the supernet as above
//     (Forbidden): the rules 1 and 2 of pkg/addrpolicy, which importers
//     apply again with what admission cannot know (other members' claims,
//     their own networks);
//   - a CIDRClaim not named addrpolicy.CIDRClaimName of its spec.cidr, or
//     whose CIDR is not a pod or service CIDR as above (Forbidden);
//   - a ServiceExportRecord with more than MaxRecordItems endpoint items,
//     not named <namespace>.<name> (head) or
//     <namespace>.<name>.<revision>-<index> (part), with exported labels
//     that are not legal labels or exported annotations that are not
//     qualified names or are more than addrpolicy.MaxRecordAnnotationBytes
//     together (Invalid);
//   - any of these objects with more than MaxLabels labels or
//     MaxAnnotationBytes of annotations, an Endpoint with a backendConfig
//     value longer than MaxBackendConfigValue (Invalid).
//
// Fields the ClusterSetPolicy leaves empty take the defaults of
// pkg/addrpolicy, as every daemon does. Each refusal names the rule and
// the ClusterSetPolicy.
func BoundsPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	def := addrpolicy.DefaultPolicy()
	var allowed []string
	for _, a := range def.Allowed {
		allowed = append(allowed, quote(a.String()))
	}
	fail := admissionregistrationv1.Fail
	forbidden, invalid := metav1.StatusReasonForbidden, metav1.StatusReasonInvalid
	is := func(resource string) string { return "request.resource.resource != '" + resource + "' || " }
	policy := "' (ClusterSetPolicy ' + params.metadata.name + ')'"
	const name = "object.metadata.name"
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: BoundsPolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			ParamKind:     &admissionregistrationv1.ParamKind{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ClusterSetPolicy"},
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create}, "vipallocations", "globalcidrs"),
					rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						"clusters", "endpoints", "serviceexportrecords", "cidrclaims"),
				},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{memberMatch},
			Variables: []admissionregistrationv1.Variable{
				memberVariable,
				{Name: "allowed", Expression: fmt.Sprintf("(params.?spec.?allowedCIDRs.orValue([]).size() > 0 ? params.spec.allowedCIDRs : [%s]).map(c, cidr(c).masked())",
					strings.Join(allowed, ", "))},
				{Name: "supernet", Expression: "cidr(" + orDefault("params.?spec.?globalnet.?supernet", "params.spec.globalnet.supernet", def.Supernet.String()) + ").masked()"},
				{Name: "cidrBits", Expression: fmt.Sprintf("params.?spec.?globalnet.?cidrBits.orValue(0) == 0 ? %d : params.spec.globalnet.cidrBits", def.GlobalCIDRBits)},
				{Name: "vipRanges", Expression: "[cidr(" + orDefault("params.?spec.?vipRange", "params.spec.vipRange", def.VIPRange.String()) + ").masked(), cidr(" +
					orDefault("params.?spec.?vipRangeIPv6", "params.spec.vipRangeIPv6", def.VIPRangeIPv6.String()) + ").masked()]"},
				{Name: "space", Expression: "'allowed space ' + variables.allowed.map(a, string(a)).join(', ') + ', VIP ranges ' + variables.vipRanges.map(a, string(a)).join(', ') + ', supernet ' + string(variables.supernet)"},
				// The CIDR a GlobalCIDR's name stands for, and the
				// address of a VIPAllocation's ('' when not a name of
				// pkg/mcs.VIPObjectName).
				{Name: "claimCIDR", Expression: name + ".replace('-', '/', 1)"},
				{Name: "vipAddress", Expression: name + ".startsWith('v6-') ? (" + name + ".matches('^v6-[0-9a-f]{4}(-[0-9a-f]{4}){7}$') ? " + name + ".substring(3).replace('-', ':') : '') : " +
					"(isIP(" + name + ") && string(ip(" + name + ")) == " + name + " && ip(" + name + ").family() == 4 ? " + name + " : '')"},
			},
			Validations: []admissionregistrationv1.Validation{
				{Reason: &forbidden, Expression: is("globalcidrs") + globalCIDR("variables.claimCIDR"),
					MessageExpression: "'global CIDR claim ' + object.metadata.name + ' is not a /' + string(variables.cidrBits) + ' of the globalnet supernet ' + string(variables.supernet) + " +
						"' named <network>-<bits>'" + " + " + policy},
				{Reason: &forbidden, Expression: is("vipallocations") + "(variables.vipAddress != '' && isIP(variables.vipAddress) && variables.vipRanges.exists(r, r.containsIP(ip(variables.vipAddress))))",
					MessageExpression: "'VIP allocation ' + object.metadata.name + ' is not an address of the clusterset VIP ranges ' + variables.vipRanges.map(a, string(a)).join(', ') + " + policy},
				{Reason: &forbidden, Expression: is("clusters") + "(object.spec.podCIDRs + object.spec.serviceCIDRs).all(c, " + directCIDR("c") + ")",
					MessageExpression: "'cluster ' + variables.member + ' announces pod or service CIDRs ' + (object.spec.podCIDRs + object.spec.serviceCIDRs).filter(c, !(" + directCIDR("c") + ")).join(', ') + " +
						"' outside the ClusterSet\\'s ' + variables.space + ' (canonical, at least /8 or /16)' + " + policy},
				{Reason: &forbidden, Expression: is("clusters") + "object.spec.?globalCIDRs.orValue([]).all(c, " + globalCIDR("c") + ")",
					MessageExpression: "'cluster ' + variables.member + ' announces global CIDRs ' + object.spec.globalCIDRs.filter(c, !(" + globalCIDR("c") + ")).join(', ') + " +
						"' that are not /' + string(variables.cidrBits) + ' blocks of the globalnet supernet ' + string(variables.supernet) + " + policy},
				{Reason: &forbidden, Expression: is("cidrclaims") + cidrClaimName(name, "object.spec.cidr"),
					MessageExpression: "'CIDR claim ' + object.metadata.name + ' is not named after its CIDR ' + object.spec.cidr + ' (<IPv4 network>-<bits>, or v6-<eight groups of four hex digits>-<bits>)'"},
				{Reason: &forbidden, Expression: is("cidrclaims") + directCIDR("object.spec.cidr"),
					MessageExpression: "'cluster ' + variables.member + ' claims CIDR ' + object.spec.cidr + ' outside the ClusterSet\\'s ' + variables.space + ' (canonical, at least /8 or /16)' + " + policy},
				{Reason: &forbidden, Expression: is("endpoints") + "object.spec.subnets.all(c, " + endpointSubnet("c") + ")",
					MessageExpression: "'cluster ' + variables.member + ' announces endpoint subnets ' + object.spec.subnets.filter(c, !(" + endpointSubnet("c") + ")).join(', ') + " +
						"' outside the ClusterSet\\'s ' + variables.space + ' (canonical, at least /8 or /16)' + " + policy},
				{Reason: &invalid, Expression: is("serviceexportrecords") + fmt.Sprintf("object.spec.?endpoints.orValue([]).map(g, size(g.backends) + g.?ports.orValue([]).size()).sum() <= %d", MaxRecordItems),
					MessageExpression: fmt.Sprintf("'export record ' + object.metadata.name + ' has ' + string(object.spec.endpoints.map(g, size(g.backends) + g.?ports.orValue([]).size()).sum()) + ' endpoint items (backends and group ports), more than %d in one object: split it into parts'", MaxRecordItems)},
				{Reason: &invalid, Expression: is("serviceexportrecords") + "object.metadata.name == object.spec.serviceNamespace + '.' + object.spec.serviceName + " +
					"(object.spec.?part.?index.orValue(0) == 0 ? '' : '.' + object.spec.part.revision + '-' + string(object.spec.part.index))",
					MessageExpression: "'export record ' + object.metadata.name + ' is not named <namespace>.<name> (a part <namespace>.<name>.<revision>-<index>) after the Service it exports'"},
				{Reason: &invalid, Expression: is("serviceexportrecords") + "object.spec.?exportedLabels.orValue({}).all(k, !format.qualifiedName().validate(k).hasValue() && !format.labelValue().validate(object.spec.exportedLabels[k]).hasValue())",
					Message: "an exported label of the export record is not a legal label (qualified name = label value)"},
				{Reason: &invalid, Expression: is("serviceexportrecords") + fmt.Sprintf("object.spec.?exportedAnnotations.orValue({}).all(k, !format.qualifiedName().validate(k.lowerAscii()).hasValue()) && "+
					"object.spec.?exportedAnnotations.orValue({}).map(k, size(bytes(k)) + size(bytes(object.spec.exportedAnnotations[k]))).sum() <= %d", addrpolicy.MaxRecordAnnotationBytes),
					Message: fmt.Sprintf("the export record's exported annotations are not qualified names or are more than %d bytes together", addrpolicy.MaxRecordAnnotationBytes)},
				{Reason: &invalid, Expression: is("endpoints") + fmt.Sprintf("object.spec.?backendConfig.orValue({}).all(k, size(bytes(k)) <= 253 && size(bytes(object.spec.backendConfig[k])) <= %d)", MaxBackendConfigValue),
					Message: fmt.Sprintf("an Endpoint's backendConfig key is longer than 253 bytes or a value longer than %d", MaxBackendConfigValue)},
				{Reason: &invalid, Expression: fmt.Sprintf("object.metadata.?labels.orValue({}).size() <= %d && "+
					"object.metadata.?annotations.orValue({}).map(k, size(bytes(k)) + size(bytes(object.metadata.annotations[k]))).sum() <= %d", MaxLabels, MaxAnnotationBytes),
					MessageExpression: fmt.Sprintf("'the ' + request.kind.kind + ' has more than %d labels or %d bytes of annotations'", MaxLabels, MaxAnnotationBytes)},
			},
		},
	}
}

// orDefault is the CEL string at the optional path opt (e.g.
// params.?spec.?vipRange), read through path when set, else def.
func orDefault(opt, path, def string) string {
	return fmt.Sprintf("(%s.orValue('') == '' ? %s : %s)", opt, quote(def), path)
}

// quote is s as a CEL string literal (s holds no quote or backslash).
func quote(s string) string { return "'" + s + "'" }

// wellFormed is the CEL test that the string expression c is a CIDR in
// canonical form (netip.Prefix.String of itself, no host bits).
func wellFormed(c string) string {
	return fmt.Sprintf("isCIDR(%[1]s) && string(cidr(%[1]s)) == %[1]s && cidr(%[1]s) == cidr(%[1]s).masked()", c)
}

// overlaps is the CEL test that the masked CIDR values a and b overlap.
func overlaps(a, b string) string {
	return fmt.Sprintf("(%[1]s.containsIP(%[2]s.ip()) || %[2]s.containsIP(%[1]s.ip()))", a, b)
}

// routable is the CEL test that the CIDR string c is well formed, at least
// addrpolicy.MinBits4/MinBits6 long and clear of the VIP ranges.
func routable(c string) string {
	return fmt.Sprintf("%[1]s && cidr(%[2]s).prefixLength() >= (cidr(%[2]s).ip().family() == 4 ? %[3]d : %[4]d) && !variables.vipRanges.exists(v, %[5]s)",
		wellFormed(c), c, addrpolicy.MinBits4, addrpolicy.MinBits6, overlaps("v", "cidr("+c+")"))
}

// inAllowed is the CEL test that the CIDR string c lies inside the allowed
// space and clear of the supernet.
func inAllowed(c string) string {
	return fmt.Sprintf("variables.allowed.exists(a, a.containsCIDR(cidr(%[1]s))) && !%[2]s", c, overlaps("variables.supernet", "cidr("+c+")"))
}

// directCIDR is the CEL test of a pod or service CIDR string c.
func directCIDR(c string) string { return "(" + routable(c) + " && " + inAllowed(c) + ")" }

// globalCIDR is the CEL test that the string c is a global CIDR of the
// policy: a block of exactly cidrBits inside the supernet
// (addrpolicy.Policy.IsGlobalCIDR).
func globalCIDR(c string) string {
	return fmt.Sprintf("(%[1]s && variables.supernet.containsCIDR(cidr(%[2]s)) && cidr(%[2]s).prefixLength() == variables.cidrBits)", wellFormed(c), c)
}

// cidrClaimName is the CEL test that the object name (a string
// expression) is addrpolicy.CIDRClaimName of the CIDR string c: for IPv4
// c with "-" for "/"; for IPv6 "v6-", eight groups of four lower-case hex
// digits and the length, standing for the same prefix as c.
func cidrClaimName(name, c string) string {
	v6 := name + ".substring(3, 42).replace('-', ':') + '/' + " + name + ".substring(43)"
	return fmt.Sprintf("(%[1]s.startsWith('v6-') ? (%[1]s.matches('^v6-[0-9a-f]{4}(-[0-9a-f]{4}){7}-(0|[1-9][0-9]{0,2})$') && isCIDR(%[3]s) && isCIDR(%[2]s) && cidr(%[3]s) == cidr(%[2]s)) : %[1]s.replace('-', '/', 1) == %[2]s)",
		name, c, v6)
}

// endpointSubnet is the CEL test of an Endpoint subnet string c: inside
// the supernet, or else a pod or service CIDR.
func endpointSubnet(c string) string {
	return fmt.Sprintf("(%s && (variables.supernet.containsCIDR(cidr(%s)) || %s))", routable(c), c, inAllowed(c))
}
