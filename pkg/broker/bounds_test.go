package broker_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/globalnet"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// testPolicy is a ClusterSet policy unlike the defaults in every range:
// a refusal under it cannot come from a default checked anywhere.
func testPolicy(t testing.TB) addrpolicy.Policy {
	t.Helper()
	p, err := addrpolicy.ParsePolicy(v1alpha1.ClusterSetPolicySpec{
		AllowedCIDRs: []string{"10.0.0.0/8", "fd00::/8"},
		VIPRange:     "243.16.0.0/16", VIPRangeIPv6: "fd00:ffff::/112",
		Globalnet: v1alpha1.GlobalnetPolicy{Supernet: "242.1.0.0/16", CIDRBits: 26},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// member returns a client of the broker with clusterID's identity, as
// EnsureClusterIdentity issues it.
func member(ctx context.Context, t *testing.T, api *kubetest.Cluster, clusterID string) client.Client {
	t.Helper()
	kc, err := broker.EnsureClusterIdentity(ctx, api.Config, clusterID)
	if err != nil {
		t.Fatalf("EnsureClusterIdentity(%s): %v", clusterID, err)
	}
	return kubetest.KubeconfigClient(t, kc)
}

// waitRefused retries write until the API server refuses it: it loads a
// new admission policy a moment after it was created. Writes that
// succeed meanwhile are undone by undo.
func waitRefused(t *testing.T, what string, write func() error, undo func()) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := write()
		if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
			return
		}
		if err == nil {
			undo()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the broker never refused it (last: %v)", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func globalCIDR(name, owner string) *v1alpha1.GlobalCIDR {
	return &v1alpha1.GlobalCIDR{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{broker.LabelClusterID: owner}},
		Spec: v1alpha1.GlobalCIDRSpec{ClusterID: owner}}
}

func vipAllocation(name, owner string) *v1alpha1.VIPAllocation {
	return &v1alpha1.VIPAllocation{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{broker.LabelClusterID: owner}},
		Spec: v1alpha1.VIPAllocationSpec{ServiceNamespace: "kubecon", ServiceName: "whereami"}}
}

func clusterObj(id string, pods, svcs, globals []string) *v1alpha1.Cluster {
	return &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(id), Name: id, Labels: map[string]string{broker.LabelClusterID: id}},
		Spec: v1alpha1.ClusterSpec{ClusterID: id, PodCIDRs: pods, ServiceCIDRs: svcs, GlobalCIDRs: globals}}
}

// cidrClaimObj is a CIDRClaim named name in member ns's namespace, in
// owner's name, claiming cidr.
func cidrClaimObj(ns, name, owner, cidr string) *v1alpha1.CIDRClaim {
	return &v1alpha1.CIDRClaim{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(ns), Name: name, Labels: map[string]string{broker.LabelClusterID: ns}},
		Spec: v1alpha1.CIDRClaimSpec{CIDR: cidr, ClusterID: owner}}
}

func endpointObj(id string, subnets ...string) *v1alpha1.Endpoint {
	return &v1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(id), Name: id, Labels: map[string]string{broker.LabelClusterID: id}},
		Spec: v1alpha1.EndpointSpec{ClusterID: id, Hostname: "gw", CableDriver: v1alpha1.CableWireGuard, PublicIP: "198.18.1.10", Port: 4500,
			PublicKey: strings.Repeat("A", 43) + "=", Subnets: subnets}}
}

func recordObj(id, ns, name string, backends int) *v1alpha1.ServiceExportRecord {
	r := &v1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(id), Name: mcs.RecordName(ns, name)},
		Spec: v1alpha1.ServiceExportRecordSpec{ClusterID: id, ServiceNamespace: ns, ServiceName: name,
			ExportCreationTimestamp: metav1.Now(), Type: mcsv1beta1.Headless}}
	for backends > 0 {
		n := min(backends, 1000)
		g := v1alpha1.RecordEndpoints{AddressType: "IPv4"}
		for i := range n {
			g.Backends = append(g.Backends, v1alpha1.RecordBackend{Address: fmt.Sprintf("10.244.%d.%d", i/250, i%250), Ready: true})
		}
		r.Spec.Endpoints = append(r.Spec.Endpoints, g)
		backends -= n
	}
	return r
}

