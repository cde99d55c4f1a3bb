package chart

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/causeway-net/causeway/pkg/kube"
)

// chartDir is the chart's source directory, which `helm lint` reads.
const chartDir = "../../deploy/helm/causeway"

// clusterValues are the values a member cluster must give.
func clusterValues() map[string]any {
	return map[string]any{"clusterID": "c1", "podCIDRs": []any{"10.244.0.0/16"}, "serviceCIDRs": []any{"10.96.0.0/16"}}
}

// tunedValues change every value a user is likely to.
func tunedValues() map[string]any {
	return map[string]any{
		"clusterID": "east-1", "podCIDRs": []any{"10.1.0.0/16", "fd00:1::/56"}, "serviceCIDRs": []any{"10.2.0.0/16"},
		"namespace": map[string]any{"create": true},
		"image":     map[string]any{"repository": "registry.example/causeway", "tag": "v9", "pullPolicy": "Never"},
		"cable":     map[string]any{"driver": "ipsec", "mtu": 1300},
		"globalnet": map[string]any{"enabled": true},
		"logLevel":  "debug",
		"gateway": map[string]any{"nodeSelector": map[string]any{"role": "edge"}, "metricsPort": 19531, "healthPort": 19541,
			"extraArgs": []any{"--public-ip=203.0.113.7"}},
		"routeAgent": map[string]any{"metricsBind": "node", "extraArgs": []any{"--iptables-backend=nft"},
			"resources": map[string]any{"requests": map[string]any{"cpu": "10m"}}},
		"mcsController": map[string]any{"replicas": 2},
		"monitoring": map[string]any{"podMonitors": map[string]any{"enabled": true, "interval": "15s"},
			"prometheusRule": map[string]any{"enabled": true}, "grafanaDashboard": map[string]any{"enabled": true, "annotations": map[string]any{"grafana_folder": "Causeway"}}},
	}
}

func mustRender(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Render(values)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// container returns the first container of a workload's Pod template.
func container(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		t.Fatalf("%s %s: no containers", o.GetKind(), o.GetName())
	}
	return cs[0].(map[string]any)
}

func args(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	a, _, _ := unstructured.NestedStringSlice(container(t, o), "args")
	return a
}

