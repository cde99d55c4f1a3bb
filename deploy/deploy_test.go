package deploy_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/gateway"
	globalnetcontroller "github.com/causeway-net/causeway/pkg/globalnet/controller"
	"github.com/causeway-net/causeway/pkg/kube"
	mcscontroller "github.com/causeway-net/causeway/pkg/mcs/controller"
	"github.com/causeway-net/causeway/pkg/routeagent"
)

// valueSets are the chart values the tests render with: a cluster's
// required values over the defaults, and every value a user is likely
// to change changed.
func valueSets() map[string]map[string]any {
	return map[string]map[string]any{
		"defaults": {"clusterID": "c1", "podCIDRs": []any{"10.244.0.0/16"}, "serviceCIDRs": []any{"10.96.0.0/16"},
			"namespace": map[string]any{"create": true}},
		"tuned": {"clusterID": "east-1", "podCIDRs": []any{"10.1.0.0/16", "10.3.0.0/16"}, "serviceCIDRs": []any{"10.2.0.0/16"},
			"namespace": map[string]any{"create": true},
			"image":     map[string]any{"repository": "registry.example/causeway", "tag": "v9", "pullPolicy": "Never"},
			"logLevel":  "debug",
			"cable":     map[string]any{"driver": "ipsec", "mtu": 1300},
			"globalnet": map[string]any{"enabled": true},
			"gateway": map[string]any{"nodeSelector": map[string]any{"causeway.dev/gateway": nil, "role": "edge"}, "metricsPort": 19531,
				"extraArgs": []any{"--public-ip=203.0.113.7"}},
			"routeAgent":    map[string]any{"metricsBind": "node", "extraArgs": []any{"--iptables-backend=nft"}},
			"mcsController": map[string]any{"replicas": 2, "extraArgs": []any{"--workers=4"}},
		},
	}
}

