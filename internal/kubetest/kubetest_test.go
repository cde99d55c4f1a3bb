package kubetest_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
)

// TestClusterSetControlPlanes starts three real control planes at once
// (two clusters and a broker) and checks each serves our CRDs and the MCS
// CRDs, with validation and RBAC on.
func TestClusterSetControlPlanes(t *testing.T) {
	cps := kubetest.StartMany(t, "c1", "c2", "broker")
	if len(cps) != 3 {
		t.Fatalf("started %d control planes, want 3", len(cps))
	}
	ctx := context.Background()
	for name, c := range cps {
		t.Run(name, func(t *testing.T) {
			v, err := c.Kube.Discovery().ServerVersion()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(v.GitVersion, "v1.") || v.GitVersion == "v0.0.0-master" {
				t.Errorf("server version %q: built without version ldflags?", v.GitVersion)
			}
			testCluster(ctx, t, c)
			testEndpointValidation(ctx, t, c)
			testServiceImportBothVersions(ctx, t, c)
			testRBAC(ctx, t, c)
		})
	}
	// The control planes are separate: an object made in c1 is not in c2.
	only := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "only-c1"}}
	if err := cps["c1"].Client.Create(ctx, only); err != nil {
		t.Fatal(err)
	}
	if err := cps["c2"].Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "only-c1"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("c2 sees c1's ConfigMap: err=%v", err)
	}
}

func testCluster(ctx context.Context, t *testing.T, c *kubetest.Cluster) {
	want := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "self"},
		Spec: v1alpha1.ClusterSpec{
			ClusterID:    "c1",
			PodCIDRs:     []string{"10.244.0.0/16"},
			ServiceCIDRs: []string{"10.96.0.0/16"},
		},
	}
	if err := c.Client.Create(ctx, want); err != nil {
		t.Fatalf("create Cluster: %v", err)
	}
	got := &v1alpha1.Cluster{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: want.Name}, got); err != nil {
		t.Fatalf("get Cluster: %v", err)
	}
	if got.Spec.ClusterID != "c1" || got.Spec.PodCIDRs[0] != "10.244.0.0/16" {
		t.Errorf("Cluster read back as %+v", got.Spec)
	}
	// The cluster ID is immutable (CEL transition rule).
	got.Spec.ClusterID = "c9"
	if err := c.Client.Update(ctx, got); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "immutable") {
		t.Errorf("changing clusterID: err=%v, want Invalid ... immutable", err)
	}

	bad := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "bad"},
		Spec: v1alpha1.ClusterSpec{
			ClusterID:    "Not_A_Label",
			PodCIDRs:     []string{"10.244.0.0/33"},
			ServiceCIDRs: []string{"banana"},
		},
	}
	err := c.Client.Create(ctx, bad)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create invalid Cluster: err=%v, want Invalid", err)
	}
	for _, field := range []string{"spec.clusterID", "spec.podCIDRs[0]", "spec.serviceCIDRs[0]", "must be a CIDR"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("validation error does not mention %q: %v", field, err)
		}
	}
}

func testEndpointValidation(ctx context.Context, t *testing.T, c *kubetest.Cluster) {
	ep := func(name, key, ip string, port int32) *v1alpha1.Endpoint {
		return &v1alpha1.Endpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: v1alpha1.EndpointSpec{
				ClusterID: "c1", Hostname: "c1-gw", CableDriver: v1alpha1.CableWireGuard,
				PublicIP: ip, Port: port, PublicKey: key, Subnets: []string{"10.244.0.0/16"},
			},
		}
	}
	const goodKey = "YNqHbfBQKaGvzefSSuS2hUWnXNNz5W3uHnxMmvECX2c="
	if err := c.Client.Create(ctx, ep("good", goodKey, "198.18.0.1", 4500)); err != nil {
		t.Fatalf("create valid Endpoint: %v", err)
	}
	for name, e := range map[string]*v1alpha1.Endpoint{
		"bad-key":  ep("bad-key", "not-a-key", "198.18.0.1", 4500),
		"bad-ip":   ep("bad-ip", goodKey, "198.18.0.300", 4500),
		"bad-port": ep("bad-port", goodKey, "198.18.0.1", 70000),
	} {
		if err := c.Client.Create(ctx, e); !apierrors.IsInvalid(err) {
			t.Errorf("Endpoint %s: err=%v, want Invalid", name, err)
		}
	}
}

// testServiceImportBothVersions writes a ServiceImport as v1beta1 and
// reads it back through v1alpha1, the version CoreDNS reads.
func testServiceImportBothVersions(ctx context.Context, t *testing.T, c *kubetest.Cluster) {
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "whereami"},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:  mcsv1beta1.ClusterSetIP,
			IPs:   []string{"243.0.0.10"},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	if err := c.Client.Create(ctx, si); err != nil {
		t.Fatalf("create v1beta1 ServiceImport: %v", err)
	}
	old := &mcsv1alpha1.ServiceImport{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "whereami"}, old); err != nil {
		t.Fatalf("get v1alpha1 ServiceImport: %v", err)
	}
	if len(old.Spec.IPs) != 1 || old.Spec.IPs[0] != "243.0.0.10" || old.Spec.Type != mcsv1alpha1.ClusterSetIP || len(old.Spec.Ports) != 1 || old.Spec.Ports[0].Port != 80 {
		t.Errorf("v1alpha1 view of the ServiceImport: %+v", old.Spec)
	}
	se := &unstructured.Unstructured{}
	se.SetGroupVersionKind(schema.GroupVersionKind{Group: "multicluster.x-k8s.io", Version: "v1beta1", Kind: "ServiceExport"})
	se.SetNamespace("default")
	se.SetName("whereami")
	if err := c.Client.Create(ctx, se); err != nil {
		t.Fatalf("create ServiceExport: %v", err)
	}
}

// testRBAC checks authorization is on: an identity without bindings may
// not read Clusters.
func testRBAC(ctx context.Context, t *testing.T, c *kubetest.Cluster) {
	nobody := c.ClientAs(t, "nobody")
	err := nobody.List(ctx, &v1alpha1.ClusterList{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("list Clusters as an unbound user: err=%v, want Forbidden", err)
	}
}
