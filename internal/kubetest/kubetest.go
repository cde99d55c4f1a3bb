// Package kubetest starts real Kubernetes control planes (etcd +
// kube-apiserver, RBAC on, Causeway's and the MCS API's CRDs installed)
// for tests, and tears them down when the test ends. Several may run at
// once: a test of the ClusterSet starts one per cluster plus the broker.
//
// The binaries come from hack/k8s-binaries.sh ($CAUSEWAY_K8S_BIN). Under
// `go test -short` tests that need a control plane are skipped; otherwise
// missing binaries fail the test.
//
// Beside the control planes: Daemons runs a test's in-process daemons,
// and objects.go writes what a cluster's other actors would (a user's
// Services and ServiceExports, the EndpointSlice controller's slices, the
// gateway's mirrored Cluster) and polls for the outcome (Eventually).
package kubetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/lab/controlplane"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/kube"
)

// Cluster is a running control plane for one test.
type Cluster struct {
	*controlplane.ControlPlane
	// Config is an admin client configuration.
	Config *rest.Config
	// Client is an admin controller-runtime client with kube.NewScheme.
	Client client.Client
	// Kube is an admin clientset.
	Kube kubernetes.Interface
}

// Option changes how a test control plane starts.
type Option func(*controlplane.Config)

// WithComponents also runs kube-controller-manager and/or kube-scheduler.
func WithComponents(cs ...controlplane.Component) Option {
	return func(c *controlplane.Config) { c.Components = append(c.Components, cs...) }
}

// WithServiceCIDR sets the service CIDR.
func WithServiceCIDR(cidr string) Option {
	return func(c *controlplane.Config) { c.ServiceCIDR = cidr }
}

// WithClusterEgress sends the API server's traffic to the cluster through
// an HTTP CONNECT proxy on the control plane's EgressSocket, which the
// test serves (e.g. a lab kubelet with Config.EgressSocket).
func WithClusterEgress() Option {
	return func(c *controlplane.Config) { c.ClusterEgress = true }
}

// Start starts a control plane named name for t and stops it when t ends.
func Start(t testing.TB, name string, opts ...Option) *Cluster {
	t.Helper()
	skipIfShort(t)
	c, err := start(t, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartMany starts one control plane per name, in parallel.
func StartMany(t testing.TB, names ...string) map[string]*Cluster {
	t.Helper()
	skipIfShort(t)
	out := make(map[string]*Cluster, len(names))
	errs := make([]error, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() {
			c, err := start(t, n)
			mu.Lock()
			defer mu.Unlock()
			out[n], errs[i] = c, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

func skipIfShort(t testing.TB) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver; skipped under -short")
	}
}

// start may run off the test goroutine: it reports errors instead of
// failing t, and only registers cleanups. Ports are picked free and then
// handed to the processes, so on a busy machine another process can take
// one in between: a failed start is retried with fresh ports.
func start(t testing.TB, name string, opts ...Option) (*Cluster, error) {
	var errs []error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startOnce(t, name, opts...)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func startOnce(t testing.TB, name string, opts ...Option) (*Cluster, error) {
	cfg := controlplane.Config{Name: name, Dir: filepath.Join(t.TempDir(), name)}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := controlplane.Start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start control plane %s: %w", name, err)
	}
	t.Cleanup(cp.Stop)
	c, err := newCluster(cp)
	if err != nil {
		return nil, err
	}
	if err := kube.InstallCRDs(ctx, c.Config); err != nil {
		return nil, fmt.Errorf("control plane %s: %w", name, err)
	}
	return c, nil
}

func newCluster(cp *controlplane.ControlPlane) (*Cluster, error) {
	cfg, err := cp.RESTConfig()
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Cluster{ControlPlane: cp, Config: cfg, Client: cl, Kube: kc}, nil
}

// ClientAs returns a client acting as a certificate identity (RBAC applies).
func (c *Cluster) ClientAs(t testing.TB, user string, groups ...string) client.Client {
	t.Helper()
	cfg, err := c.UserConfig(user, groups)
	if err != nil {
		t.Fatal(err)
	}
	return clientOf(t, cfg)
}

// KubeconfigClient returns a client acting as the identity of kubeconfig
// (e.g. a member's broker identity from pkg/broker, or its join file).
func KubeconfigClient(t testing.TB, kubeconfig []byte) client.Client {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return clientOf(t, cfg)
}

// clientOf is a client of cfg with kube.NewScheme.
func clientOf(t testing.TB, cfg *rest.Config) client.Client {
	t.Helper()
	cl, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// Tenant returns a client of a user ("tenant-<ns>", no group) who may do
// anything with the namespaced resources of namespace ns and nothing
// elsewhere: a tenant of the cluster as RBAC sees one. It creates ns if
// needed, binds the rights and waits until the API server grants them.
func (c *Cluster) Tenant(t testing.TB, ns string) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	user := "tenant-" + ns
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}},
	} {
		if err := c.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices"}}}
		if err := c.Client.Create(ctx, r); err != nil {
			return false, err
		}
		return r.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("tenant %s never granted: %v", user, err)
	}
	return c.ClientAs(t, user)
}

// BinariesPresent reports whether the control-plane binaries exist.
func BinariesPresent() bool {
	_, err := os.Stat(filepath.Join(controlplane.DefaultBinDir(), "kube-apiserver"))
	return err == nil
}

// DaemonConfig gives the daemons their identities in the cluster, as the
// Helm chart does (chart.InstallIdentities: namespace causeway-system, a
// ServiceAccount per daemon, the least-privilege roles generated into the
// chart's templates/rbac), and returns a client configuration acting as
// daemon's ServiceAccount (a TokenRequest token): a daemon tested with it has
// exactly the rights an installed one has. Create causeway-system before,
// if the test creates it itself.
func (c *Cluster) DaemonConfig(t testing.TB, daemon string) *rest.Config {
	t.Helper()
	token := c.daemonToken(t, daemon)
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = token
	return cfg
}

// DaemonKubeconfig is DaemonConfig written as a kubeconfig file that
// reaches the API server at server (e.g. through a forwarder).
func (c *Cluster) DaemonKubeconfig(t testing.TB, daemon, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), kube.ServiceAccountName(daemon)+".kubeconfig")
	if err := c.TokenKubeconfig(path, server, c.daemonToken(t, daemon)); err != nil {
		t.Fatal(err)
	}
	return path
}

func (c *Cluster) daemonToken(t testing.TB, daemon string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := chart.InstallIdentities(ctx, c.Client); err != nil {
		t.Fatal(err)
	}
	token, err := kube.ServiceAccountToken(ctx, c.Config, kube.Namespace, kube.ServiceAccountName(daemon), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return token
}
