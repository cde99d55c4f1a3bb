package broker_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
)

func TestNamespace(t *testing.T) {
	if got := broker.Namespace("c1"); got != "cluster-c1" {
		t.Errorf("Namespace(c1) = %q", got)
	}
	for ns, want := range map[string]string{"cluster-c1": "c1", "cluster-": "", "kube-system": "", "c1": ""} {
		got, ok := broker.ClusterIDFromNamespace(ns)
		if got != want || ok != (want != "") {
			t.Errorf("ClusterIDFromNamespace(%q) = %q, %v", ns, got, ok)
		}
	}
}

// TestClusterIdentity proves, against a real broker API server, that a
// member cluster's identity writes only its own namespace and reads the
// others'.
func TestClusterIdentity(t *testing.T) {
	api := kubetest.Start(t, "broker")
	ctx := context.Background()

	clients := map[string]client.Client{}
	for _, id := range []string{"a", "b"} {
		if _, err := broker.EnsureClusterIdentity(ctx, api.Config, id); err != nil {
			t.Fatalf("EnsureClusterIdentity(%s): %v", id, err)
		}
		// Idempotent: a second call succeeds and gives a working config too.
		kc, err := broker.EnsureClusterIdentity(ctx, api.Config, id)
		if err != nil {
			t.Fatalf("EnsureClusterIdentity(%s) again: %v", id, err)
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.BearerToken == "" || cfg.CertFile != "" || len(cfg.CertData) != 0 {
			t.Fatalf("identity %s is not a token identity", id)
		}
		c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
		if err != nil {
			t.Fatal(err)
		}
		clients[id] = c
	}
	if _, err := broker.EnsureClusterIdentity(ctx, api.Config, "Bad_ID"); err == nil {
		t.Error("a cluster ID that is not a DNS label was accepted")
	}

	objects := func(id string) []client.Object {
		ns := broker.Namespace(id)
		return []client.Object{
			&causewayv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: id},
				Spec: causewayv1alpha1.ClusterSpec{ClusterID: id, PodCIDRs: []string{"10.244.0.0/16"}, ServiceCIDRs: []string{"10.96.0.0/16"}}},
			&causewayv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: id},
				Spec: causewayv1alpha1.EndpointSpec{ClusterID: id, Hostname: "n0", CableDriver: causewayv1alpha1.CableVXLAN,
					PublicIP: "198.18.1.10", Port: 4800, Subnets: []string{"10.244.0.0/16"}}},
			&causewayv1alpha1.ServiceExportRecord{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kubecon.whereami"},
				Spec: causewayv1alpha1.ServiceExportRecordSpec{ClusterID: id, ServiceNamespace: "kubecon", ServiceName: "whereami",
					ExportCreationTimestamp: metav1.Now(), Type: mcsv1beta1.Headless}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "causeway-liveness"}},
		}
	}
	// Each cluster writes its own objects.
	for id, c := range clients {
		for _, o := range objects(id) {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("%s creates its own %T: %v", id, o, err)
			}
		}
	}
	a := clients["a"]
	for _, o := range objects("b") {
		kind := typeName(o)
		// a reads b's object…
		got := o.DeepCopyObject().(client.Object)
		if err := a.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("a reads b's %s: %v", kind, err)
			continue
		}
		// …but cannot update, delete or create one in b's namespace.
		upd := got.DeepCopyObject().(client.Object)
		upd.SetLabels(map[string]string{"forged": "true"})
		if err := a.Update(ctx, upd); !apierrors.IsForbidden(err) {
			t.Errorf("a updates b's %s: err=%v, want Forbidden", kind, err)
		}
		if err := a.Delete(ctx, got); !apierrors.IsForbidden(err) {
			t.Errorf("a deletes b's %s: err=%v, want Forbidden", kind, err)
		}
		fresh := o.DeepCopyObject().(client.Object)
		fresh.SetName("forged")
		fresh.SetResourceVersion("")
		if err := a.Create(ctx, fresh); !apierrors.IsForbidden(err) {
			t.Errorf("a creates a %s in b's namespace: err=%v, want Forbidden", kind, err)
		}
		if err := a.DeleteAllOf(ctx, o.DeepCopyObject().(client.Object), client.InNamespace(o.GetNamespace())); !apierrors.IsForbidden(err) {
			t.Errorf("a deletes all %ss in b's namespace: err=%v, want Forbidden", kind, err)
		}
		// b's object is untouched.
		after := o.DeepCopyObject().(client.Object)
		if err := api.Client.Get(ctx, client.ObjectKeyFromObject(o), after); err != nil || after.GetLabels()["forged"] != "" {
			t.Errorf("b's %s after a's attempts: %v, labels %v", kind, err, after.GetLabels())
		}
	}
	// a lists every cluster's records (the import side of MCS).
	var recs causewayv1alpha1.ServiceExportRecordList
	if err := a.List(ctx, &recs); err != nil || len(recs.Items) != 2 {
		t.Errorf("a lists records: %d, %v; want 2", len(recs.Items), err)
	}
	// a cannot touch other namespaces or create namespaces.
	if err := a.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cluster-z"}}); !apierrors.IsForbidden(err) {
		t.Errorf("a creates a namespace: err=%v, want Forbidden", err)
	}
	if err := a.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-a", Name: "x"}}); !apierrors.IsForbidden(err) {
		t.Errorf("a creates a ConfigMap: err=%v, want Forbidden", err)
	}
	// VIP allocations and global CIDR claims: create and delete, no
	// update, and only one's own (OwnershipPolicy). The API server loads
	// a new policy within a moment: wait until it refuses.
	b := clients["b"]
	vip := func(owner string) *causewayv1alpha1.VIPAllocation {
		v := &causewayv1alpha1.VIPAllocation{ObjectMeta: metav1.ObjectMeta{Name: "243.0.0.9"},
			Spec: causewayv1alpha1.VIPAllocationSpec{ServiceNamespace: "kubecon", ServiceName: "whereami"}}
		if owner != "" {
			v.Labels = map[string]string{broker.LabelClusterID: owner}
		}
		return v
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := a.Create(ctx, vip("b"))
		if apierrors.IsForbidden(err) {
			break
		}
		if err == nil {
			if err := api.Client.Delete(ctx, vip("b")); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("a allocates a VIP in b's name: err=%v, want Forbidden", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.Create(ctx, vip("")); !apierrors.IsForbidden(err) {
		t.Errorf("a allocates a VIP without owner: err=%v, want Forbidden", err)
	}
	mine := vip("a")
	if err := a.Create(ctx, mine); err != nil {
		t.Fatalf("a allocates a VIP: %v", err)
	}
	if err := b.Delete(ctx, mine); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "claim of cluster a") {
		t.Errorf("b releases a's VIP allocation: err=%v, want Forbidden", err)
	}
	stolen := mine.DeepCopy()
	stolen.Labels[broker.LabelClusterID] = "b"
	if err := b.Update(ctx, stolen); !apierrors.IsForbidden(err) {
		t.Errorf("b updates a VIP allocation: err=%v, want Forbidden", err)
	}
	if err := a.Delete(ctx, mine); err != nil {
		t.Errorf("a releases its VIP allocation: %v", err)
	}
	legacy := vip("")
	if err := api.Client.Create(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, legacy); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "claim of nobody") {
		t.Errorf("a releases an allocation without owner: err=%v, want Forbidden", err)
	}
	if err := api.Client.Delete(ctx, legacy); err != nil {
		t.Errorf("the administrator releases it: %v", err)
	}
	claim := func(label, spec string) *causewayv1alpha1.GlobalCIDR {
		return &causewayv1alpha1.GlobalCIDR{ObjectMeta: metav1.ObjectMeta{Name: "242.0.9.0-24", Labels: map[string]string{broker.LabelClusterID: label}},
			Spec: causewayv1alpha1.GlobalCIDRSpec{ClusterID: spec}}
	}
	if err := a.Create(ctx, claim("a", "b")); !apierrors.IsForbidden(err) {
		t.Errorf("a claims a global CIDR in b's name: err=%v, want Forbidden", err)
	}
	if err := b.Create(ctx, claim("b", "b")); err != nil {
		t.Fatalf("b claims a global CIDR: %v", err)
	}
	if err := a.Delete(ctx, claim("b", "b")); !apierrors.IsForbidden(err) {
		t.Errorf("a deletes b's global CIDR claim: err=%v, want Forbidden", err)
	}
	if err := b.Delete(ctx, claim("b", "b")); err != nil {
		t.Errorf("b releases its global CIDR claim: %v", err)
	}
	// Tunnel keys: the same, and a key's owner is whoever claimed it
	// first (names are unique).
	tunnelKey := func(label, spec, pub string) *causewayv1alpha1.TunnelKey {
		return &causewayv1alpha1.TunnelKey{
			ObjectMeta: metav1.ObjectMeta{Name: broker.TunnelKeyName(pub), Labels: map[string]string{broker.LabelClusterID: label, causewayv1alpha1.LabelNode: "n0"}},
			Spec:       causewayv1alpha1.TunnelKeySpec{ClusterID: spec, PublicKey: pub}}
	}
	keyA, keyB := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("a", 32))), base64.StdEncoding.EncodeToString([]byte(strings.Repeat("b", 32)))
	for _, k := range []*causewayv1alpha1.TunnelKey{tunnelKey("b", "b", keyB), tunnelKey("a", "b", keyB), tunnelKey("b", "a", keyB)} {
		if err := a.Create(ctx, k); !apierrors.IsForbidden(err) {
			t.Errorf("a claims a tunnel key labelled %s for cluster %s: err=%v, want Forbidden", k.Labels[broker.LabelClusterID], k.Spec.ClusterID, err)
		}
	}
	misnamed := tunnelKey("a", "a", keyA)
	misnamed.Name = "not-a-hash"
	if err := a.Create(ctx, misnamed); !apierrors.IsInvalid(err) {
		t.Errorf("a claims a tunnel key not named after a hash: err=%v, want Invalid", err)
	}
	if err := b.Create(ctx, tunnelKey("b", "b", keyB)); err != nil {
		t.Fatalf("b claims its tunnel key: %v", err)
	}
	if err := a.Create(ctx, tunnelKey("a", "a", keyB)); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a claims b's tunnel key in its own name: err=%v, want AlreadyExists", err)
	}
	if err := a.Delete(ctx, tunnelKey("b", "b", keyB)); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "claim of cluster b") {
		t.Errorf("a deletes b's tunnel key: err=%v, want Forbidden", err)
	}
	stolenKey := &causewayv1alpha1.TunnelKey{}
	if err := a.Get(ctx, client.ObjectKeyFromObject(tunnelKey("b", "b", keyB)), stolenKey); err != nil {
		t.Fatal(err)
	}
	stolenKey.Labels[broker.LabelClusterID] = "a"
	if err := a.Update(ctx, stolenKey); !apierrors.IsForbidden(err) {
		t.Errorf("a relabels b's tunnel key: err=%v, want Forbidden", err)
	}
	if err := a.Create(ctx, tunnelKey("a", "a", keyA)); err != nil {
		t.Fatalf("a claims its tunnel key: %v", err)
	}

	kc, err := broker.EnsureClusterIdentity(ctx, api.Config, "a")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := broker.WithServer(kc, "https://127.0.0.1:6444")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := clientcmd.RESTConfigFromKubeConfig(moved); err != nil || cfg.Host != "https://127.0.0.1:6444" {
		t.Errorf("WithServer: host %v, %v", cfg, err)
	}

	// a leaves: its tunnel key goes, b's stays.
	if err := broker.Leave(ctx, a, "a"); err != nil {
		t.Fatalf("a leaves: %v", err)
	}
	var keys causewayv1alpha1.TunnelKeyList
	if err := api.Client.List(ctx, &keys); err != nil {
		t.Fatal(err)
	}
	if owners := broker.KeyOwners(keys.Items); len(owners) != 1 || owners[keyB] != "b" {
		t.Errorf("tunnel keys after a left: %v, want only b's", owners)
	}
}