func TestRenderOrderAndNamespace(t *testing.T) {
	for _, create := range []bool{false, true} {
		v := clusterValues()
		v["namespace"] = map[string]any{"create": create}
		objs := mustRender(t, v)
		var kinds []string
		for _, o := range objs {
			clusterScoped := []string{"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
			if !slices.Contains(clusterScoped, o.GetKind()) && o.GetNamespace() != kube.Namespace {
				t.Errorf("%s %s in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
			}
			if len(kinds) == 0 || kinds[len(kinds)-1] != o.GetKind() {
				kinds = append(kinds, o.GetKind())
			}
		}
		want := []string{"ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ConfigMap", "DaemonSet", "Deployment"}
		if create {
			want = append([]string{"Namespace"}, want...)
		}
		if !slices.Equal(kinds, want) {
			t.Errorf("namespace.create=%v: kinds in order %v, want %v", create, kinds, want)
		}
	}
}

func TestRenderDefaults(t *testing.T) {
	objs := mustRender(t, clusterValues())
	cm := find(t, objs, "ConfigMap", "causeway-config")
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if want := map[string]string{"cluster-id": "c1", "pod-cidrs": "10.244.0.0/16", "service-cidrs": "10.96.0.0/16"}; !reflect.DeepEqual(data, want) {
		t.Errorf("config %v, want %v", data, want)
	}
	gw := find(t, objs, "DaemonSet", "causeway-gateway")
	for _, a := range []string{"--cable-driver=wireguard", "--port=4500", "--metrics-addr=127.0.0.1:9531", "--health-addr=:9541", "--log-level=info"} {
		if !slices.Contains(args(t, gw), a) {
			t.Errorf("gateway args %v lack %s", args(t, gw), a)
		}
	}
	for _, a := range args(t, gw) {
		if strings.HasPrefix(a, "--globalnet") || strings.HasPrefix(a, "--mtu") || strings.HasPrefix(a, "--ipsec") {
			t.Errorf("gateway arg %s without globalnet, mtu or ipsec", a)
		}
	}
	sel, _, _ := unstructured.NestedStringMap(gw.Object, "spec", "template", "spec", "nodeSelector")
	if !reflect.DeepEqual(sel, map[string]string{"causeway.dev/gateway": "true"}) {
		t.Errorf("gateway node selector %v", sel)
	}
	if img, _, _ := unstructured.NestedString(container(t, gw), "image"); img != "ghcr.io/causeway-net/causeway:0.1.0" {
		t.Errorf("image %s, want the chart's appVersion as tag", img)
	}
	ra := find(t, objs, "DaemonSet", "causeway-route-agent")
	for _, a := range []string{"--tunnel-mtu=1420"} {
		if !slices.Contains(args(t, ra), a) {
			t.Errorf("route agent args %v lack %s", args(t, ra), a)
		}
	}
}

// TestRenderWithoutClusterID: without a clusterID the daemons get an
// empty --cluster-id and read the About API.
func TestRenderWithoutClusterID(t *testing.T) {
	v := clusterValues()
	delete(v, "clusterID")
	cm := find(t, mustRender(t, v), "ConfigMap", "causeway-config")
	if id, ok, _ := unstructured.NestedString(cm.Object, "data", "cluster-id"); !ok || id != "" {
		t.Errorf("cluster-id %q (set %v), want empty", id, ok)
	}
}

func TestRenderTuned(t *testing.T) {
	objs := mustRender(t, tunedValues())
	find(t, objs, "Namespace", kube.Namespace)
	cm := find(t, objs, "ConfigMap", "causeway-config")
	if v, _, _ := unstructured.NestedString(cm.Object, "data", "pod-cidrs"); v != "10.1.0.0/16,fd00:1::/56" {
		t.Errorf("pod-cidrs %q", v)
	}
	gw := find(t, objs, "DaemonSet", "causeway-gateway")
	ga := args(t, gw)
	for _, a := range []string{"--cable-driver=ipsec", "--port=500", "--mtu=1300",
		"--globalnet", "--metrics-addr=127.0.0.1:19531", "--health-addr=:19541", "--log-level=debug"} {
		if !slices.Contains(ga, a) {
			t.Errorf("gateway args %v lack %s", ga, a)
		}
	}
	if ga[len(ga)-1] != "--public-ip=203.0.113.7" {
		t.Errorf("gateway extra args not last: %v", ga)
	}
	port, _, _ := unstructured.NestedInt64(container(t, gw), "livenessProbe", "httpGet", "port")
	if port != 19541 {
		t.Errorf("gateway liveness probe on port %d", port)
	}
	// A saturated node does not get a busy daemon restarted: a minute of
	// unanswered liveness probes, 5 s each.
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" && o.GetKind() != "Deployment" {
			continue
		}
		live, _, _ := unstructured.NestedMap(container(t, o), "livenessProbe")
		period, _, _ := unstructured.NestedInt64(live, "periodSeconds")
		timeout, _, _ := unstructured.NestedInt64(live, "timeoutSeconds")
		failures, _, _ := unstructured.NestedInt64(live, "failureThreshold")
		if timeout < 5 || period*failures < 60 {
			t.Errorf("%s %s: liveness probe %v, want a timeout of 5 s and a minute of failures", o.GetKind(), o.GetName(), live)
		}
	}
	sel, _, _ := unstructured.NestedStringMap(gw.Object, "spec", "template", "spec", "nodeSelector")
	// Helm merges maps: the default label stays unless set to null.
	if !reflect.DeepEqual(sel, map[string]string{"causeway.dev/gateway": "true", "role": "edge"}) {
		t.Errorf("gateway node selector %v", sel)
	}
	vols, _, _ := unstructured.NestedSlice(gw.Object, "spec", "template", "spec", "volumes")
	var secrets []string
	for _, v := range vols {
		if s, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok {
			secrets = append(secrets, s)
		}
	}
	if !slices.Equal(secrets, []string{"causeway-broker"}) {
		t.Errorf("gateway mounts Secrets %v, want causeway-broker alone", secrets)
	}
	ra := find(t, objs, "DaemonSet", "causeway-route-agent")
	// The route agents follow the gateway's reachability verdict on the
	// gateway's health port.
	for _, a := range []string{"--tunnel-mtu=1300", "--iptables-backend=nft", "--metrics-addr=$(HOST_IP):9532", "--gateway-health-port=19541"} {
		if !slices.Contains(args(t, ra), a) {
			t.Errorf("route agent args %v lack %s", args(t, ra), a)
		}
	}
	mc := find(t, objs, "Deployment", "causeway-mcs-controller")
	if n, _, _ := unstructured.NestedInt64(mc.Object, "spec", "replicas"); n != 2 {
		t.Errorf("mcs controller replicas %d", n)
	}
	if img, _, _ := unstructured.NestedString(container(t, mc), "image"); img != "registry.example/causeway:v9" {
		t.Errorf("image %s", img)
	}
}

