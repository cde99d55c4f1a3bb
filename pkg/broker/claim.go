package broker

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/kube"
)

// ClaimLease is the Lease in a member's broker namespace that records
// which cluster joined under its cluster ID: its holder identity is the
// member cluster's UID (MemberUID). It is never renewed; it is a record,
// not a lock with expiry.
const ClaimLease = "causeway-claim"

// ErrClusterIDInUse is returned by Claim when another cluster holds the ID.
var ErrClusterIDInUse = errors.New("cluster ID already in use")

// MemberUID is how a member cluster is told from another: the UID of its
// kube-system namespace, which lives as long as the cluster.
func MemberUID(ctx context.Context, member client.Client) (string, error) {
	ns := &corev1.Namespace{}
	if err := member.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("read the cluster's kube-system namespace: %w", err)
	}
	return string(ns.UID), nil
}

// Claim records in the broker, through the member's own identity (bc),
// that the cluster with uid joined as clusterID. Claiming again with the
// same uid is harmless; a claim held by another uid is ErrClusterIDInUse.
func Claim(ctx context.Context, bc client.Client, clusterID, uid string) error {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace(clusterID), Name: ClaimLease, Labels: map[string]string{LabelClusterID: clusterID}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &uid},
	}
	err := bc.Create(ctx, l)
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("claim cluster ID %s in the broker: %w", clusterID, err)
	}
	have := &coordinationv1.Lease{}
	if err := bc.Get(ctx, client.ObjectKeyFromObject(l), have); err != nil {
		return fmt.Errorf("read the claim of cluster ID %s in the broker: %w", clusterID, err)
	}
	if holder := have.Spec.HolderIdentity; holder == nil || *holder != uid {
		h := "(none)"
		if holder != nil {
			h = *holder
		}
		return fmt.Errorf("%w: %s joined the broker from another cluster (kube-system UID %s, this one is %s); "+
			"join under another ID, or run `causewayctl uninstall` in that cluster first", ErrClusterIDInUse, clusterID, h, uid)
	}
	return nil
}

// Leave removes, through the member's own identity (bc), what the member
// cluster clusterID wrote in the broker: every Causeway object of its
// broker namespace (its CIDRClaims among them: the CIDRs are released),
// its Leases (the claim among them), the global CIDRs and tunnel keys it
// claimed; last its ServiceAccount, so every token it was issued (bc's
// among them) stops working at once. Clusterset VIPs stay: they
// belong to the ClusterSet's Services, not to one exporter. The namespace
// and roles are the broker administrator's (`causewayctl deploy-broker`,
// which also recreates the ServiceAccount for the next join).
func Leave(ctx context.Context, bc client.Client, clusterID string) error {
	ns := Namespace(clusterID)
	crds, err := kube.CRDs()
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if crd.Spec.Group != v1alpha1.GroupVersion.Group || crd.Spec.Scope != "Namespaced" {
			continue
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(crd.Spec.Names.Kind))
		if err := bc.DeleteAllOf(ctx, u, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the %s of %s in the broker: %w", crd.Spec.Names.Plural, ns, err)
		}
	}
	var leases coordinationv1.LeaseList
	if err := bc.List(ctx, &leases, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list the Leases of %s in the broker: %w", ns, err)
	}
	for i := range leases.Items {
		if err := bc.Delete(ctx, &leases.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Lease %s/%s in the broker: %w", ns, leases.Items[i].Name, err)
		}
	}
	var cidrs v1alpha1.GlobalCIDRList
	if err := bc.List(ctx, &cidrs); err != nil {
		return fmt.Errorf("list global CIDRs in the broker: %w", err)
	}
	for i := range cidrs.Items {
		if c := &cidrs.Items[i]; c.Spec.ClusterID == clusterID {
			if err := bc.Delete(ctx, c); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete global CIDR %s in the broker: %w", c.Name, err)
			}
		}
	}
	var keys v1alpha1.TunnelKeyList
	if err := bc.List(ctx, &keys); err != nil {
		return fmt.Errorf("list tunnel keys in the broker: %w", err)
	}
	for i := range keys.Items {
		if k := &keys.Items[i]; k.Spec.ClusterID == clusterID {
			if err := bc.Delete(ctx, k); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete tunnel key %s in the broker: %w", k.Name, err)
			}
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceAccountName}}
	if err := bc.Delete(ctx, sa); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("revoke the broker identity %s/%s: %w", ns, ServiceAccountName, err)
	}
	return nil
}

// NewCIDRClaim is cluster clusterID's CIDRClaim on p in its broker
// namespace, named addrpolicy.CIDRClaimName(p), as the gateway writes it.
func NewCIDRClaim(clusterID string, p netip.Prefix) *v1alpha1.CIDRClaim {
	return &v1alpha1.CIDRClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace(clusterID), Name: addrpolicy.CIDRClaimName(p),
			Labels: map[string]string{LabelClusterID: clusterID}},
		Spec: v1alpha1.CIDRClaimSpec{CIDR: p.String(), ClusterID: clusterID},
	}
}
