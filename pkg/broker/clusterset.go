package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/kube"
)

// QuotaName names the ResourceQuota in every member's broker namespace.
const QuotaName = "causeway-member"

// PolicyUpdate sets fields of a ClusterSetPolicySpec: an administrator's
// change (`causewayctl deploy-broker`'s flags), applied over the spec the
// broker holds.
type PolicyUpdate func(*v1alpha1.ClusterSetPolicySpec)

// PlanPolicy returns the ClusterSet policy the broker holds with update
// (nil: none) applied, checked by addrpolicy.ParsePolicy: over an empty
// spec (the defaults) when the broker holds no ClusterSetPolicy or has
// no CRD for it yet. It writes nothing, so a bad update is refused before
// anything changes; EnsureClusterSet stores the result.
func PlanPolicy(ctx context.Context, brokerAdmin *rest.Config, update PolicyUpdate) (addrpolicy.Policy, error) {
	c, err := client.New(brokerAdmin, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return addrpolicy.Policy{}, fmt.Errorf("broker client: %w", err)
	}
	var have v1alpha1.ClusterSetPolicy
	err = c.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSetPolicyName}, &have)
	if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		return addrpolicy.Policy{}, fmt.Errorf("read ClusterSetPolicy %s: %w", v1alpha1.ClusterSetPolicyName, err)
	}
	spec := have.Spec
	if update != nil {
		update(&spec)
	}
	p, err := addrpolicy.ParsePolicy(spec)
	if err != nil {
		return addrpolicy.Policy{}, fmt.Errorf("ClusterSet policy: %w", err)
	}
	return p, nil
}

