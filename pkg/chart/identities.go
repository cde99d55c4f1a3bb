package chart

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/kube"
)

// identityKinds are the kinds that give the daemons their identities and
// rights, and keep others from writing what only they write.
var identityKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// Identities returns the objects of objs (rendered by Render) that give
// the daemons their identities and rights: the namespace, their
// ServiceAccounts, their generated roles and the bindings, and the
// admission policies that let only the MCS controller write ServiceImports
// and multicluster EndpointSlices (templates/admission.yaml).
func Identities(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(identityKinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// IdentityValues are values for rendering the chart when only its
// identities are wanted: the identities do not depend on any value but
// namespace.create, so any valid cluster values do.
func IdentityValues() map[string]any {
	return map[string]any{
		"clusterID": "identities", "podCIDRs": []any{"192.0.2.0/24"}, "serviceCIDRs": []any{"198.51.100.0/24"},
		"namespace": map[string]any{"create": true},
	}
}

// InstallIdentities applies the chart's identities (namespace
// causeway-system, a ServiceAccount per daemon, the least-privilege
// roles and bindings, the admission policies) and waits until the API
// server grants them.
func InstallIdentities(ctx context.Context, c client.Client) error {
	objs, err := Render(IdentityValues())
	if err != nil {
		return err
	}
	ids := Identities(objs)
	if err := kube.Apply(ctx, c, ids, false); err != nil {
		return fmt.Errorf("install identities: %w", err)
	}
	return WaitGranted(ctx, c, ids)
}

// WaitGranted waits until the API server grants every ServiceAccount bound
// in objs every rule of its roles in objs: RBAC changes take effect
// asynchronously (the authorizer's informers), and a daemon started
// meanwhile would be refused.
func WaitGranted(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {

	rules := map[string][]rbacv1.PolicyRule{} // kind/namespace/name
	for _, o := range objs {
		if o.GetKind() == "Role" || o.GetKind() == "ClusterRole" {
			var r rbacv1.ClusterRole // a Role has the same rules field
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r); err != nil {
				return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
			rules[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = r.Rules
		}
	}
	var reviews []authorizationv1.SubjectAccessReview
	for _, o := range objs {
		if o.GetKind() != "RoleBinding" && o.GetKind() != "ClusterRoleBinding" {
			continue
		}
		var b rbacv1.RoleBinding // a ClusterRoleBinding has the same fields
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		for _, sub := range b.Subjects {
			if sub.Kind != rbacv1.ServiceAccountKind {
				continue
			}
			// How the API server names a ServiceAccount token's user.
			user := "system:serviceaccount:" + sub.Namespace + ":" + sub.Name
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + sub.Namespace, "system:authenticated"}
			for _, r := range rules[b.RoleRef.Kind+"/"+o.GetNamespace()+"/"+b.RoleRef.Name] {
				// A rule for named objects grants nothing to a request
				// without a name: ask for the first one.
				var name string
				if len(r.ResourceNames) > 0 {
					name = r.ResourceNames[0]
				}
				for _, res := range r.Resources {
					resource, sub, _ := strings.Cut(res, "/")
					reviews = append(reviews, authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
							Namespace: o.GetNamespace(), Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: resource, Subresource: sub, Name: name}}})
				}
			}
		}
	}
	var pending string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for len(reviews) > 0 {
			r := reviews[0].DeepCopy()
			if err := c.Create(ctx, r); err != nil {
				return false, err
			}
			if !r.Status.Allowed {
				a := r.Spec.ResourceAttributes
				pending = fmt.Sprintf("%s may not yet %s %s/%s %s in %q", r.Spec.User, a.Verb, a.Resource, a.Subresource, a.Name, a.Namespace)
				return false, nil
			}
			reviews = reviews[1:]
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the identities' rights (%s): %w", pending, err)
	}
	return nil
}
