package kube

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/causeway-net/causeway/deploy"
)

// Namespace is Causeway's namespace in a member cluster, as the install
// manifests and the generated Roles name it.
const Namespace = "causeway-system"

// Daemons are the daemons with an identity of their own in a member
// cluster (deploy/manifests/identities.yaml).
var Daemons = []string{"gateway", "route-agent", "mcs-controller"}

// ServiceAccountName is the ServiceAccount of a daemon (one of Daemons)
// in Namespace.
func ServiceAccountName(daemon string) string { return "causeway-" + daemon }

// IdentityFiles are the embedded manifests that give the daemons their
// identities and rights, in apply order: the namespace, the generated
// roles, the ServiceAccounts and bindings.
var IdentityFiles = []string{"manifests/namespace.yaml", "rbac/*.yaml", "manifests/identities.yaml"}

// ManifestFiles are every embedded install manifest (IdentityFiles, the
// configuration and the workloads), in apply order.
var ManifestFiles = append(slices.Clone(IdentityFiles), "manifests/config.yaml",
	"manifests/route-agent.yaml", "manifests/gateway.yaml", "manifests/mcs-controller.yaml")

// Manifests parses the embedded deploy manifests matching patterns (paths
// or globs under deploy/), in pattern order, files sorted within a glob.
func Manifests(patterns ...string) ([]*unstructured.Unstructured, error) {
	return ParseManifests(deploy.Manifests, patterns...)
}

// ParseManifests parses the multi-document YAML files of fsys matching
// patterns; empty documents are skipped.
func ParseManifests(fsys fs.FS, patterns ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, p := range patterns {
		files, err := fs.Glob(fsys, p)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("no manifest matches %s", p)
		}
		for _, f := range files {
			b, err := fs.ReadFile(fsys, f)
			if err != nil {
				return nil, err
			}
			objs, err := parseDocuments(b)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", f, err)
			}
			out = append(out, objs...)
		}
	}
	return out, nil
}

func parseDocuments(b []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("document without apiVersion, kind or name:\n%s", doc)
		}
		out = append(out, u)
	}
}

// Apply applies objs in order with server-side apply (field manager
// "causeway", taking over conflicting fields). With dryRun the API server
// validates and admits every object without persisting it.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.FieldOwner("causeway"), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	for _, o := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
			return fmt.Errorf("apply %s %s: %w", o.GetKind(), client.ObjectKeyFromObject(o), err)
		}
	}
	return nil
}

// InstallIdentities applies IdentityFiles: Namespace, the daemons'
// ServiceAccounts and their least-privilege roles and bindings.
func InstallIdentities(ctx context.Context, c client.Client) error {
	objs, err := Manifests(IdentityFiles...)
	if err != nil {
		return err
	}
	if err := Apply(ctx, c, objs, false); err != nil {
		return fmt.Errorf("install identities: %w", err)
	}
	return waitGranted(ctx, c, objs)
}

// waitGranted waits until the API server grants every bound ServiceAccount
// every rule of its roles: RBAC changes take effect asynchronously (the
// authorizer's informers), and a daemon started meanwhile would be refused.
func waitGranted(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) error {
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
				for _, res := range r.Resources {
					resource, sub, _ := strings.Cut(res, "/")
					reviews = append(reviews, authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
						User: user, Groups: groups, ResourceAttributes: &authorizationv1.ResourceAttributes{
							Namespace: o.GetNamespace(), Verb: r.Verbs[0], Group: r.APIGroups[0], Resource: resource, Subresource: sub}}})
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
				pending = fmt.Sprintf("%s may not yet %s %s/%s in %q", r.Spec.User, a.Verb, a.Resource, a.Subresource, a.Namespace)
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

// ServiceAccountToken returns a token of ServiceAccount ns/name valid for
// lifetime, through the TokenRequest API (the API server may cap the
// lifetime: --service-account-max-token-expiration).
func ServiceAccountToken(ctx context.Context, cfg *rest.Config, ns, name string, lifetime time.Duration) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	secs := int64(lifetime / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("request token for %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}