func render(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := chart.Render(values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func convert[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, out, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return out
}

// commands are the daemons' commands by the path the workloads run.
var commands = map[string]func() *cobra.Command{
	"/usr/local/bin/gateway":        gateway.NewCommand,
	"/usr/local/bin/route-agent":    routeagent.NewCommand,
	"/usr/local/bin/mcs-controller": mcscontroller.NewCommand,
	"/usr/local/bin/globalnet":      globalnetcontroller.NewCommand,
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// Every workload runs a Causeway binary with flags that binary takes and
// values it accepts, once the container's variables are expanded the way
// the kubelet does (from the chart's ConfigMap and the downward API),
// under a ServiceAccount of the chart, whatever the values.
func TestWorkloadFlags(t *testing.T) {
	for name, values := range valueSets() {
		globalnet := false
		if g, ok := values["globalnet"].(map[string]any); ok {
			globalnet, _ = g["enabled"].(bool)
		}
		// Host-network daemons whose metrics the values put on the
		// node's address (metricsBind "node").
		onNode := map[string]bool{}
		for key, daemon := range map[string]string{"gateway": "gateway", "routeAgent": "route-agent"} {
			if v, ok := values[key].(map[string]any); ok && v["metricsBind"] == "node" {
				onNode[daemon] = true
			}
		}
		t.Run(name, func(t *testing.T) { testWorkloadFlags(t, render(t, values), globalnet, onNode) })
	}
}

func testWorkloadFlags(t *testing.T, objs []*unstructured.Unstructured, globalnet bool, onNode map[string]bool) {
	config := map[string]string{}
	accounts := map[string]bool{}
	var pods []struct {
		name string
		spec corev1.PodSpec
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ConfigMap":
			cm := convert[corev1.ConfigMap](t, o)
			for k, v := range cm.Data {
				config[cm.Name+"/"+k] = v
			}
		case "ServiceAccount":
			accounts[o.GetName()] = true
		case "DaemonSet":
			ds := convert[appsv1.DaemonSet](t, o)
			pods = append(pods, struct {
				name string
				spec corev1.PodSpec
			}{ds.Name, ds.Spec.Template.Spec})
		case "Deployment":
			d := convert[appsv1.Deployment](t, o)
			pods = append(pods, struct {
				name string
				spec corev1.PodSpec
			}{d.Name, d.Spec.Template.Spec})
		}
	}
	var ran []string
	for _, p := range pods {
		if !accounts[p.spec.ServiceAccountName] {
			t.Errorf("%s: ServiceAccount %q is not in the chart", p.name, p.spec.ServiceAccountName)
		}
		for _, c := range p.spec.Containers {
			if len(c.Command) != 1 || commands[c.Command[0]] == nil {
				t.Errorf("%s/%s: command %v is not a Causeway daemon", p.name, c.Name, c.Command)
				continue
			}
			env := map[string]string{}
			for _, e := range c.Env {
				switch {
				case e.ValueFrom == nil:
					env[e.Name] = e.Value
				case e.ValueFrom.ConfigMapKeyRef != nil:
					ref := e.ValueFrom.ConfigMapKeyRef
					v, ok := config[ref.Name+"/"+ref.Key]
					if !ok {
						t.Errorf("%s/%s: env %s: no key %s in ConfigMap %s", p.name, c.Name, e.Name, ref.Key, ref.Name)
					}
					env[e.Name] = v
				case e.ValueFrom.FieldRef != nil:
					env[e.Name] = map[string]string{"spec.nodeName": "node-1", "status.hostIP": "192.0.2.10"}[e.ValueFrom.FieldRef.FieldPath]
					if env[e.Name] == "" {
						t.Errorf("%s/%s: env %s: unexpected field %s", p.name, c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
					}
				}
			}
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = varRef.ReplaceAllStringFunc(a, func(m string) string {
					name := varRef.FindStringSubmatch(m)[1]
					v, ok := env[name]
					if !ok {
						t.Errorf("%s/%s: %q uses undefined variable %s", p.name, c.Name, a, name)
					}
					return v
				})
			}
			cmd := commands[c.Command[0]]()
			if err := cmd.ParseFlags(args); err != nil {
				t.Errorf("%s/%s: %s does not take %v: %v", p.name, c.Name, c.Command[0], args, err)
				continue
			}
			for _, must := range []string{"cluster-id", "node-name"} {
				if !cmd.Flags().Changed(must) {
					t.Errorf("%s/%s: --%s is not set", p.name, c.Name, must)
				}
			}
			// Metrics and pprof stay off a host-network Pod's node
			// interfaces, unless the values put them on the node's
			// address (status.hostIP) alone; the probes reach the health
			// listener.
			metrics, _ := cmd.Flags().GetString("metrics-addr")
			health, _ := cmd.Flags().GetString("health-addr")
			want := "127.0.0.1"
			if onNode[c.Name] {
				want = "192.0.2.10"
			}
			if host, _, _ := net.SplitHostPort(metrics); p.spec.HostNetwork && host != want {
				t.Errorf("%s/%s: host network with --metrics-addr %q, want %s", p.name, c.Name, metrics, want)
			}
			_, healthPort, _ := net.SplitHostPort(health)
			for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Port.String() != healthPort {
					t.Errorf("%s/%s: probe %+v does not use the --health-addr port %s", p.name, c.Name, probe, healthPort)
				}
			}
			ran = append(ran, c.Command[0])
		}
	}
	slices.Sort(ran)
	want := []string{"/usr/local/bin/gateway", "/usr/local/bin/mcs-controller", "/usr/local/bin/route-agent"}
	if globalnet { // the globalnet controller runs only with globalnet on
		want = []string{"/usr/local/bin/gateway", "/usr/local/bin/globalnet", "/usr/local/bin/mcs-controller", "/usr/local/bin/route-agent"}
	}
	if !slices.Equal(ran, want) {
		t.Errorf("workloads run %v, want %v", ran, want)
	}
}

// The gateway runs on gateway-labelled nodes and the route agent on every
// node, both on the host network and privileged (sysctls, tunnel devices,
// routes, netfilter, eBPF); the MCS controller needs neither and runs as
// Pod Security "restricted" allows.
func TestWorkloadPlacement(t *testing.T) {
	for _, o := range render(t, valueSets()["defaults"]) {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		switch o.GetName() {
		case "causeway-gateway", "causeway-route-agent":
			ds := convert[appsv1.DaemonSet](t, o)
			spec := ds.Spec.Template.Spec
			if !spec.HostNetwork || spec.Containers[0].SecurityContext == nil || spec.Containers[0].SecurityContext.Privileged == nil || !*spec.Containers[0].SecurityContext.Privileged {
				t.Errorf("%s: want hostNetwork and a privileged container", ds.Name)
			}
			sel := spec.NodeSelector["causeway.dev/gateway"]
			if (ds.Name == "causeway-gateway") != (sel == "true") {
				t.Errorf("%s: node selector %v", ds.Name, spec.NodeSelector)
			}
		case "causeway-mcs-controller":
			d := convert[appsv1.Deployment](t, o)
			pod := d.Spec.Template.Spec
			sc, psc := pod.Containers[0].SecurityContext, pod.SecurityContext
			if pod.HostNetwork || sc == nil || sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: must run unprivileged off the host network", d.Name)
			}
			// Pod Security "restricted".
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
				psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || sc.AllowPrivilegeEscalation == nil ||
				*sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("%s: not restricted: pod %+v container %+v", d.Name, psc, sc)
			}
		default:
			t.Errorf("unexpected workload %s %s", o.GetKind(), o.GetName())
		}
	}
}