// TestGlobalnetWorkload: the globalnet controller's Deployment is
// rendered only with globalnet.enabled, runs /usr/local/bin/globalnet
// under its own ServiceAccount and mounts no broker credentials (the
// global CIDR claim stays with the gateway); its identity is rendered
// either way, like every daemon's.
func TestGlobalnetWorkload(t *testing.T) {
	off := mustRender(t, clusterValues())
	for _, o := range off {
		if o.GetKind() == "Deployment" && o.GetName() == "causeway-globalnet" {
			t.Error("globalnet Deployment rendered with globalnet off")
		}
	}
	find(t, off, "ServiceAccount", "causeway-globalnet")
	find(t, off, "ClusterRole", "causeway-globalnet")
	find(t, off, "Role", "causeway-globalnet")

	v := clusterValues()
	v["globalnet"] = map[string]any{"enabled": true, "replicas": 2}
	d := find(t, mustRender(t, v), "Deployment", "causeway-globalnet")
	if sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName"); sa != "causeway-globalnet" {
		t.Errorf("ServiceAccount %q", sa)
	}
	if n, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); n != 2 {
		t.Errorf("replicas %d", n)
	}
	if vols, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes"); len(vols) != 0 {
		t.Errorf("volumes %v, want none", vols)
	}
	if cmd, _, _ := unstructured.NestedStringSlice(container(t, d), "command"); !slices.Equal(cmd, []string{"/usr/local/bin/globalnet"}) {
		t.Errorf("command %v", cmd)
	}
	for _, a := range []string{"--metrics-addr=:9533", "--health-addr=:9543", "--log-level=info"} {
		if !slices.Contains(args(t, d), a) {
			t.Errorf("globalnet args %v lack %s", args(t, d), a)
		}
	}
}

// Each cable driver gets its own port and MTU unless the values set them.
func TestCableDefaults(t *testing.T) {
	for driver, want := range map[string][2]string{"wireguard": {"4500", "1420"}, "vxlan": {"4789", "1450"}, "ipsec": {"500", "1400"}} {
		v := clusterValues()
		v["cable"] = map[string]any{"driver": driver}
		objs := mustRender(t, v)
		if ga := args(t, find(t, objs, "DaemonSet", "causeway-gateway")); !slices.Contains(ga, "--port="+want[0]) {
			t.Errorf("%s: gateway args %v, want --port=%s", driver, ga, want[0])
		}
		if ra := args(t, find(t, objs, "DaemonSet", "causeway-route-agent")); !slices.Contains(ra, "--tunnel-mtu="+want[1]) {
			t.Errorf("%s: route agent args %v, want --tunnel-mtu=%s", driver, ra, want[1])
		}
	}
}

