// Package install installs Causeway in a member cluster the way
// `causewayctl join` does, and removes it (`causewayctl uninstall`):
// it discovers the cluster's pod and service CIDRs, labels the gateway
// nodes, applies the CRDs and the rendered Helm chart (server-side apply,
// field manager causewayctl) and waits until the daemons' Pods are Ready.
package install

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/kube"
)

// FieldOwner is the field manager of everything Apply applies.
const FieldOwner = "causewayctl"

// GatewayLabel marks the gateway candidates (the chart's default
// gateway.nodeSelector).
const GatewayLabel = "causeway.dev/gateway"

// DiscoverPodCIDRs returns the pod CIDRs the nodes were given
// (spec.podCIDRs, allocated by the controller manager), each once, sorted.
func DiscoverPodCIDRs(ctx context.Context, c client.Client) ([]string, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Spec.PodCIDRs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("none of the %d nodes has spec.podCIDRs (the controller manager sets them with --allocate-node-cidrs): give the pod CIDRs", len(nodes.Items))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// DiscoverServiceCIDRs returns the service CIDRs of the API's ServiceCIDR
// objects (networking.k8s.io/v1; the API server creates "kubernetes" from
// its --service-cluster-ip-range), each once, sorted.
func DiscoverServiceCIDRs(ctx context.Context, c client.Client) ([]string, error) {
	var list networkingv1.ServiceCIDRList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list ServiceCIDRs: %w", err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Spec.CIDRs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the API server has no ServiceCIDR: give the service CIDRs")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// LabelGateways labels nodes as gateway candidates and returns every
// node that is one afterwards; none is an error.
func LabelGateways(ctx context.Context, c client.Client, nodes []string) ([]string, error) {
	for _, name := range nodes {
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, n); err != nil {
			return nil, fmt.Errorf("gateway node %s: %w", name, err)
		}
		patch := client.MergeFrom(n.DeepCopy())
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[GatewayLabel] = "true"
		if err := c.Patch(ctx, n, patch); err != nil {
			return nil, fmt.Errorf("label gateway node %s: %w", name, err)
		}
	}
	var list corev1.NodeList
	if err := c.List(ctx, &list, client.MatchingLabels{GatewayLabel: "true"}); err != nil {
		return nil, fmt.Errorf("list gateway nodes: %w", err)
	}
	var out []string
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no node is labelled %s=true: name the gateway node(s)", GatewayLabel)
	}
	slices.Sort(out)
	return out, nil
}

// Apply installs the CRDs (waiting until they are established) and objs,
// the rendered chart: the daemons' identities first, until the API
// server grants them their rights (a daemon started before would see
// its requests refused), then the rest.
func Apply(ctx context.Context, cfg *rest.Config, c client.Client, objs []*unstructured.Unstructured) error {
	if err := kube.InstallCRDs(ctx, cfg); err != nil {
		return err
	}
	ids := chart.Identities(objs)
	if err := kube.ApplyAs(ctx, c, FieldOwner, ids, false); err != nil {
		return err
	}
	if err := chart.WaitGranted(ctx, c, ids); err != nil {
		return err
	}
	return kube.ApplyAs(ctx, c, FieldOwner, objs, false)
}

// want is one Pod a workload must have Ready: on node, or any node when
// node is empty (a Deployment's replica).
type want struct {
	workload string
	selector labels.Selector
	node     string
}

// expected lists the Pods the workloads of objs must have Ready: a
// DaemonSet's one per node its node selector picks, a Deployment's
// replicas.
func expected(ctx context.Context, c client.Client, objs []*unstructured.Unstructured) ([]want, error) {
	var out []want
	for _, o := range objs {
		switch o.GetKind() {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				return nil, err
			}
			var nodes corev1.NodeList
			if err := c.List(ctx, &nodes, client.MatchingLabels(ds.Spec.Template.Spec.NodeSelector)); err != nil {
				return nil, fmt.Errorf("list the nodes of %s: %w", ds.Name, err)
			}
			for _, n := range nodes.Items {
				out = append(out, want{ds.Name, labels.SelectorFromSet(ds.Spec.Selector.MatchLabels), n.Name})
			}
		case "Deployment":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				return nil, err
			}
			for range *d.Spec.Replicas {
				out = append(out, want{d.Name, labels.SelectorFromSet(d.Spec.Selector.MatchLabels), ""})
			}
		}
	}
	return out, nil
}

// WaitReady waits, at most timeout, until every workload of objs has its
// Pods Ready (see expected) and is rolled out (every Pod of its current
// template: notRolledOut), reporting each change of what is missing
// through progress. On timeout the error names every Pod not Ready and
// every workload not rolled out.
func WaitReady(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, timeout time.Duration, progress func(string)) error {
	wants, err := expected(ctx, c, objs)
	if err != nil {
		return err
	}
	var missing []string
	last := ""
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(kube.Namespace)); err != nil {
			return false, fmt.Errorf("list Pods: %w", err)
		}
		missing = notReady(wants, pods.Items)
		ready := len(wants) - len(missing)
		for _, o := range objs {
			why, err := notRolledOut(ctx, c, o)
			if err != nil {
				return false, err
			}
			if why != "" {
				missing = append(missing, o.GetKind()+" "+o.GetName()+": "+why)
			}
		}
		if s := fmt.Sprintf("%d/%d Pods Ready", ready, len(wants)); s != last {
			last = s
			if len(missing) > 0 {
				s += "; waiting for " + strings.Join(missing, ", ")
			}
			progress(s)
		}
		return len(missing) == 0, nil
	})
	if err != nil && len(missing) > 0 {
		return fmt.Errorf("not Ready after %s: %s", timeout, strings.Join(missing, "; "))
	}
	return err
}

