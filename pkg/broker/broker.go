// Package broker sets up the broker API server, the Kubernetes API server
// every cluster of a ClusterSet syncs through: the ClusterSet's policy,
// the admission and quotas that hold every member to it, and each member
// cluster's identity. See README.md for the contract.
//
// EnsureClusterSet (`causewayctl deploy-broker`, the lab) installs the
// CRDs, stores the ClusterSetPolicy (v1alpha1.ClusterSetPolicyName, every
// field set; PlanPolicy applies an administrator's changes over the one
// the broker holds and checks the result before anything is written), the
// admission policies and every member's ResourceQuota (Quota, from the
// policy's quotas).
//
// Each member cluster owns one broker namespace, cluster-<clusterID>, and
// gets a ServiceAccount there. Its rights (OwnRules, SharedRules):
//
//   - in its own namespace: read and write Causeway's objects (Cluster,
//     Endpoint, ServiceExportRecord, CIDRClaim, …) and its Leases (the MCS
//     controller's liveness Lease), read its ResourceQuota;
//   - everywhere: read Causeway's objects (the ClusterSetPolicy among
//     them) and Leases (to mirror the other clusters and see whether they
//     are alive);
//   - cluster scoped: create and delete VIPAllocations (clusterset VIPs are
//     claimed atomically by name; see pkg/mcs), GlobalCIDRs (global
//     CIDRs, claimed the same way; see pkg/globalnet) and TunnelKeys (the
//     gateways' tunnel public keys, named TunnelKeyName; see pkg/gateway).
//
// What RBAC cannot tell apart, two ValidatingAdmissionPolicies refuse for
// member identities: OwnershipPolicy anything in another member's name (a
// claim not labelled with its cluster ID, a delete of another's claim, a
// Cluster, Endpoint, record or CIDR claim naming another cluster),
// BoundsPolicy anything outside the ClusterSet's policy (a global CIDR
// claim that is not a block of the configured size inside the supernet, a
// VIP allocation outside the VIP ranges, pod, service and endpoint CIDRs
// and CIDR claims outside the allowed space, a CIDR claim not named after
// its CIDR, oversized objects). The member's ResourceQuota bounds how
// many objects it holds. It can therefore never create, change or delete
// another cluster's objects, nor claim what the policy does not give it.
//
// EnsureClusterIdentity creates the member's namespace, quota and roles
// idempotently (and the default ClusterSetPolicy when the broker has none)
// and returns a kubeconfig with a token of the ServiceAccount, obtained
// through the TokenRequest API and valid for JoinTokenLifetime:
// `causewayctl deploy-broker` writes it as the member's join file.
//
// Broker tokens are short-lived: a member may request tokens for its own
// ServiceAccount (and for nothing else), and its MCS controller's Rotator
// replaces the token in the member's Secret with one valid for an hour,
// half an hour before the current one expires (token.go). Leave deletes
// the ServiceAccount, which revokes every token it was ever issued.
//
// A member that joins records its claim on its cluster ID in its own
// namespace (Claim: Lease causeway-claim holding the member's kube-system
// UID), so a second cluster joining under the same ID is refused; Leave
// removes what the member wrote there and then its ServiceAccount.
package broker

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"
)

// NamespacePrefix starts every member cluster's broker namespace.
const NamespacePrefix = "cluster-"

// Names of the objects EnsureClusterIdentity creates.
const (
	// ServiceAccountName is the member cluster's ServiceAccount in its
	// own broker namespace; the Role and RoleBinding there carry the same
	// name.
	ServiceAccountName = "causeway-member"
	// ClusterRoleName is the ClusterRole every member shares; each gets a
	// ClusterRoleBinding named ClusterRoleName + "-" + clusterID.
	ClusterRoleName = "causeway-member"
	// LabelClusterID marks the objects created for one member cluster.
	LabelClusterID = "causeway.dev/cluster-id"
)

// Namespace returns the broker namespace of a member cluster.
func Namespace(clusterID string) string { return NamespacePrefix + clusterID }

// ClusterIDFromNamespace returns the cluster ID of a broker namespace, and
// false if ns is not a member cluster's namespace.
func ClusterIDFromNamespace(ns string) (string, bool) {
	if len(ns) <= len(NamespacePrefix) || ns[:len(NamespacePrefix)] != NamespacePrefix {
		return "", false
	}
	return ns[len(NamespacePrefix):], true
}

// OwnRules are a member's rights in its own broker namespace.
func OwnRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"causeway.dev"}, Resources: []string{"*"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		// Its quota (Quota), to read only: the broker administrator's.
		{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: []string{"get", "list", "watch"}},
		// Its own ServiceAccount: fresh tokens (Rotator), and its
		// deletion on leave, which revokes every token (Leave).
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, ResourceNames: []string{ServiceAccountName},
			Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, ResourceNames: []string{ServiceAccountName},
			Verbs: []string{"delete"}},
	}
}

// SharedRules are every member's rights across the broker.
func SharedRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"causeway.dev"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"causeway.dev"}, Resources: []string{"vipallocations", "globalcidrs", "tunnelkeys"}, Verbs: []string{"create", "delete"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
	}
}

