package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/lab"
	"github.com/causeway-net/causeway/lab/netlab"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/install"
	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestLabJoin installs Causeway as a user does: `lab up --no-install`,
// then the commands it prints — the built causewayctl's deploy-broker,
// and join --join-file per cluster, each waiting until the daemons are
// Ready and the tunnel is up —, then whereami exported from c1 and c2
// answers c3 by clusterset VIP and name from both. `uninstall` of c2
// leaves nothing of Causeway in c2 (objects, CRDs, cluster-scoped RBAC,
// admission objects, node labels, Leases, multicluster EndpointSlices,
// and on its nodes no device, route, chain, table or BPF pin) nor of c2
// in the broker but the namespace and roles deploy-broker made (its
// ServiceAccount, and so its tokens, revoked); c3 is then answered by c1
// alone.
func TestLabJoin(t *testing.T) {
	l := StartLab(t, "--no-install")
	ctx := context.Background()
	st, err := lab.Load(l.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Members() {
		if err := l.Client(c).Get(ctx, client.ObjectKey{Name: kube.Namespace}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s before join: namespace %s: %v, want NotFound", c, kube.Namespace, err)
		}
		l.checkNoGatewayLabel(ctx, c)
	}

	args, err := st.DeployBrokerArgs()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := l.causewayctl(args...); err != nil {
		t.Fatalf("deploy-broker: %v\n%s", err, out)
	}
	for i, c := range st.Members() {
		args, err := st.JoinArgs(c)
		if err != nil {
			t.Fatal(err)
		}
		out, err := l.causewayctl(args...)
		t.Logf("join %s:\n%s", c, out)
		if err != nil {
			t.Fatalf("join %s: %v", c, err)
		}
		want := "tunnel: gateway n0 active; no other cluster's gateway in the broker yet"
		if i > 0 {
			want = " connected"
		}
		if !strings.Contains(out, want) || !strings.Contains(out, "cluster "+c+": the tunnel is up") {
			t.Errorf("join %s: output lacks %q and the tunnel up", c, want)
		}
	}

	// CoreDNS syncs its clusterset.local zone once join has installed
	// the MCS API's CRDs.
	for _, c := range st.Members() {
		waitForWithin(t, 2*time.Minute, c+": CoreDNS Ready after join", func() error {
			var pods corev1.PodList
			if err := l.Client(c).List(ctx, &pods, client.InNamespace("kube-system"), client.MatchingLabels{"k8s-app": "kube-dns"}); err != nil {
				return err
			}
			for i := range pods.Items {
				if kube.PodReady(&pods.Items[i]) {
					return nil
				}
			}
			return fmt.Errorf("%d CoreDNS Pods, none Ready", len(pods.Items))
		})
	}
	for _, c := range []string{"c1", "c2"} {
		if out, err := l.causewayctl("export", "demo/whereami", "--cluster", c); err != nil {
			t.Fatalf("export from %s: %v\n%s", c, err, out)
		}
	}
	vip := l.importVIP(ctx, "c3", "whereami")
	for _, url := range []string{"http://" + vip, "http://whereami.demo.svc.clusterset.local"} {
		l.curlClusters("c3/demo/client", url, []string{"c1", "c2"})
	}

	args, err = st.UninstallArgs("c2")
	if err != nil {
		t.Fatal(err)
	}
	out, err := l.causewayctl(args...)
	t.Logf("uninstall c2:\n%s", out)
	if err != nil {
		t.Fatalf("uninstall c2: %v", err)
	}
	l.checkNothingLeft(ctx, st, "c2")
	waitForWithin(t, time.Minute, "c3's whereami slices from c1 only", func() error {
		sources, err := sliceSources(ctx, l.Client("c3"))
		if err != nil || len(sources) != 1 || !sources["c1"] {
			return fmt.Errorf("sources %v (%v)", sources, err)
		}
		return nil
	})
	if after := l.importVIP(ctx, "c3", "whereami"); after != vip {
		t.Errorf("c3's VIP after c2 left: %s, want %s", after, vip)
	}
	l.curlClusters("c3/demo/client", "http://whereami.demo.svc.clusterset.local", []string{"c1"})
}

// curlClusters curls url from pod until every cluster of want has
// answered, and fails on an answer from another cluster.
func (l *Lab) curlClusters(pod, url string, want []string) {
	l.t.Helper()
	seen := map[string]bool{}
	var errs []string
	for i := 0; i < 80 && len(seen) < len(want); i++ {
		id, err := l.whereami(pod, url)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !strings.Contains(strings.Join(want, " "), id.Cluster) {
			l.t.Errorf("%s from %s answered by %s, want only %v", url, pod, id.Cluster, want)
		}
		seen[id.Cluster] = true
	}
	if len(seen) < len(want) {
		l.t.Errorf("%s from %s: answered by %v, want all of %v; errors: %v", url, pod, seen, want, errs)
	}
}

func (l *Lab) checkNoGatewayLabel(ctx context.Context, cluster string) {
	l.t.Helper()
	var nodes corev1.NodeList
	if err := l.Client(cluster).List(ctx, &nodes, client.HasLabels{install.GatewayLabel}); err != nil || len(nodes.Items) > 0 {
		l.t.Errorf("%s: nodes labelled %s: %d (%v), want none", cluster, install.GatewayLabel, len(nodes.Items), err)
	}
}

// checkNothingLeft waits until nothing of Causeway is left in cluster
// (namespace deletion and CRD removal finish asynchronously), in the
// broker of cluster, and in its nodes' kernels.
func (l *Lab) checkNothingLeft(ctx context.Context, st *lab.State, cluster string) {
	l.t.Helper()
	c := l.Client(cluster)
	objs, err := chart.Render(st.ChartValues(mustCluster(l.t, st, cluster)))
	if err != nil {
		l.t.Fatal(err)
	}
	crds, err := kube.CRDs()
	if err != nil {
		l.t.Fatal(err)
	}
	waitForWithin(l.t, 3*time.Minute, cluster+": nothing of Causeway left", func() error {
		for _, o := range objs {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(o.GroupVersionKind())
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), u); !apierrors.IsNotFound(err) {
				return fmt.Errorf("%s %s: %v, want NotFound", o.GetKind(), client.ObjectKeyFromObject(o), err)
			}
		}
		for _, crd := range crds {
			if kube.SharedCRD(crd) {
				continue // the About API's: uninstall leaves it
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd.DeepCopy()); !apierrors.IsNotFound(err) {
				return fmt.Errorf("CRD %s: %v, want NotFound", crd.Name, err)
			}
		}
		var left []string
		for kind, list := range map[string]client.ObjectList{
			"ClusterRole": &rbacv1.ClusterRoleList{}, "ClusterRoleBinding": &rbacv1.ClusterRoleBindingList{},
			"ValidatingWebhookConfiguration":   &admissionregistrationv1.ValidatingWebhookConfigurationList{},
			"MutatingWebhookConfiguration":     &admissionregistrationv1.MutatingWebhookConfigurationList{},
			"ValidatingAdmissionPolicy":        &admissionregistrationv1.ValidatingAdmissionPolicyList{},
			"ValidatingAdmissionPolicyBinding": &admissionregistrationv1.ValidatingAdmissionPolicyBindingList{},
			"Lease":                            &coordinationv1.LeaseList{},
		} {
			if err := c.List(ctx, list); err != nil {
				return err
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				return err
			}
			for _, it := range items {
				o := it.(client.Object)
				if strings.Contains(o.GetName(), "causeway") || o.GetLabels()["app.kubernetes.io/part-of"] == "causeway" {
					left = append(left, kind+" "+client.ObjectKeyFromObject(o).String())
				}
			}
		}
		var slices discoveryv1.EndpointSliceList
		if err := c.List(ctx, &slices, client.MatchingLabels{discoveryv1.LabelManagedBy: mcs.ManagedBy}); err != nil {
			return err
		}
		for i := range slices.Items {
			left = append(left, "EndpointSlice "+client.ObjectKeyFromObject(&slices.Items[i]).String())
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes, client.HasLabels{install.GatewayLabel}); err != nil {
			return err
		}
		for _, n := range nodes.Items {
			left = append(left, "label "+install.GatewayLabel+" on node "+n.Name)
		}
		if len(left) > 0 {
			return fmt.Errorf("left: %s", strings.Join(left, ", "))
		}
		return nil
	})

	// The broker: nothing of cluster's but what deploy-broker made (its
	// namespace, ServiceAccount and roles, for the same ID to join again).
	b := l.Client("broker")
	waitForWithin(l.t, time.Minute, "broker: nothing of "+cluster+" left", func() error {
		var left []string
		for _, crd := range crds {
			if crd.Spec.Group != v1alpha1.GroupVersion.Group {
				continue
			}
			list := &unstructured.UnstructuredList{}
			list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(crd.Spec.Names.ListKind))
			if err := b.List(ctx, list); err != nil {
				return err
			}
			for _, o := range list.Items {
				if crd.Spec.Names.Kind == "VIPAllocation" {
					continue // the ClusterSet's, not one exporter's: c1 still exports
				}
				cid, _, _ := unstructured.NestedString(o.Object, "spec", "clusterID")
				if o.GetNamespace() == broker.Namespace(cluster) || o.GetLabels()[broker.LabelClusterID] == cluster && o.GetNamespace() == "" ||
					cid == cluster && o.GetNamespace() == "" {
					left = append(left, crd.Spec.Names.Kind+" "+o.GetNamespace()+"/"+o.GetName())
				}
			}
		}
		var leases coordinationv1.LeaseList
		if err := b.List(ctx, &leases, client.InNamespace(broker.Namespace(cluster))); err != nil {
			return err
		}
		for _, le := range leases.Items {
			left = append(left, "Lease "+le.Name)
		}
		// Its identity is revoked (deploy-broker recreates it).
		sa := &corev1.ServiceAccount{}
		if err := b.Get(ctx, client.ObjectKey{Namespace: broker.Namespace(cluster), Name: broker.ServiceAccountName}, sa); !apierrors.IsNotFound(err) {
			left = append(left, fmt.Sprintf("ServiceAccount %s (%v)", broker.ServiceAccountName, err))
		}
		if len(left) > 0 {
			return fmt.Errorf("left in the broker: %s", strings.Join(left, ", "))
		}
		return nil
	})

	// The nodes' kernels.
	c2 := mustCluster(l.t, st, cluster)
	for _, n := range c2.Nodes {
		ns := l.Prefix + cluster + "." + n.Name
		waitForWithin(l.t, time.Minute, cluster+"/"+n.Name+": no Causeway kernel state", func() error {
			var left []string
			links, err := exec.Command("ip", "-n", ns, "-o", "link", "show").Output()
			if err != nil {
				return err
			}
			for _, dev := range []string{"vx-causeway", st.TunnelDevice(cluster, n.Name)} {
				if strings.Contains(string(links), ": "+dev+":") || strings.Contains(string(links), ": "+dev+"@") {
					left = append(left, "link "+dev)
				}
			}
			routes, err := exec.Command("ip", "-n", ns, "route", "show", "table", "all", "proto", "148").Output()
			if err != nil {
				return err
			}
			if s := strings.TrimSpace(string(routes)); s != "" {
				left = append(left, "routes "+s)
			}
			rules, err := exec.Command("ip", "netns", "exec", ns, "iptables-save").Output()
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(rules), "\n") {
				if strings.Contains(line, "CAUSEWAY") {
					left = append(left, "iptables "+line)
				}
			}
			tables, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "tables").Output()
			if err != nil {
				return err
			}
			if strings.Contains(string(tables), "causeway") {
				left = append(left, "nft "+strings.TrimSpace(string(tables)))
			}
			_ = filepath.WalkDir(filepath.Join(st.NodeBPFFS(cluster, n.Name), "causeway"), func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					left = append(left, "pin "+path)
				}
				return nil
			})
			if _, err := os.Stat("/var/run/wireguard/" + st.TunnelDevice(cluster, n.Name) + ".sock"); err == nil {
				left = append(left, "wireguard socket of "+st.TunnelDevice(cluster, n.Name))
			}
			if len(left) > 0 {
				return fmt.Errorf("left: %s", strings.Join(left, "; "))
			}
			return nil
		})
	}
}

func mustCluster(t *testing.T, st *lab.State, name string) netlab.Cluster {
	t.Helper()
	c, ok := st.Topology.Cluster(name)
	if !ok {
		t.Fatalf("no cluster %s", name)
	}
	return c
}
