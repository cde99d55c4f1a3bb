package broker_test

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/daemon"
	"github.com/causeway-net/causeway/pkg/kube"
)

// TestTokenRotation proves, against a real broker and member API server,
// that the member's broker token is rotated by the member itself into its
// Secret, that a daemon reading the Secret's files keeps working when the
// token it started with dies, and that leaving revokes every token.
func TestTokenRotation(t *testing.T) {
	cps := kubetest.StartMany(t, "broker", "member")
	b, m := cps["broker"], cps["member"]
	ctx := context.Background()
	join, err := broker.EnsureClusterIdentity(ctx, b.Config, "c1")
	if err != nil {
		t.Fatal(err)
	}
	// The join token lives JoinTokenLifetime, not years.
	if exp := tokenExpiry(t, join); exp.After(time.Now().Add(broker.JoinTokenLifetime+time.Minute)) || exp.Before(time.Now().Add(broker.JoinTokenLifetime-time.Hour)) {
		t.Errorf("join token expires at %s, want in %s", exp, broker.JoinTokenLifetime)
	}
	data, err := broker.SecretData(join)
	if err != nil {
		t.Fatal(err)
	}
	// The token the member starts with dies when the test says so, the way
	// an expiring one would (TokenRequest issues nothing shorter than 10
	// minutes): it is bound to a broker Secret the test deletes.
	ns := broker.Namespace("c1")
	anchor := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "expiry"}}
	if err := b.Client.Create(ctx, anchor); err != nil {
		t.Fatal(err)
	}
	tr, err := b.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, broker.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Secret", APIVersion: "v1", Name: anchor.Name, UID: anchor.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := tr.Status.Token
	data[broker.SecretToken] = []byte(first)
	if err := m.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kube.Namespace}}); err != nil {
		t.Fatal(err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kube.Namespace, Name: broker.Secret}, Data: data}
	if err := m.Client.Create(ctx, sec); err != nil {
		t.Fatal(err)
	}

	// A daemon reads the Secret's files, as the kubelet mounts them.
	mount := t.TempDir()
	kubelet := func() {
		t.Helper()
		if err := m.Client.Get(ctx, client.ObjectKeyFromObject(sec), sec); err != nil {
			t.Fatal(err)
		}
		for k, v := range sec.Data {
			tmp := filepath.Join(mount, "."+k)
			if err := os.WriteFile(tmp, v, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(mount, k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	kubelet()
	opts := daemon.Options{BrokerKubeconfig: filepath.Join(mount, broker.SecretKubeconfig)}
	dcfg, err := opts.BrokerRESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	d, err := client.New(dcfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	lease := func(c client.Client, name string) error {
		return c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	if err := lease(d, "before"); err != nil {
		t.Fatalf("daemon with the first token: %v", err)
	}

	// The rotator, with the MCS controller's rights in the member cluster
	// (it may patch the Secret, not read Secrets), and the member's own
	// identity in the broker.
	rotated := make(chan time.Time, 1)
	runCtx, stop := context.WithCancel(ctx)
	rot := &broker.Rotator{
		Broker:    tokenConfig(b.Config, first),
		Local:     clientFor(t, m.DaemonConfig(t, "mcs-controller")),
		Namespace: kube.Namespace,
		ClusterID: "c1",
		Lifetime:  broker.MinTokenLifetime,
		Log:       slog.New(slog.NewTextHandler(t.Output(), nil)),
		Rotated:   func(exp time.Time) { rotated <- exp },
		Failed:    func(err error) { t.Errorf("rotation failed: %v", err); stop() },
	}
	done := make(chan error, 1)
	go func() { done <- rot.Run(runCtx) }()
	var exp time.Time
	select { // Run rotates at once.
	case exp = <-rotated:
	case err := <-done:
		t.Fatalf("Run ended without rotating: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if exp.After(time.Now().Add(broker.MinTokenLifetime+time.Minute)) || exp.Before(time.Now().Add(broker.MinTokenLifetime-time.Minute)) {
		t.Errorf("rotated token expires at %s, want in %s", exp, broker.MinTokenLifetime)
	}
	kubelet()
	second := string(sec.Data[broker.SecretToken])
	if second == first {
		t.Fatal("the Secret still holds the first token")
	}
	if _, err := broker.RESTConfigFromSecret(sec.Data); err != nil {
		t.Fatal(err)
	}

	// The first token dies: the daemon carries on with the second, read
	// from the file again after the one refused request.
	if err := b.Client.Delete(ctx, anchor); err != nil {
		t.Fatal(err)
	}
	unauthorized(t, tokenConfig(b.Config, first), "the first token after it died")
	if err := lease(d, "after-1"); err != nil && !apierrors.IsUnauthorized(err) {
		t.Fatalf("daemon after the first token died: %v", err)
	}
	if err := lease(d, "after-2"); err != nil {
		t.Errorf("daemon after the first token died, again: %v, want it to use the rotated token", err)
	}

	// A member's tokens are for itself only.
	own := clientFor(t, tokenConfig(b.Config, second))
	if _, err := broker.EnsureClusterIdentity(ctx, b.Config, "c2"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := broker.Token(ctx, tokenConfig(b.Config, second), "c2", time.Hour); !apierrors.IsForbidden(err) {
		t.Errorf("c1 requesting a token of c2: %v, want Forbidden", err)
	}
	other := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace("c2"), Name: broker.ServiceAccountName}}
	if err := own.Delete(ctx, other); !apierrors.IsForbidden(err) {
		t.Errorf("c1 deleting c2's ServiceAccount: %v, want Forbidden", err)
	}

	// Leaving releases the member's CIDR claims too.
	claim := &v1alpha1.CIDRClaim{ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace("c1"), Name: addrpolicy.CIDRClaimName(netip.MustParsePrefix("10.244.0.0/16"))},
		Spec: v1alpha1.CIDRClaimSpec{CIDR: "10.244.0.0/16", ClusterID: "c1"}}
	if err := own.Create(ctx, claim); err != nil {
		t.Fatalf("c1 claims its pod CIDR: %v", err)
	}

	// Leaving revokes every token of the identity: the join file's, the
	// rotated one, the one just used to leave.
	if err := broker.Leave(ctx, own, "c1"); err != nil {
		t.Fatal(err)
	}
	var claims v1alpha1.CIDRClaimList
	if err := b.Client.List(ctx, &claims, client.InNamespace(broker.Namespace("c1"))); err != nil || len(claims.Items) != 0 {
		t.Errorf("CIDR claims of c1 after leave: %d, %v; want none", len(claims.Items), err)
	}
	for what, tok := range map[string]string{"join file": tokenOf(t, join), "rotated": second} {
		unauthorized(t, tokenConfig(b.Config, tok), what+" token after leave")
	}
	// deploy-broker gives the ID a new identity for the next join.
	again, err := broker.EnsureClusterIdentity(ctx, b.Config, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease(clientFor(t, tokenConfig(b.Config, tokenOf(t, again))), "rejoined"); err != nil {
		t.Errorf("new identity after leave: %v", err)
	}
}

// unauthorized fails t unless cfg's requests are refused as Unauthorized
// within the API server's cache of accepted tokens (10 s).
func unauthorized(t *testing.T, cfg *rest.Config, what string) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(cfg)
	var err error
	werr := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err = cs.CoreV1().ServiceAccounts(broker.Namespace("c1")).List(ctx, metav1.ListOptions{})
		return apierrors.IsUnauthorized(err), nil
	})
	if werr != nil {
		t.Fatalf("%s: %v, want Unauthorized", what, err)
	}
}

func tokenConfig(base *rest.Config, token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(base)
	cfg.BearerToken = token
	return cfg
}

func tokenOf(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.BearerToken
}

func clientFor(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