// TestMemberBounds proves, against a real broker API server and with
// member identities only, that the broker's admission holds every member
// to the ClusterSet's policy (BoundsPolicy) and to its own name
// (OwnershipPolicy): each forbidden write is refused with a message
// naming the rule, the honest one beside it passes.
func TestMemberBounds(t *testing.T) {
	api := kubetest.Start(t, "broker")
	ctx := context.Background()
	pol := testPolicy(t)
	if err := broker.EnsureClusterSet(ctx, api.Config, pol); err != nil {
		t.Fatal(err)
	}
	a, b := member(ctx, t, api, "a"), member(ctx, t, api, "b")
	waitRefused(t, "a claims a /24 of a /26 supernet", func() error { return a.Create(ctx, globalCIDR("242.1.0.0-24", "a")) },
		func() { _ = api.Client.Delete(ctx, globalCIDR("242.1.0.0-24", "a")) })

	type tc struct {
		name   string
		c      client.Client
		obj    client.Object
		update bool   // update the object (created by the administrator first) instead of creating it
		want   string // "" = accepted; else "Forbidden" or "Invalid" and a part of the message after it
	}
	big := recordObj("a", "kubecon", "big", broker.MaxRecordItems+1)
	bigSplit := recordObj("a", "kubecon", "split", broker.MaxRecordItems)
	badName := recordObj("a", "kubecon", "web", 1)
	badName.Name = "kubecon.other"
	part := recordObj("a", "kubecon", "web", 1)
	part.Name = mcs.RecordPartName("kubecon", "web", "abc", 1)
	part.Spec.Part = &v1alpha1.RecordPart{Index: 1, Count: 2, Revision: "abc"}
	partMisnamed := part.DeepCopy()
	partMisnamed.Name = mcs.RecordPartName("kubecon", "web", "abc", 2)
	labels := recordObj("a", "kubecon", "labels", 1)
	labels.Spec.ExportedLabels = map[string]string{"app": "bad value!"}
	annotations := recordObj("a", "kubecon", "annotations", 1)
	annotations.Spec.ExportedAnnotations = map[string]string{"a": strings.Repeat("x", addrpolicy.MaxRecordAnnotationBytes)}
	otherRecord := recordObj("a", "kubecon", "other", 1)
	otherRecord.Spec.ClusterID = "b"
	fat := recordObj("a", "kubecon", "fat", 1)
	fat.Annotations = map[string]string{"x": strings.Repeat("x", broker.MaxAnnotationBytes)}
	labelled := clusterObj("a", []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}, nil)
	labelled.Labels[broker.LabelClusterID] = "b"
	otherCluster := clusterObj("a", []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}, nil)
	otherCluster.Name = "b"
	backendConfig := endpointObj("a", "10.244.0.0/16")
	backendConfig.Spec.BackendConfig = map[string]string{"k": strings.Repeat("x", broker.MaxBackendConfigValue+1)}
	for _, c := range []tc{
		// Global CIDR claims: exactly a /26 of 242.1.0.0/16, named
		// after it.
		{name: "global CIDR claim", c: a, obj: globalCIDR(globalnet.CIDRObjectName(mustPrefix("242.1.0.64/26")), "a")},
		{name: "global CIDR of the default size", c: a, obj: globalCIDR("242.1.1.0-24", "a"), want: "Forbidden: global CIDR claim 242.1.1.0-24 is not a /26 of the globalnet supernet 242.1.0.0/16"},
		{name: "global CIDR outside the supernet", c: a, obj: globalCIDR("242.2.0.0-26", "a"), want: "Forbidden: global CIDR claim 242.2.0.0-26"},
		{name: "global CIDR: half of the IPv4 space", c: a, obj: globalCIDR("0.0.0.0-1", "a"), want: "Forbidden: global CIDR claim 0.0.0.0-1"},
		{name: "global CIDR: other half", c: a, obj: globalCIDR("128.0.0.0-1", "a"), want: "Forbidden: global CIDR claim 128.0.0.0-1"},
		{name: "global CIDR with host bits", c: a, obj: globalCIDR("242.1.0.65-26", "a"), want: "Forbidden: global CIDR claim"},
		{name: "global CIDR name not a CIDR", c: a, obj: globalCIDR("mine", "a"), want: "Forbidden: global CIDR claim mine"},
		{name: "global CIDR in another's name", c: a, obj: globalCIDR("242.1.0.128-26", "b"), want: "Forbidden: cluster a may only write claims labelled"},
		// VIP allocations: addresses of 243.16.0.0/16 or fd00:ffff::/112.
		{name: "VIP", c: a, obj: vipAllocation(mcs.VIPObjectName(mustAddr("243.16.0.9")), "a")},
		{name: "IPv6 VIP", c: a, obj: vipAllocation(mcs.VIPObjectName(mustAddr("fd00:ffff::9")), "a")},
		{name: "VIP of the default range", c: a, obj: vipAllocation("243.0.0.9", "a"), want: "Forbidden: VIP allocation 243.0.0.9 is not an address of the clusterset VIP ranges 243.16.0.0/16, fd00:ffff::/112"},
		{name: "IPv6 VIP of the default range", c: a, obj: vipAllocation(mcs.VIPObjectName(mustAddr("fd63:6175:7365::9")), "a"), want: "Forbidden: VIP allocation v6-fd63"},
		{name: "VIP not canonical", c: a, obj: vipAllocation("243.16.0.09", "a"), want: "Forbidden: VIP allocation 243.16.0.09"},
		{name: "IPv6 VIP short form", c: a, obj: vipAllocation("v6-fd00-ffff--9", "a"), want: "Forbidden: VIP allocation v6-fd00-ffff--9"},
		{name: "VIP in another's name", c: a, obj: vipAllocation("243.16.0.10", "b"), want: "Forbidden: cluster a may only write claims labelled"},
		// The member's Cluster: its CIDRs in the allowed space.
		{name: "cluster", c: a, obj: clusterObj("a", []string{"10.244.0.0/16", "fd00:10:244::/64"}, []string{"10.96.0.0/16"}, []string{"242.1.0.64/26"})},
		{name: "cluster of another", c: a, obj: otherCluster, want: "Forbidden: cluster a may only announce itself"},
		{name: "cluster: public pod CIDR", update: true, c: a, obj: clusterObj("a", []string{"10.244.0.0/16", "8.0.0.0/8"}, []string{"10.96.0.0/16"}, nil),
			want: "Forbidden: cluster a announces pod or service CIDRs 8.0.0.0/8 outside the ClusterSet's allowed space 10.0.0.0/8, fd00::/8"},
		{name: "cluster: 172.16.0.0/12, allowed by default only", update: true, c: a, obj: clusterObj("a", []string{"172.16.0.0/12"}, []string{"10.96.0.0/16"}, nil),
			want: "Forbidden: cluster a announces pod or service CIDRs 172.16.0.0/12"},
		{name: "cluster: 0.0.0.0/1", update: true, c: a, obj: clusterObj("a", []string{"0.0.0.0/1"}, []string{"10.96.0.0/16"}, nil), want: "Forbidden: cluster a announces pod or service CIDRs 0.0.0.0/1"},
		{name: "cluster: service CIDR in the VIP range", update: true, c: a, obj: clusterObj("a", []string{"10.244.0.0/16"}, []string{"243.16.0.0/20"}, nil), want: "Forbidden: cluster a announces pod or service CIDRs 243.16.0.0/20"},
		{name: "cluster: IPv6 CIDR over the IPv6 VIP range", update: true, c: a, obj: clusterObj("a", []string{"fd00::/16"}, []string{"10.96.0.0/16"}, nil), want: "Forbidden: cluster a announces pod or service CIDRs fd00::/16"},
		{name: "cluster: host bits", update: true, c: a, obj: clusterObj("a", []string{"10.244.0.1/16"}, []string{"10.96.0.0/16"}, nil), want: "Forbidden: cluster a announces pod or service CIDRs 10.244.0.1/16"},
		{name: "cluster: global CIDR of the wrong size", update: true, c: a, obj: clusterObj("a", []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}, []string{"242.1.0.0/16"}),
			want: "Forbidden: cluster a announces global CIDRs 242.1.0.0/16 that are not /26 blocks of the globalnet supernet 242.1.0.0/16"},
		{name: "cluster labelled another's", update: true, c: a, obj: labelled, want: "Forbidden: cluster a may not label its Cluster causeway.dev/cluster-id=b"},
		// The member's Endpoint: subnets in the allowed space or the
		// supernet.
		{name: "endpoint", c: a, obj: endpointObj("a", "10.244.0.0/16", "242.1.0.64/26")},
		{name: "endpoint: public subnet", update: true, c: a, obj: endpointObj("a", "10.244.0.0/16", "1.0.0.0/8"), want: "Forbidden: cluster a announces endpoint subnets 1.0.0.0/8 outside"},
		{name: "endpoint: the default route", update: true, c: a, obj: endpointObj("a", "0.0.0.0/0"), want: "Forbidden: cluster a announces endpoint subnets 0.0.0.0/0"},
		{name: "endpoint: supernet and beyond", update: true, c: a, obj: endpointObj("a", "242.0.0.0/8"), want: "Forbidden: cluster a announces endpoint subnets 242.0.0.0/8"},
		{name: "endpoint: big backendConfig", update: true, c: a, obj: backendConfig, want: "Invalid: an Endpoint's backendConfig"},
		// CIDR claims: in the member's namespace and name, named after
		// a pod or service CIDR of the allowed space.
		{name: "CIDR claim", c: a, obj: cidrClaimObj("a", addrpolicy.CIDRClaimName(mustPrefix("10.244.0.0/16")), "a", "10.244.0.0/16")},
		{name: "IPv6 CIDR claim", c: a, obj: cidrClaimObj("a", addrpolicy.CIDRClaimName(mustPrefix("fd00:10:244::/64")), "a", "fd00:10:244::/64")},
		{name: "CIDR claim named after another CIDR", c: a, obj: cidrClaimObj("a", "10.245.0.0-16", "a", "10.244.0.0/16"),
			want: "Forbidden: CIDR claim 10.245.0.0-16 is not named after its CIDR 10.244.0.0/16"},
		{name: "IPv6 CIDR claim named after another length", c: a, obj: cidrClaimObj("a", "v6-fd00-0010-0244-0000-0000-0000-0000-0000-48", "a", "fd00:10:244::/64"),
			want: "Forbidden: CIDR claim v6-fd00-0010-0244-0000-0000-0000-0000-0000-48 is not named after its CIDR"},
		{name: "IPv6 CIDR claim in short form", c: a, obj: cidrClaimObj("a", "v6-fd00-10-244--64", "a", "fd00:10:244::/64"),
			want: "Forbidden: CIDR claim v6-fd00-10-244--64 is not named after its CIDR"},
		{name: "CIDR claim outside the allowed space", c: a, obj: cidrClaimObj("a", "8.0.0.0-8", "a", "8.0.0.0/8"),
			want: "Forbidden: cluster a claims CIDR 8.0.0.0/8 outside the ClusterSet's allowed space 10.0.0.0/8, fd00::/8"},
		{name: "CIDR claim with host bits", c: a, obj: cidrClaimObj("a", "10.1.0.1-16", "a", "10.1.0.1/16"), want: "Forbidden: cluster a claims CIDR 10.1.0.1/16"},
		{name: "CIDR claim of the supernet", c: a, obj: cidrClaimObj("a", "242.1.0.0-16", "a", "242.1.0.0/16"), want: "Forbidden: cluster a claims CIDR 242.1.0.0/16"},
		{name: "CIDR claim in another's name", c: a, obj: cidrClaimObj("a", "10.8.0.0-16", "b", "10.8.0.0/16"),
			want: "Forbidden: cluster a may only announce itself: its CIDRClaim names cluster b"},
		{name: "CIDR claim in another's namespace", c: a, obj: cidrClaimObj("b", "10.8.0.0-16", "b", "10.8.0.0/16"), want: `Forbidden: cannot create resource "cidrclaims"`},
		{name: "CIDR claim: its CIDR changed", update: true, c: a, obj: cidrClaimObj("a", addrpolicy.CIDRClaimName(mustPrefix("10.244.0.0/16")), "a", "10.244.0.0/17"),
			want: "Invalid: cidr is immutable"},
		// Export records: bounded, named after their Service, in the
		// member's name.
		{name: "record", c: a, obj: recordObj("a", "kubecon", "web", 1)},
		{name: "record part", c: a, obj: part},
		{name: "record of MaxRecordItems", c: a, obj: bigSplit},
		{name: "record beyond MaxRecordItems", c: a, obj: big, want: fmt.Sprintf("Invalid: export record kubecon.big has %d endpoint items", broker.MaxRecordItems+1)},
		{name: "record misnamed", c: a, obj: badName, want: "Invalid: export record kubecon.other is not named <namespace>.<name>"},
		{name: "record part misnamed", c: a, obj: partMisnamed, want: "Invalid: export record kubecon.web.abc-2 is not named"},
		{name: "record with an illegal exported label", c: a, obj: labels, want: "Invalid: an exported label of the export record is not a legal label"},
		{name: "record with huge exported annotations", c: a, obj: annotations, want: "Invalid: the export record's exported annotations"},
		{name: "record in another's name", c: a, obj: otherRecord, want: "Forbidden: cluster a may only announce itself: its ServiceExportRecord names cluster b"},
		{name: "record with huge annotations", c: a, obj: fat, want: "Invalid: the ServiceExportRecord has more than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.obj.DeepCopyObject().(client.Object)
			var err error
			if c.update {
				have := obj.DeepCopyObject().(client.Object)
				if err := api.Client.Get(ctx, client.ObjectKeyFromObject(obj), have); err != nil {
					t.Fatalf("the honest object to update: %v", err)
				}
				obj.SetResourceVersion(have.GetResourceVersion())
				err = c.c.Update(ctx, obj)
			} else {
				err = c.c.Create(ctx, obj)
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("the honest write is refused: %v", err)
				}
				return
			}
			reason, msg, _ := strings.Cut(c.want, ": ")
			if got := apierrors.ReasonForError(err); string(got) != reason || !strings.Contains(err.Error(), msg) {
				t.Fatalf("err = %v (%s), want %s naming %q", err, got, reason, msg)
			}
		})
	}
	// b writes its own, a none of it (RBAC) and no ClusterSetPolicy.
	if err := b.Create(ctx, clusterObj("b", []string{"10.244.0.0/16"}, []string{"10.96.0.0/16"}, nil)); err != nil {
		t.Errorf("b announces itself: %v", err)
	}
	var have v1alpha1.ClusterSetPolicy
	if err := a.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSetPolicyName}, &have); err != nil {
		t.Fatalf("a reads the ClusterSet policy: %v", err)
	}
	if got, err := clusterset.Read(ctx, a); err != nil || !equalPolicy(got, pol) {
		t.Errorf("a reads the policy as %+v, %v; want %+v", got, err, pol)
	}
	forged := have.DeepCopy()
	forged.Spec.AllowedCIDRs = []string{"8.0.0.0/8"}
	if err := a.Update(ctx, forged); !apierrors.IsForbidden(err) {
		t.Errorf("a updates the ClusterSet policy: err=%v, want Forbidden", err)
	}
	if err := a.Delete(ctx, &have); !apierrors.IsForbidden(err) {
		t.Errorf("a deletes the ClusterSet policy: err=%v, want Forbidden", err)
	}
	fresh := clusterset.Object(pol)
	fresh.Name = "mine"
	if err := a.Create(ctx, fresh); !apierrors.IsForbidden(err) {
		t.Errorf("a creates a ClusterSet policy: err=%v, want Forbidden", err)
	}

	// Without the policy the broker refuses every member write it
	// bounds (fail closed); EnsureClusterIdentity stores the default one.
	if err := api.Client.Delete(ctx, &have); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, "a writes its record without a ClusterSet policy", func() error { return a.Create(ctx, recordObj("a", "kubecon", "nopolicy", 1)) },
		func() { _ = api.Client.Delete(ctx, recordObj("a", "kubecon", "nopolicy", 1)) })
	// The API server answers Invalid, naming the policy and the missing
	// parameter.
	if err := a.Create(ctx, recordObj("a", "kubecon", "nopolicy", 1)); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), broker.BoundsPolicyName) ||
		!strings.Contains(err.Error(), "no params found") {
		t.Errorf("a writes its record without a ClusterSet policy: err=%v, want Invalid naming %s", err, broker.BoundsPolicyName)
	}
	member(ctx, t, api, "a")
	if got, err := clusterset.Read(ctx, api.Client); err != nil || !equalPolicy(got, addrpolicy.DefaultPolicy()) {
		t.Errorf("after EnsureClusterIdentity the broker holds %+v, %v; want the default policy", got, err)
	}
	if err := api.Client.Get(ctx, client.ObjectKey{Name: v1alpha1.ClusterSetPolicyName}, &have); err != nil || have.Spec.VIPRange == "" {
		t.Errorf("the default policy is stored without every field set: %+v, %v", have.Spec, err)
	}
}