// EnsureClusterIdentity creates (or brings up to date) clusterID's broker
// namespace, ServiceAccount, Role, RoleBinding and ClusterRoleBinding, and
// the shared ClusterRole, using brokerAdmin (a broker administrator). It
// returns a kubeconfig for the new identity: brokerAdmin's server and CA,
// and a fresh ServiceAccount token valid for JoinTokenLifetime. Calling it
// again is harmless (it also recreates the ServiceAccount a member deleted
// on leave); it issues another token, the earlier ones stay valid until
// they expire or the ServiceAccount is deleted.
func EnsureClusterIdentity(ctx context.Context, brokerAdmin *rest.Config, clusterID string) ([]byte, error) {
	if msgs := validation.IsDNS1123Label(clusterID); len(msgs) > 0 {
		return nil, fmt.Errorf("cluster ID %q: %v", clusterID, msgs)
	}
	cs, c, err := clients(brokerAdmin)
	if err != nil {
		return nil, err
	}
	ns := Namespace(clusterID)
	labels := map[string]string{LabelClusterID: clusterID}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: ServiceAccountName}}

	if err := apply(ctx, "namespace "+ns,
		func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
			return err
		}, nil); err != nil {
		return nil, err
	}
	// The ClusterSet's bounds before the identity can write anything.
	p, err := memberPolicy(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := ensureAdmission(ctx, cs); err != nil {
		return nil, err
	}
	if err := ensureQuota(ctx, cs, p, clusterID); err != nil {
		return nil, err
	}
	if err := apply(ctx, "service account",
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ServiceAccountName, Labels: labels}}, metav1.CreateOptions{})
			return err
		}, nil); err != nil {
		return nil, err
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceAccountName, Labels: labels}, Rules: OwnRules()}
	if err := apply(ctx, "role",
		func() error { _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); return err },
		func() error {
			have, err := cs.RbacV1().Roles(ns).Get(ctx, role.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			have.Rules = role.Rules
			_, err = cs.RbacV1().Roles(ns).Update(ctx, have, metav1.UpdateOptions{})
			return err
		}); err != nil {
		return nil, err
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceAccountName, Labels: labels},
		Subjects:   subject,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ServiceAccountName},
	}
	if err := apply(ctx, "role binding",
		func() error {
			_, err := cs.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{})
			return err
		},
		func() error {
			have, err := cs.RbacV1().RoleBindings(ns).Get(ctx, rb.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			have.Subjects = rb.Subjects
			_, err = cs.RbacV1().RoleBindings(ns).Update(ctx, have, metav1.UpdateOptions{})
			return err
		}); err != nil {
		return nil, err
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName}, Rules: SharedRules()}
	if err := apply(ctx, "cluster role",
		func() error { _, err := cs.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); return err },
		func() error {
			have, err := cs.RbacV1().ClusterRoles().Get(ctx, cr.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			have.Rules = cr.Rules
			_, err = cs.RbacV1().ClusterRoles().Update(ctx, have, metav1.UpdateOptions{})
			return err
		}); err != nil {
		return nil, err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleName + "-" + clusterID, Labels: labels},
		Subjects:   subject,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleName},
	}
	if err := apply(ctx, "cluster role binding",
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
			return err
		},
		func() error {
			have, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, crb.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			have.Subjects = crb.Subjects
			_, err = cs.RbacV1().ClusterRoleBindings().Update(ctx, have, metav1.UpdateOptions{})
			return err
		}); err != nil {
		return nil, err
	}

	token, _, err := Token(ctx, brokerAdmin, clusterID, JoinTokenLifetime)
	if err != nil {
		return nil, err
	}
	return Kubeconfig(brokerAdmin, clusterID, token)
}

// apply runs create, and update when the object already exists (nil
// update: leave it as it is). update reads the object and writes it
// back; it is retried when another writer came in between (the members'
// identities are ensured concurrently, e.g. by lab up, and share the
// ClusterSet-wide objects such as the admission policies).
func apply(ctx context.Context, what string, create, update func() error) error {
	err := create()
	if apierrors.IsAlreadyExists(err) {
		if update == nil {
			return nil
		}
		// Growing, jittered waits (10 ms up to 2.5 s) so that a handful
		// of concurrent writers all get through.
		backoff := wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.5}
		err = retry.RetryOnConflict(backoff, update)
	}
	if err != nil {
		return fmt.Errorf("ensure broker %s: %w", what, err)
	}
	return ctx.Err()
}

// Kubeconfig returns a kubeconfig for server and CA of base, authenticating
// with token. The context is named "broker-<clusterID>".
func Kubeconfig(base *rest.Config, clusterID, token string) ([]byte, error) {
	ca := base.CAData
	if len(ca) == 0 && base.CAFile != "" {
		b, err := os.ReadFile(base.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read broker CA: %w", err)
		}
		ca = b
	}
	name := "broker-" + clusterID
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["broker"] = &clientcmdapi.Cluster{Server: base.Host, CertificateAuthorityData: ca, InsecureSkipTLSVerify: base.Insecure}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: "broker", AuthInfo: name, Namespace: Namespace(clusterID)}
	cfg.CurrentContext = name
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("write broker kubeconfig: %w", err)
	}
	return b, nil
}

// KubeconfigClusterID is the cluster a member kubeconfig (a join file, or
// the kubeconfig of Secret) is for: the namespace of its current context,
// cluster-<id>.
func KubeconfigClusterID(kubeconfig []byte) (string, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return "", err
	}
	c, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return "", fmt.Errorf("no current context")
	}
	id, ok := ClusterIDFromNamespace(c.Namespace)
	if !ok {
		return "", fmt.Errorf("context %s: namespace %q is not a member's broker namespace (%s<id>)", cfg.CurrentContext, c.Namespace, NamespacePrefix)
	}
	return id, nil
}

// WithServer returns kubeconfig with every cluster's server replaced by
// server, e.g. the address a node namespace reaches the broker at.
func WithServer(kubeconfig []byte, server string) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse kubeconfig: %w", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	return clientcmd.Write(*cfg)
}
