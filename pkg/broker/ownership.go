package broker

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// OwnershipPolicyName names the ValidatingAdmissionPolicy (and its
// binding) that lets a member change only the cluster-scoped claims it
// owns.
const OwnershipPolicyName = "causeway-member-ownership"

// OwnershipPolicy is the ValidatingAdmissionPolicy behind the shared
// rules' create/delete of VIPAllocations and GlobalCIDRs: RBAC cannot
// tell one member's object from another's in a cluster-scoped resource,
// so the API server checks, for requests of a member identity
// (system:serviceaccount:cluster-<id>:causeway-member), that the object
// carries LabelClusterID = <id> on create (a GlobalCIDR also
// spec.clusterID = <id>), that an update keeps it, and that a delete (or
// update) concerns an object labelled <id>. Objects without the label
// (made by an administrator, or before this policy) are nobody's: only
// an administrator deletes them. Administrators are not matched. A
// refusal is Forbidden (403).
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
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
						Rule: admissionregistrationv1.Rule{APIGroups: []string{"causeway.dev"}, APIVersions: []string{"*"},
							Resources: []string{"vipallocations", "globalcidrs"}},
					},
				}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "member",
				Expression: fmt.Sprintf("request.userInfo.username.startsWith('system:serviceaccount:%s') && request.userInfo.username.endsWith(':%s')",
					NamespacePrefix, ServiceAccountName),
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "member", Expression: fmt.Sprintf("request.userInfo.username.split(':')[2].substring(%d)", len(NamespacePrefix))},
				{Name: "newOwner", Expression: "request.operation == 'DELETE' ? '' : " + owner("object")},
				{Name: "oldOwner", Expression: "request.operation == 'CREATE' ? '' : " + owner("oldObject")},
			},
			Validations: []admissionregistrationv1.Validation{
				{Reason: &forbidden, Expression: "request.operation == 'DELETE' || variables.newOwner == variables.member",
					MessageExpression: fmt.Sprintf("'cluster ' + variables.member + ' may only write claims labelled %s=' + variables.member", LabelClusterID)},
				{Reason: &forbidden, Expression: "request.operation == 'CREATE' || variables.oldOwner == variables.member",
					MessageExpression: "'cluster ' + variables.member + ' may not change or delete a claim of ' + (variables.oldOwner == '' ? 'nobody' : 'cluster ' + variables.oldOwner)"},
				{Reason: &forbidden, Expression: "request.operation == 'DELETE' || request.resource.resource != 'globalcidrs' || object.spec.clusterID == variables.member",
					MessageExpression: "'cluster ' + variables.member + ' may only claim global CIDRs in its own name'"},
			},
		},
	}
}

// ensureOwnershipPolicy creates or updates OwnershipPolicy and its
// binding (Deny).
func ensureOwnershipPolicy(ctx context.Context, cs kubernetes.Interface) error {
	pol := OwnershipPolicy()
	api := cs.AdmissionregistrationV1()
	if err := apply(ctx, "admission policy",
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
	b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: OwnershipPolicyName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: OwnershipPolicyName,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	return apply(ctx, "admission policy binding",
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
		})
}