// Every binding refers to a generated role (the chart's only roles, from
// templates/rbac) and binds it to its daemon's ServiceAccount only; every
// generated role is bound.
func TestBindingsMatchRoles(t *testing.T) {
	objs := render(t, valueSets()["defaults"])
	roles := map[string]bool{} // kind/namespace/name
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		if !strings.HasPrefix(o.GetName(), "causeway-") {
			t.Errorf("generated role %s: want a causeway-<daemon> name", o.GetName())
		}
		roles[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = false
	}
	for _, o := range objs {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		ns := ""
		switch o.GetKind() {
		case "RoleBinding":
			b := convert[rbacv1.RoleBinding](t, o)
			ref, subjects, ns = b.RoleRef, b.Subjects, b.Namespace
		case "ClusterRoleBinding":
			b := convert[rbacv1.ClusterRoleBinding](t, o)
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		key := ref.Kind + "/" + ns + "/" + ref.Name
		if _, ok := roles[key]; !ok {
			t.Errorf("%s %s: refers to %s, which make generate-rbac does not produce", o.GetKind(), o.GetName(), key)
		}
		roles[key] = true
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ref.Name, Namespace: kube.Namespace}}
		if ref.Name != o.GetName() || !slices.Equal(subjects, want) {
			t.Errorf("%s %s: subjects %v, want only %v", o.GetKind(), o.GetName(), subjects, want)
		}
	}
	for key, bound := range roles {
		if !bound {
			t.Errorf("generated role %s is not bound", key)
		}
	}
}