// EnsureClusterSet makes brokerAdmin's API server the broker of a
// ClusterSet with policy p, idempotently: it installs the CRDs, stores p
// as the ClusterSetPolicy (clusterset.Store: every field set), creates or
// updates the admission policies (OwnershipPolicy, BoundsPolicy) and
// gives every member namespace there is the ResourceQuota of p (Quota).
// `causewayctl deploy-broker` (with PlanPolicy's result) and the lab call
// it before EnsureClusterIdentity.
func EnsureClusterSet(ctx context.Context, brokerAdmin *rest.Config, p addrpolicy.Policy) error {
	cs, c, err := clients(brokerAdmin)
	if err != nil {
		return err
	}
	if err := kube.InstallCRDs(ctx, brokerAdmin); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if err := clusterset.Store(ctx, c, p); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if err := ensureAdmission(ctx, cs); err != nil {
		return err
	}
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelClusterID})
	if err != nil {
		return fmt.Errorf("list the broker's member namespaces: %w", err)
	}
	for _, ns := range nss.Items {
		if id, ok := ClusterIDFromNamespace(ns.Name); ok && ns.Labels[LabelClusterID] == id {
			if err := ensureQuota(ctx, cs, p, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// memberPolicy is the policy EnsureClusterIdentity gives a member: the
// one the broker holds (stored back with every field set), or the default
// one, which it stores when the broker has none (a broker set up before
// the ClusterSetPolicy existed, or by `causewayctl join
// --broker-kubeconfig` alone): BoundsPolicy refuses every member write
// while the policy is missing.
func memberPolicy(ctx context.Context, c client.Client) (addrpolicy.Policy, error) {
	p, err := clusterset.Read(ctx, c)
	if err != nil {
		return addrpolicy.Policy{}, fmt.Errorf("%w (set the broker up with causewayctl deploy-broker)", err)
	}
	return p, clusterset.Store(ctx, c, p)
}

// Quota is the ResourceQuota QuotaName of member clusterID's broker
// namespace under p: at most p.Quotas.Records ServiceExportRecords, and
// p.Quotas.Objects objects of every other namespaced Causeway kind and
// of Leases, each kind counted alone: everything a member may create in
// its namespace (OwnRules; members write no Events in the broker, which
// Kubernetes' quota system would not count). GlobalCIDRs and
// VIPAllocations are cluster scoped: no ResourceQuota counts them.
func Quota(p addrpolicy.Policy, clusterID string) (*corev1.ResourceQuota, error) {
	crds, err := kube.CRDs()
	if err != nil {
		return nil, err
	}
	count := func(n int) resource.Quantity { return *resource.NewQuantity(int64(n), resource.DecimalSI) }
	hard := corev1.ResourceList{
		"count/leases.coordination.k8s.io": count(p.Quotas.Objects),
	}
	for _, crd := range crds {
		if crd.Spec.Group != v1alpha1.GroupVersion.Group || crd.Spec.Scope != "Namespaced" {
			continue
		}
		n := p.Quotas.Objects
		if crd.Spec.Names.Kind == "ServiceExportRecord" {
			n = p.Quotas.Records
		}
		hard[corev1.ResourceName("count/"+crd.Spec.Names.Plural+"."+crd.Spec.Group)] = count(n)
	}
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace(clusterID), Name: QuotaName, Labels: map[string]string{LabelClusterID: clusterID}},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}, nil
}

// ensureQuota creates or updates member clusterID's Quota under p.
func ensureQuota(ctx context.Context, cs kubernetes.Interface, p addrpolicy.Policy, clusterID string) error {
	q, err := Quota(p, clusterID)
	if err != nil {
		return err
	}
	api := cs.CoreV1().ResourceQuotas(q.Namespace)
	return apply(ctx, "resource quota "+q.Namespace+"/"+q.Name,
		func() error { _, err := api.Create(ctx, q, metav1.CreateOptions{}); return err },
		func() error {
			have, err := api.Get(ctx, q.Name, metav1.GetOptions{})
			if err != nil || sameLimits(have.Spec.Hard, q.Spec.Hard) {
				return err
			}
			have.Spec.Hard = q.Spec.Hard
			_, err = api.Update(ctx, have, metav1.UpdateOptions{})
			return err
		})
}

// clients are a clientset and a controller-runtime client of cfg.
func clients(cfg *rest.Config) (kubernetes.Interface, client.Client, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("broker client: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return nil, nil, fmt.Errorf("broker client: %w", err)
	}
	return cs, c, nil
}

// sameLimits reports whether a and b hold the same quantities.
func sameLimits(a, b corev1.ResourceList) bool {
	return maps.EqualFunc(a, b, func(x, y resource.Quantity) bool { return x.Cmp(y) == 0 })
}

// EnforceQuotas waits, at most timeout, until the broker enforces the
// Quota of every member of clusterIDs under p, and returns an error
// naming the namespaces where it does not. The API server enforces a
// ResourceQuota only once the quota controller (kube-controller-manager's,
// which every Kubernetes cluster runs) has copied its limits into its
// status and counted the usage of each. That controller counts a kind only
// once it has discovered it (it looks every 30 s) and recounts a quota
// only when its limits change (or every 5 minutes): a quota created right
// after the CRDs may lack the count of a Causeway kind for minutes, and
// meanwhile the API server refuses every write of that kind ("status
// unknown for quota"). So while a quota's status lacks a count,
// EnforceQuotas changes its limits back and forth (the Lease limit, by
// one) every few seconds to have it recounted.
func EnforceQuotas(ctx context.Context, brokerAdmin *rest.Config, p addrpolicy.Policy, clusterIDs []string, timeout time.Duration) error {
	cs, _, err := clients(brokerAdmin)
	if err != nil {
		return err
	}
	var pending []string
	recounted := map[string]time.Time{}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pending = nil
		for _, id := range clusterIDs {
			want, err := Quota(p, id)
			if err != nil {
				return false, err
			}
			api := cs.CoreV1().ResourceQuotas(want.Namespace)
			q, err := api.Get(ctx, want.Name, metav1.GetOptions{})
			switch {
			case err != nil:
				return false, fmt.Errorf("read resource quota %s/%s: %w", want.Namespace, want.Name, err)
			case !sameLimits(q.Spec.Hard, want.Spec.Hard):
				return false, fmt.Errorf("resource quota %s/%s does not hold the ClusterSet policy's limits", want.Namespace, want.Name)
			case sameLimits(q.Status.Hard, q.Spec.Hard) && len(q.Status.Used) == len(q.Status.Hard):
				continue
			}
			pending = append(pending, want.Namespace)
			if !sameLimits(q.Status.Hard, q.Spec.Hard) || time.Since(recounted[id]) < 5*time.Second {
				continue // the controller has yet to see these limits
			}
			recounted[id] = time.Now()
			if err := recount(ctx, cs, q); err != nil {
				return false, err
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("the broker does not enforce the quotas of %s after %s (%w): does it run kube-controller-manager's resourcequota controller?",
			strings.Join(pending, ", "), timeout, err)
	}
	return nil
}

// recount has the quota controller count q again: it raises q's Lease
// limit by one and sets it back, each a merge patch of that one limit (no
// conflict with the controller writing the status meanwhile).
func recount(ctx context.Context, cs kubernetes.Interface, q *corev1.ResourceQuota) error {
	api := cs.CoreV1().ResourceQuotas(q.Namespace)
	const leases = "count/leases.coordination.k8s.io"
	limit := q.Spec.Hard[leases]
	raised := limit.DeepCopy()
	raised.Add(*resource.NewQuantity(1, resource.DecimalSI))
	for _, v := range []resource.Quantity{raised, limit} {
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"hard": map[string]string{leases: v.String()}}})
		if err != nil {
			return err
		}
		if _, err := api.Patch(ctx, q.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("have resource quota %s/%s recounted: %w", q.Namespace, q.Name, err)
		}
	}
	return nil
}
