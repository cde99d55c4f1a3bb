package kube

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Namespace is Causeway's namespace in a member cluster, as the Helm
// chart and its generated Roles name it.
const Namespace = "causeway-system"

// GatewayLease is the Lease in Namespace whose holder is the active
// gateway's node name (pkg/gateway elects with it; the route agents
// watch it).
const GatewayLease = "causeway-gateway"

// Daemons are the daemons with an identity of their own in a member
// cluster (the chart's templates/identities.yaml).
var Daemons = []string{"gateway", "route-agent", "mcs-controller", "globalnet"}

// ServiceAccountName is the ServiceAccount of a daemon (one of Daemons)
// in Namespace.
func ServiceAccountName(daemon string) string { return "causeway-" + daemon }

// Apply applies objs in order with server-side apply (field manager
// "causeway", taking over conflicting fields). With dryRun the API server
// validates and admits every object without persisting it.
func Apply(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, dryRun bool) error {
	return ApplyAs(ctx, c, "causeway", objs, dryRun)
}

// ApplyAs is Apply with field manager owner.
func ApplyAs(ctx context.Context, c client.Client, owner string, objs []*unstructured.Unstructured, dryRun bool) error {
	opts := []client.ApplyOption{client.FieldOwner(owner), client.ForceOwnership}
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