// notRolledOut says what the live workload of o (a DaemonSet or a
// Deployment; "" for anything else) still waits for before every Pod
// runs its current template — the rule of `kubectl rollout status` —
// or "" when it is rolled out. Ready Pods of an older template do not
// count: after an upgrade (a changed image tag, values or config) the
// old Pods are Ready until they are replaced.
func notRolledOut(ctx context.Context, c client.Client, o *unstructured.Unstructured) (string, error) {
	key := client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}
	switch o.GetKind() {
	case "DaemonSet":
		var ds appsv1.DaemonSet
		if err := c.Get(ctx, key, &ds); err != nil {
			return "", fmt.Errorf("get DaemonSet %s: %w", key, err)
		}
		st := ds.Status
		switch {
		case st.ObservedGeneration < ds.Generation:
			return "its update not yet seen by the controller", nil
		case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
			return fmt.Sprintf("%d of %d Pods updated", st.UpdatedNumberScheduled, st.DesiredNumberScheduled), nil
		case st.NumberAvailable < st.DesiredNumberScheduled:
			return fmt.Sprintf("%d of %d updated Pods available", st.NumberAvailable, st.DesiredNumberScheduled), nil
		}
	case "Deployment":
		var d appsv1.Deployment
		if err := c.Get(ctx, key, &d); err != nil {
			return "", fmt.Errorf("get Deployment %s: %w", key, err)
		}
		st, want := d.Status, ptr.Deref(d.Spec.Replicas, 1)
		switch {
		case st.ObservedGeneration < d.Generation:
			return "its update not yet seen by the controller", nil
		case st.UpdatedReplicas < want:
			return fmt.Sprintf("%d of %d replicas updated", st.UpdatedReplicas, want), nil
		case st.Replicas > st.UpdatedReplicas:
			return fmt.Sprintf("%d old replicas still terminating", st.Replicas-st.UpdatedReplicas), nil
		case st.AvailableReplicas < st.UpdatedReplicas:
			return fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, st.UpdatedReplicas), nil
		}
	}
	return "", nil
}

// notReady describes each want that no Ready Pod meets; a Pod meets one
// want at most.
func notReady(wants []want, pods []corev1.Pod) []string {
	used := make([]bool, len(pods))
	var out []string
	for _, w := range wants {
		found, why := false, "no Pod"
		for i := range pods {
			p := &pods[i]
			if used[i] || p.DeletionTimestamp != nil || !w.selector.Matches(labels.Set(p.Labels)) || w.node != "" && p.Spec.NodeName != w.node {
				continue
			}
			if kube.PodReady(p) {
				used[i], found = true, true
				break
			}
			why = "Pod " + p.Name + " " + podState(p)
		}
		if !found {
			where := w.workload
			if w.node != "" {
				where += " on " + w.node
			}
			out = append(out, where+": "+why)
		}
	}
	return out
}

// podState is why a Pod is not Ready, as its status tells.
func podState(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("%s (%s exited %d: %s %s)", p.Status.Phase, cs.Name, t.ExitCode, t.Reason, t.Message)
		}
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf("%s (%s: %s)", p.Status.Phase, w.Reason, w.Message)
		}
		if cs.RestartCount > 0 {
			return fmt.Sprintf("%s, %d restarts", p.Status.Phase, cs.RestartCount)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Reason != "" {
			return fmt.Sprintf("%s (%s)", p.Status.Phase, c.Reason)
		}
	}
	return fmt.Sprintf("%s, not Ready", p.Status.Phase)
}

// Uninstall removes from the member cluster what Apply and LabelGateways
// made: the chart's cluster-scoped objects, namespace causeway-system
// (with everything in it: workloads, config, the broker Secret), the
// multicluster EndpointSlices of the MCS controller, Causeway's and the
// MCS API's CRDs (and with them every ServiceExport and ServiceImport),
// the About API's ClusterProperty clusterset.k8s.io (the cluster is no
// longer a member; its ID, cluster.clusterset.k8s.io, and the About API
// CRD stay) and the gateway label. The
// nodes' datapath (routes, devices, eBPF pins) is the daemons' own to
// remove: CleanupNodes runs their --cleanup before.
func Uninstall(ctx context.Context, c client.Client, progress func(string)) error {
	objs, err := chart.Render(chart.IdentityValues())
	if err != nil {
		return err
	}
	// The workloads first, so no daemon recreates what goes after.
	slices.Reverse(objs)
	for _, o := range objs {
		if err := c.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s: %w", o.GetKind(), client.ObjectKeyFromObject(o), err)
		}
	}
	progress("deleted the chart's objects and namespace " + kube.Namespace)
	n, err := deleteImportSlices(ctx, c)
	if err != nil {
		return err
	}
	progress(fmt.Sprintf("deleted %d multicluster EndpointSlices", n))
	crds, err := kube.CRDs()
	if err != nil {
		return err
	}
	deleted := 0
	for _, crd := range crds {
		if kube.SharedCRD(crd) {
			continue
		}
		if err := c.Delete(ctx, crd); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete CRD %s: %w", crd.Name, err)
		}
		deleted++
	}
	progress(fmt.Sprintf("deleted %d CRDs", deleted))
	if err := about.Leave(ctx, c); err != nil {
		return err
	}
	progress("deleted ClusterProperty " + about.ClusterSetProperty)
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.HasLabels{GatewayLabel}); err != nil {
		return fmt.Errorf("list gateway nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		patch := client.MergeFrom(n.DeepCopy())
		delete(n.Labels, GatewayLabel)
		if err := c.Patch(ctx, n, patch); err != nil {
			return fmt.Errorf("unlabel gateway node %s: %w", n.Name, err)
		}
	}
	progress(fmt.Sprintf("removed label %s from %d nodes", GatewayLabel, len(nodes.Items)))
	return nil
}
