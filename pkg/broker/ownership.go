package broker

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// OwnershipPolicyName names the ValidatingAdmissionPolicy (and its
// binding) that lets a member write only what is its own.
const OwnershipPolicyName = "causeway-member-ownership"

// memberMatch is the match condition of the admission policies: the
// request comes from a member identity
// (system:serviceaccount:cluster-<id>:causeway-member). Administrators
// are not matched.
var memberMatch = admissionregistrationv1.MatchCondition{
	Name: "member",
	Expression: fmt.Sprintf("request.userInfo.username.startsWith('system:serviceaccount:%s') && request.userInfo.username.endsWith(':%s')",
		NamespacePrefix, ServiceAccountName),
}

// memberVariable is the variable "member" of the admission policies: the
// requesting member's cluster ID.
var memberVariable = admissionregistrationv1.Variable{
	Name: "member", Expression: fmt.Sprintf("request.userInfo.username.split(':')[2].substring(%d)", len(NamespacePrefix)),
}

// OwnershipPolicy is the ValidatingAdmissionPolicy that keeps a member to
// its own name where RBAC cannot: for requests of a member identity it
// checks
//
//   - claims (the cluster-scoped VIPAllocations, GlobalCIDRs and
//     TunnelKeys the shared rules let every member create and delete): the
//     object carries LabelClusterID = <id> on create (a GlobalCIDR or
//     TunnelKey also spec.clusterID = <id>), an update keeps it, and a
//     delete (or update) concerns an object labelled <id>. Claims without
//     the label (made by an administrator, or before this policy) are
//     nobody's: only an administrator deletes them. CEL has no hash, so
//     that a TunnelKey is named after its spec.publicKey
//     (TunnelKeyName) is checked by its readers (KeyOwners); its CRD
//     holds the name to 64 lowercase hex digits;
//   - announcements in its own namespace (Cluster, Endpoint,
//     ServiceExportRecord, CIDRClaim, which RBAC already confines there):
//     their spec.clusterID is <id>, a LabelClusterID label, when set, is <id>,
//     and the Cluster and Endpoint are named <id>.
//
// A refusal is Forbidden (403) and names the rule. BoundsPolicy checks
// the same objects against the ClusterSet's policy.
func OwnershipPolicy() *admissionregistrationv1.ValidatingAdmissionPolicy {
	owner := func(obj string) string {
		return fmt.Sprintf("has(%[1]s.metadata.labels) && '%[2]s' in %[1]s.metadata.labels ? %[1]s.metadata.labels['%[2]s'] : ''", obj, LabelClusterID)
	}
	fail := admissionregistrationv1.Fail
	forbidden := metav1.StatusReasonForbidden
	return &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: OwnershipPolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
						"vipallocations", "globalcidrs", "tunnelkeys"),
					rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						"clusters", "endpoints", "serviceexportrecords", "cidrclaims"),
				},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{memberMatch},
			Variables: []admissionregistrationv1.Variable{
				memberVariable,
				{Name: "claim", Expression: "request.resource.resource in ['vipallocations', 'globalcidrs', 'tunnelkeys']"},
				{Name: "newOwner", Expression: "request.operation == 'DELETE' ? '' : " + owner("object")},
				{Name: "oldOwner", Expression: "request.operation == 'CREATE' ? '' : " + owner("oldObject")},
			},
			Validations: []admissionregistrationv1.Validation{
				{Reason: &forbidden, Expression: "!variables.claim || request.operation == 'DELETE' || variables.newOwner == variables.member",
					MessageExpression: fmt.Sprintf("'cluster ' + variables.member + ' may only write claims labelled %s=' + variables.member", LabelClusterID)},
				{Reason: &forbidden, Expression: "!variables.claim || request.operation == 'CREATE' || variables.oldOwner == variables.member",
					MessageExpression: "'cluster ' + variables.member + ' may not change or delete a claim of ' + (variables.oldOwner == '' ? 'nobody' : 'cluster ' + variables.oldOwner)"},
				{Reason: &forbidden, Expression: "!(request.resource.resource in ['globalcidrs', 'tunnelkeys']) || request.operation == 'DELETE' || object.spec.clusterID == variables.member",
					MessageExpression: "'cluster ' + variables.member + ' may only claim ' + (request.resource.resource == 'tunnelkeys' ? 'tunnel keys' : 'global CIDRs') + ' in its own name'"},
				{Reason: &forbidden, Expression: "variables.claim || variables.newOwner == '' || variables.newOwner == variables.member",
					MessageExpression: fmt.Sprintf("'cluster ' + variables.member + ' may not label its ' + request.kind.kind + ' %s=' + variables.newOwner", LabelClusterID)},
				{Reason: &forbidden, Expression: "variables.claim || object.spec.clusterID == variables.member",
					MessageExpression: "'cluster ' + variables.member + ' may only announce itself: its ' + request.kind.kind + ' names cluster ' + object.spec.clusterID + ' in spec.clusterID'"},
				{Reason: &forbidden, Expression: "!(request.resource.resource in ['clusters', 'endpoints']) || object.metadata.name == variables.member",
					MessageExpression: "'cluster ' + variables.member + ' may only announce itself: its ' + request.kind.kind + ' is named ' + variables.member + ', not ' + object.metadata.name"},
			},
		},
	}
}

// rule matches ops on the Causeway resources named.
func rule(ops []admissionregistrationv1.OperationType, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
	return admissionregistrationv1.NamedRuleWithOperations{
		RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: ops,
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{"causeway.dev"}, APIVersions: []string{"*"}, Resources: resources},
		},
	}
}

// ensureAdmission creates or updates the admission policies
// (OwnershipPolicy, BoundsPolicy) and their bindings (Deny).
func ensureAdmission(ctx context.Context, cs kubernetes.Interface) error {
	api := cs.AdmissionregistrationV1()
	for _, pol := range []*admissionregistrationv1.ValidatingAdmissionPolicy{OwnershipPolicy(), BoundsPolicy()} {
		if err := apply(ctx, "admission policy "+pol.Name,
			func() error {
				_, err := api.ValidatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{})
				return err
			},
			func() error {
				have, err := api.ValidatingAdmissionPolicies().Get(ctx, pol.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				have.Spec = pol.Spec
				_, err = api.ValidatingAdmissionPolicies().Update(ctx, have, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return err
		}
		b := binding(pol)
		if err := apply(ctx, "admission policy binding "+b.Name,
			func() error {
				_, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{})
				return err
			},
			func() error {
				have, err := api.ValidatingAdmissionPolicyBindings().Get(ctx, b.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				have.Spec = b.Spec
				_, err = api.ValidatingAdmissionPolicyBindings().Update(ctx, have, metav1.UpdateOptions{})
				return err
			}); err != nil {
			return err
		}
	}
	return nil
}

// binding is pol's binding, named like it: Deny, and for a policy with
// parameters the ClusterSetPolicy, refusing every request while it is
// missing.
func binding(pol *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: pol.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: pol.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if pol.Spec.ParamKind != nil {
		deny := admissionregistrationv1.DenyAction
		b.Spec.ParamRef = &admissionregistrationv1.ParamRef{Name: v1alpha1.ClusterSetPolicyName, ParameterNotFoundAction: &deny}
	}
	return b
}