func tokenExpiry(t *testing.T, kubeconfig []byte) time.Time {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(cfg.BearerToken, ".")
	if len(parts) != 3 {
		t.Fatalf("token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	return time.Unix(claims.Exp, 0)
}

func typeName(o client.Object) string {
	switch o.(type) {
	case *causewayv1alpha1.Cluster:
		return "Cluster"
	case *causewayv1alpha1.Endpoint:
		return "Endpoint"
	case *causewayv1alpha1.ServiceExportRecord:
		return "ServiceExportRecord"
	case *coordinationv1.Lease:
		return "Lease"
	}
	return "object"
}

func TestTunnelKeyName(t *testing.T) {
	// sha256 of 32 zero bytes.
	if got, want := broker.TunnelKeyName("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="), "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"; got != want {
		t.Errorf("TunnelKeyName(zero key) = %s, want %s", got, want)
	}
	if got := broker.TunnelKeyName("not base64!"); got != "" {
		t.Errorf("TunnelKeyName(garbage) = %q, want empty", got)
	}
	pub := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	key := func(name, owner string) causewayv1alpha1.TunnelKey {
		return causewayv1alpha1.TunnelKey{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: causewayv1alpha1.TunnelKeySpec{ClusterID: owner, PublicKey: pub}}
	}
	deleting := key(broker.TunnelKeyName(pub), "c")
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	// A key claimed under a name that is not its hash claims nothing.
	if got := broker.KeyOwners([]causewayv1alpha1.TunnelKey{key(strings.Repeat("0", 64), "a"), key(broker.TunnelKeyName(pub), "b")}); len(got) != 1 || got[pub] != "b" {
		t.Errorf("KeyOwners = %v, want only b's correctly named claim", got)
	}
	if got := broker.KeyOwners([]causewayv1alpha1.TunnelKey{deleting}); len(got) != 0 {
		t.Errorf("KeyOwners of a claim being deleted = %v, want none", got)
	}
}