// Everything the chart renders passes the API server's validation and
// admission (a server-side dry-run apply, the CRDs installed first), then
// applies for real, twice, with every value set.
func TestChartApply(t *testing.T) {
	kc := kubetest.Start(t, "deploy") // installs the chart's CRDs
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sets := valueSets()
	for i, name := range slices.Sorted(maps.Keys(sets)) {
		objs := render(t, sets[name])
		// A dry run of namespaced objects needs their namespace.
		var nss []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				nss = append(nss, o)
			}
		}
		if err := kube.Apply(ctx, kc.Client, nss, false); err != nil {
			t.Fatal(err)
		}
		if err := kube.Apply(ctx, kc.Client, objs, true); err != nil {
			t.Fatalf("%s: dry run: %v", name, err)
		}
		var ds appsv1.DaemonSet
		if err := kc.Client.Get(ctx, client.ObjectKey{Namespace: kube.Namespace, Name: "causeway-gateway"}, &ds); i == 0 && !apierrors.IsNotFound(err) {
			t.Fatalf("after a dry run, the gateway DaemonSet: %v (want NotFound)", err)
		}
		for n := range 2 {
			if err := kube.Apply(ctx, kc.Client, objs, false); err != nil {
				t.Fatalf("%s: apply #%d: %v", name, n+1, err)
			}
		}
		for _, o := range objs {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(o.GroupVersionKind())
			if err := kc.Client.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, got); err != nil {
				t.Errorf("%s: %s %s/%s after apply: %v", name, o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
}

// access is one request a daemon's identity may or may not make.
type access struct {
	verb, group, resource, sub, ns string
}

func (a access) String() string {
	r := a.resource
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.group != "" {
		r += "." + a.group
	}
	ns := a.ns
	if ns == "" {
		ns = "(cluster)"
	}
	return fmt.Sprintf("%s %s in %s", a.verb, r, ns)
}

const sys = kube.Namespace

// Nobody's business: what no daemon may do.
var deniedToAll = []access{
	{"get", "", "secrets", "", sys}, {"list", "", "secrets", "", ""}, {"watch", "", "secrets", "", ""},
	{"update", "", "nodes", "", ""}, {"patch", "", "nodes", "", ""}, {"delete", "", "nodes", "", ""},
	{"create", "", "pods", "", "default"}, {"create", "", "pods", "exec", "default"},
	{"create", "", "serviceaccounts", "token", sys}, {"create", "", "namespaces", "", ""},
	{"update", "", "services", "", "default"}, {"delete", "", "services", "", "default"},
	{"create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""},
	{"escalate", "rbac.authorization.k8s.io", "roles", "", sys}, {"bind", "rbac.authorization.k8s.io", "clusterroles", "", ""},
	{"create", "causeway.dev", "endpoints", "", "default"}, {"delete", "coordination.k8s.io", "leases", "", sys},
	{"update", "coordination.k8s.io", "leases", "", "kube-system"},
	{"create", "apiextensions.k8s.io", "customresourcedefinitions", "", ""},
}

// What each daemon's code does (see the +kubebuilder:rbac markers) and a
// few neighbouring things it must not do.
var daemonAccess = map[string]struct{ allowed, denied []access }{
	"gateway": {
		allowed: []access{
			{"get", "coordination.k8s.io", "leases", "", sys}, {"create", "coordination.k8s.io", "leases", "", sys},
			{"update", "coordination.k8s.io", "leases", "", sys}, {"list", "coordination.k8s.io", "leases", "", sys},
			{"watch", "coordination.k8s.io", "leases", "", sys}, {"create", "", "events", "", sys}, {"patch", "", "events", "", sys},
			{"create", "causeway.dev", "clusters", "", sys}, {"update", "causeway.dev", "endpoints", "", sys},
			{"delete", "causeway.dev", "endpoints", "", sys}, {"list", "causeway.dev", "clusters", "", sys},
			{"update", "causeway.dev", "endpoints", "status", sys}, {"update", "causeway.dev", "clusters", "status", sys},
			{"create", "causeway.dev", "gateways", "", sys}, {"update", "causeway.dev", "gateways", "status", sys},
			{"delete", "causeway.dev", "gateways", "", sys}, {"get", "", "nodes", "", ""},
			{"list", "causeway.dev", "globalingresses", "", ""}, {"watch", "causeway.dev", "globalegresses", "", ""},
		},
		denied: []access{
			{"update", "causeway.dev", "globalegresses", "", ""}, {"list", "", "pods", "", ""},
			{"list", "", "nodes", "", ""}, {"list", "multicluster.x-k8s.io", "serviceimports", "", ""},
			{"list", "causeway.dev", "endpoints", "", ""}, {"create", "causeway.dev", "gateways", "", "default"},
			{"create", "events.k8s.io", "events", "", "default"}, {"update", "causeway.dev", "gateways", "", sys},
		},
	},
	"route-agent": {
		allowed: []access{
			{"get", "", "nodes", "", ""}, {"list", "causeway.dev", "endpoints", "", sys}, {"watch", "causeway.dev", "endpoints", "", sys},
			{"list", "multicluster.x-k8s.io", "serviceimports", "", ""}, {"watch", "multicluster.x-k8s.io", "serviceimports", "", ""},
			{"list", "discovery.k8s.io", "endpointslices", "", ""}, {"watch", "discovery.k8s.io", "endpointslices", "", ""},
		},
		denied: []access{
			{"create", "causeway.dev", "endpoints", "", sys}, {"update", "causeway.dev", "endpoints", "status", sys},
			{"list", "causeway.dev", "endpoints", "", "default"}, {"list", "", "nodes", "", ""},
			{"create", "discovery.k8s.io", "endpointslices", "", "default"}, {"get", "coordination.k8s.io", "leases", "", sys},
			{"create", "", "events", "", sys},
		},
	},
	"mcs-controller": {
		allowed: []access{
			{"list", "multicluster.x-k8s.io", "serviceexports", "", ""}, {"watch", "multicluster.x-k8s.io", "serviceexports", "", ""},
			{"patch", "multicluster.x-k8s.io", "serviceexports", "status", "demo"},
			{"create", "multicluster.x-k8s.io", "serviceimports", "", "demo"}, {"delete", "multicluster.x-k8s.io", "serviceimports", "", "demo"},
			{"patch", "multicluster.x-k8s.io", "serviceimports", "status", "demo"},
			{"create", "discovery.k8s.io", "endpointslices", "", "demo"}, {"update", "discovery.k8s.io", "endpointslices", "", "demo"},
			{"list", "", "services", "", ""}, {"watch", "", "namespaces", "", ""},
			{"create", "events.k8s.io", "events", "", "demo"}, {"patch", "events.k8s.io", "events", "", "demo"},
			{"get", "coordination.k8s.io", "leases", "", sys}, {"update", "coordination.k8s.io", "leases", "", sys},
			{"create", "", "events", "", sys},
			// globalnet: GlobalIngresses read (the globalnet controller
			// writes them), the gateway's mirrors read.
			{"list", "causeway.dev", "globalingresses", "", ""}, {"watch", "causeway.dev", "globalingresses", "", ""},
			{"list", "causeway.dev", "clusters", "", sys}, {"watch", "causeway.dev", "endpoints", "", sys},
		},
		denied: []access{
			{"create", "causeway.dev", "globalingresses", "", "demo"}, {"update", "causeway.dev", "globalingresses", "", "demo"},
			{"delete", "causeway.dev", "globalingresses", "", "demo"},
			{"update", "multicluster.x-k8s.io", "serviceexports", "", "demo"}, {"delete", "multicluster.x-k8s.io", "serviceexports", "", "demo"},
			{"create", "causeway.dev", "gateways", "", sys}, {"update", "causeway.dev", "endpoints", "status", sys},
			{"create", "causeway.dev", "clusters", "", sys}, {"list", "causeway.dev", "endpoints", "", "default"},
			{"get", "", "nodes", "", ""}, {"create", "", "events", "", "demo"}, {"list", "", "pods", "", ""},
		},
	},
	"globalnet": {
		allowed: []access{
			{"list", "multicluster.x-k8s.io", "serviceexports", "", ""}, {"watch", "multicluster.x-k8s.io", "serviceexports", "", ""},
			{"list", "", "services", "", ""}, {"watch", "discovery.k8s.io", "endpointslices", "", ""},
			{"get", "causeway.dev", "globalingresses", "", "demo"}, {"list", "causeway.dev", "globalingresses", "", ""},
			{"create", "causeway.dev", "globalingresses", "", "demo"}, {"update", "causeway.dev", "globalingresses", "", "demo"},
			{"delete", "causeway.dev", "globalingresses", "", "demo"},
			// namespace egress: labelled namespaces, their pods' addresses,
			// the cluster-scoped GlobalEgresses.
			{"watch", "", "namespaces", "", ""}, {"list", "", "pods", "", ""}, {"watch", "", "pods", "", ""},
			{"get", "causeway.dev", "globalegresses", "", ""}, {"create", "causeway.dev", "globalegresses", "", ""},
			{"update", "causeway.dev", "globalegresses", "", ""}, {"delete", "causeway.dev", "globalegresses", "", ""},
			{"list", "causeway.dev", "clusters", "", sys}, {"watch", "causeway.dev", "clusters", "", sys},
			{"create", "events.k8s.io", "events", "", "demo"}, {"patch", "events.k8s.io", "events", "", "demo"},
			{"get", "coordination.k8s.io", "leases", "", sys}, {"update", "coordination.k8s.io", "leases", "", sys},
			{"create", "", "events", "", sys},
		},
		denied: []access{
			{"patch", "multicluster.x-k8s.io", "serviceexports", "status", "demo"},
			{"create", "multicluster.x-k8s.io", "serviceimports", "", "demo"},
			{"create", "discovery.k8s.io", "endpointslices", "", "demo"},
			{"update", "causeway.dev", "clusters", "", sys}, {"list", "causeway.dev", "clusters", "", "default"},
			{"list", "causeway.dev", "endpoints", "", sys}, {"get", "", "nodes", "", ""}, {"update", "", "pods", "", "demo"},
			{"update", "", "namespaces", "", ""}, {"get", "", "secrets", "", sys},
		},
	},
}

// Each daemon's ServiceAccount, installed from the embedded chart and
// authenticated with a TokenRequest token as the lab and a Pod would,
// may do what its code does and nothing of the rest: the API server's
// answer to a SelfSubjectAccessReview, plus real requests that must be
// Forbidden (not Unauthorized: the token works). That the daemons work
// with these rights is shown by their own integration tests, which run
// with these identities, and by the lab e2e.
func TestDaemonIdentities(t *testing.T) {
	kc := kubetest.Start(t, "identities")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "causeway-broker", Namespace: sys}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	cfgs := map[string]*kubernetes.Clientset{}
	for _, d := range kube.Daemons {
		cfg := kc.DaemonConfig(t, d) // installs the identities first
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfgs[d] = cs
	}
	for _, o := range []client.Object{secret, node} {
		if err := kc.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range kube.Daemons {
		t.Run(d, func(t *testing.T) {
			cs := cfgs[d]
			can := func(a access) bool {
				t.Helper()
				r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Namespace: a.ns}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatalf("access review %s: %v", a, err)
				}
				return r.Status.Allowed
			}
			for _, a := range daemonAccess[d].allowed {
				if !can(a) {
					t.Errorf("may not %s, which its code needs", a)
				}
			}
			for _, a := range slices.Concat(deniedToAll, daemonAccess[d].denied) {
				if can(a) {
					t.Errorf("may %s", a)
				}
			}

			forbidden := func(what string, err error) {
				t.Helper()
				if !apierrors.IsForbidden(err) {
					t.Errorf("%s: %v, want Forbidden", what, err)
				}
			}
			_, err := cs.CoreV1().Secrets(sys).Get(ctx, secret.Name, metav1.GetOptions{})
			forbidden("read the broker Secret", err)
			_, err = cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			forbidden("list Secrets", err)
			_, err = cs.CoreV1().Nodes().Patch(ctx, node.Name, "application/merge-patch+json",
				[]byte(`{"metadata":{"labels":{"causeway.dev/gateway":"true"}}}`), metav1.PatchOptions{})
			forbidden("label a Node", err)
			_, err = cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "x"}}}}, metav1.CreateOptions{})
			forbidden("create a Pod", err)
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}}, metav1.CreateOptions{})
			forbidden("bind cluster-admin", err)
			if _, err := cs.Discovery().ServerVersion(); err != nil {
				t.Errorf("server version: %v", err)
			}
		})
	}
}