func equalPolicy(a, b addrpolicy.Policy) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }

// TestQuota proves, against a real broker API server with
// kube-controller-manager's quota controller, that a member holds at most
// its quota of export records while another member still writes, that
// it cannot change its quota, and that a policy change reaches every
// member's quota.
func TestQuota(t *testing.T) {
	api := kubetest.Start(t, "broker", kubetest.WithComponents(controlplane.ControllerManager))
	ctx := context.Background()
	pol := testPolicy(t)
	pol.Quotas.Records, pol.Quotas.Objects = 3, 5
	if err := broker.EnsureClusterSet(ctx, api.Config, pol); err != nil {
		t.Fatal(err)
	}
	a, b := member(ctx, t, api, "a"), member(ctx, t, api, "b")
	if err := broker.EnforceQuotas(ctx, api.Config, pol, []string{"a", "b"}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	for i := range pol.Quotas.Records {
		if err := a.Create(ctx, recordObj("a", "kubecon", fmt.Sprint("web", i), 1)); err != nil {
			t.Fatalf("a exports its record %d of %d: %v", i+1, pol.Quotas.Records, err)
		}
	}
	over := recordObj("a", "kubecon", "over", 1)
	if err := a.Create(ctx, over); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: "+broker.QuotaName) {
		t.Errorf("a exports one record more than its quota: err=%v, want Forbidden by the quota", err)
	}
	if err := b.Create(ctx, recordObj("b", "kubecon", "web", 1)); err != nil {
		t.Errorf("b exports while a is at its quota: %v", err)
	}
	var q corev1.ResourceQuota
	if err := a.Get(ctx, client.ObjectKey{Namespace: broker.Namespace("a"), Name: broker.QuotaName}, &q); err != nil {
		t.Fatalf("a reads its quota: %v", err)
	}
	raised := q.DeepCopy()
	raised.Spec.Hard["count/serviceexportrecords.causeway.dev"] = resource.MustParse("100000")
	if err := a.Update(ctx, raised); !apierrors.IsForbidden(err) {
		t.Errorf("a raises its quota: err=%v, want Forbidden", err)
	}
	if err := a.Delete(ctx, &q); !apierrors.IsForbidden(err) {
		t.Errorf("a deletes its quota: err=%v, want Forbidden", err)
	}
	// Every kind a member writes is counted.
	for i := range pol.Quotas.Objects + 1 {
		err := a.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace("a"), Name: fmt.Sprint("lease", i)}})
		if i < pol.Quotas.Objects && err != nil {
			t.Fatalf("a creates Lease %d of %d: %v", i+1, pol.Quotas.Objects, err)
		}
		if i == pol.Quotas.Objects && !apierrors.IsForbidden(err) {
			t.Errorf("a creates one Lease more than its quota: err=%v, want Forbidden", err)
		}
	}
	// CIDR claims too: as many as the object quota.
	if _, ok := q.Spec.Hard["count/cidrclaims.causeway.dev"]; !ok {
		t.Errorf("a's quota does not count CIDR claims: %v", q.Spec.Hard)
	}
	for i := range pol.Quotas.Objects + 1 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16)
		err := a.Create(ctx, cidrClaimObj("a", addrpolicy.CIDRClaimName(p), "a", p.String()))
		if i < pol.Quotas.Objects && err != nil {
			t.Fatalf("a claims CIDR %d of %d: %v", i+1, pol.Quotas.Objects, err)
		}
		if i == pol.Quotas.Objects && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: "+broker.QuotaName)) {
			t.Errorf("a claims one CIDR more than its quota: err=%v, want Forbidden by the quota", err)
		}
	}
	// The administrator raises the quota: every member's follows.
	pol.Quotas.Records = 4
	if err := broker.EnsureClusterSet(ctx, api.Config, pol); err != nil {
		t.Fatal(err)
	}
	if err := broker.EnforceQuotas(ctx, api.Config, pol, []string{"a", "b"}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Create(ctx, over); err != nil {
		t.Errorf("a exports its fourth record under the raised quota: %v", err)
	}
}