// Values the schema refuses give an error naming the value and why.
func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(v map[string]any)
		want []string // all in the error
	}{
		{"cluster ID not a DNS label", func(v map[string]any) { v["clusterID"] = "Bad_ID" }, []string{"/clusterID", "does not match pattern"}},
		{"no pod CIDR", func(v map[string]any) { v["podCIDRs"] = []any{} }, []string{"/podCIDRs", "minItems"}},
		{"not a CIDR", func(v map[string]any) { v["serviceCIDRs"] = []any{"10.96.0.0"} }, []string{"/serviceCIDRs/0"}},
		{"CIDR as a string", func(v map[string]any) { v["podCIDRs"] = "10.244.0.0/16" }, []string{"/podCIDRs", "want array"}},
		{"unknown cable", func(v map[string]any) { v["cable"] = map[string]any{"driver": "gre"} }, []string{"/cable/driver", "wireguard"}},
		{"ipsec on another port", func(v map[string]any) {
			v["cable"] = map[string]any{"driver": "ipsec", "port": 4500}
		},
			[]string{"/cable/port"}},
		{"port out of range", func(v map[string]any) { v["cable"] = map[string]any{"port": 70000} }, []string{"/cable/port", "maximum"}},
		{"tiny MTU", func(v map[string]any) { v["cable"] = map[string]any{"mtu": 100} }, []string{"/cable/mtu"}},
		{"a ClusterSet setting is no chart value", func(v map[string]any) { v["vipRange"] = "100.64.0.0/16" }, []string{"vipRange"}},
		{"nor is the supernet", func(v map[string]any) { v["globalnet"] = map[string]any{"enabled": true, "supernet": "242.0.0.0/8"} }, []string{"/globalnet", "supernet"}},
		{"misspelt value", func(v map[string]any) { v["globalnet"] = map[string]any{"enable": true} }, []string{"/globalnet", "enable"}},
		{"unknown top-level value", func(v map[string]any) { v["clusterId"] = "c1" }, []string{"clusterId"}},
		{"zero replicas", func(v map[string]any) { v["mcsController"] = map[string]any{"replicas": 0} }, []string{"/mcsController/replicas", "minimum"}},
		{"extra arg not a flag", func(v map[string]any) { v["gateway"] = map[string]any{"extraArgs": []any{"public-ip=1.2.3.4"}} },
			[]string{"/gateway/extraArgs/0"}},
		{"bad log level", func(v map[string]any) { v["logLevel"] = "verbose" }, []string{"/logLevel"}},
		{"metrics on every interface", func(v map[string]any) { v["gateway"] = map[string]any{"metricsBind": "all"} }, []string{"/gateway/metricsBind"}},
		{"scrape interval not a duration", func(v map[string]any) {
			v["monitoring"] = map[string]any{"podMonitors": map[string]any{"interval": "30"}}
		}, []string{"/monitoring/podMonitors/interval"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := clusterValues()
			tc.set(v)
			_, err := Render(v)
			if err == nil {
				t.Fatal("rendered")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// The chart renders into causeway-system only, which its generated Roles
// name.
func TestOtherNamespaceRefused(t *testing.T) {
	_, err := render(clusterValues(), "default")
	if err == nil || !strings.Contains(err.Error(), "causeway-system only") {
		t.Errorf("render into default: %v, want a refusal naming causeway-system", err)
	}
}

// `helm lint` finds nothing to warn about, with the defaults plus a
// cluster's required values and with every value changed; without the
// required values it fails on the schema.
func TestLint(t *testing.T) {
	for name, v := range map[string]map[string]any{"defaults": clusterValues(), "tuned": tunedValues()} {
		res := lint.RunAll(chartDir, v, kube.Namespace)
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: %v", name, m)
			}
		}
	}
	res := lint.RunAll(chartDir, nil, kube.Namespace)
	if res.HighestSeverity != support.ErrorSev {
		t.Errorf("lint without a cluster ID: highest severity %d, messages %v", res.HighestSeverity, res.Messages)
	}
}

// The identities are the same whatever the cluster's values, so
// InstallIdentities may render them with IdentityValues.
func TestIdentitiesIndependentOfValues(t *testing.T) {
	want := Identities(mustRender(t, IdentityValues()))
	got := Identities(mustRender(t, tunedValues()))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("identities depend on the values:\n%v\n%v", got, want)
	}
	accounts := map[string]bool{}
	for _, o := range want {
		if o.GetKind() == "ServiceAccount" && o.GetNamespace() == kube.Namespace {
			accounts[o.GetName()] = true
		}
	}
	for _, d := range kube.Daemons {
		if !accounts[kube.ServiceAccountName(d)] {
			t.Errorf("no ServiceAccount %s", kube.ServiceAccountName(d))
		}
	}
	if want[0].GetKind() != "Namespace" || want[0].GetName() != kube.Namespace {
		t.Errorf("first identity object is %s %s, want the namespace", want[0].GetKind(), want[0].GetName())
	}
}

func TestParseDocuments(t *testing.T) {
	objs, err := parseDocuments([]byte("# comment only\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n---\n\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa, namespace: x}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if want := "Namespace/x ServiceAccount/sa"; strings.Join(got, " ") != want {
		t.Errorf("parsed %v, want %s", got, want)
	}
	if _, err := parseDocuments([]byte("apiVersion: v1\nmetadata: {name: nokind}\n")); err == nil {
		t.Error("a document without kind parsed")
	}
}
