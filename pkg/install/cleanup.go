package install

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/kube"
)

// CleanupLabel marks the Pods CleanupNodes runs.
const CleanupLabel = "causeway.dev/cleanup"

// CleanupNodes removes the daemons' state from every node: it deletes
// the installed DaemonSets (gateway, route agent) and Deployments (the
// MCS controller: no daemon writes to the broker afterwards), waits until
// their Pods are gone, then runs each DaemonSet's program once with --cleanup
// on every node the DaemonSet ran on — a Pod from the DaemonSet's own
// template (same image, privileges, host paths, args and identity),
// bound to the node, restartPolicy Never, no probes — and waits, at most
// timeout, until every one has Succeeded; a failed or missing one is an
// error naming it (and its Pod is kept for its log until the next
// uninstall). The cleanup Pods are deleted at the end.
func CleanupNodes(ctx context.Context, c client.Client, timeout time.Duration, progress func(string)) error {
	var list appsv1.DaemonSetList
	if err := c.List(ctx, &list, client.InNamespace(kube.Namespace)); err != nil {
		return fmt.Errorf("list DaemonSets: %w", err)
	}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.InNamespace(kube.Namespace)); err != nil {
		return fmt.Errorf("list Deployments: %w", err)
	}
	var selectors []labels.Selector
	for i := range deps.Items {
		d := &deps.Items[i]
		if err := c.Delete(ctx, d, client.PropagationPolicy("Background")); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete Deployment %s: %w", d.Name, err)
		}
		selectors = append(selectors, labels.SelectorFromSet(d.Spec.Selector.MatchLabels))
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		ds := &list.Items[i]
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes, client.MatchingLabels(ds.Spec.Template.Spec.NodeSelector)); err != nil {
			return fmt.Errorf("list the nodes of %s: %w", ds.Name, err)
		}
		for _, n := range nodes.Items {
			pods = append(pods, cleanupPod(ds, n.Name))
		}
		if err := c.Delete(ctx, ds, client.PropagationPolicy("Background")); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete DaemonSet %s: %w", ds.Name, err)
		}
		selectors = append(selectors, labels.SelectorFromSet(ds.Spec.Selector.MatchLabels))
	}
	for _, sel := range selectors {
		if err := waitPodsGone(ctx, c, sel, timeout); err != nil {
			return err
		}
	}
	if len(selectors) > 0 {
		progress(fmt.Sprintf("stopped the daemons: %d DaemonSets, %d Deployments deleted, their Pods gone", len(list.Items), len(deps.Items)))
	}
	// Cleanup Pods of an earlier uninstall (a failed one is kept for its
	// log) make way for new ones.
	done, err := labels.Parse(CleanupLabel)
	if err != nil {
		return err
	}
	if err := c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(kube.Namespace), client.MatchingLabelsSelector{Selector: done}); err != nil {
		return fmt.Errorf("delete earlier cleanup Pods: %w", err)
	}
	if err := waitPodsGone(ctx, c, done, timeout); err != nil {
		return err
	}
	for _, p := range pods {
		if err := c.Create(ctx, p); err != nil {
			return fmt.Errorf("create cleanup Pod %s: %w", p.Name, err)
		}
	}
	var pending []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		pending = nil
		for _, want := range pods {
			p := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(want), p); err != nil {
				return false, fmt.Errorf("cleanup Pod %s: %w", want.Name, err)
			}
			switch p.Status.Phase {
			case corev1.PodSucceeded:
			case corev1.PodFailed:
				return false, fmt.Errorf("cleanup Pod %s on %s failed: %s (kubectl -n %s logs %s)", p.Name, p.Spec.NodeName, podState(p), kube.Namespace, p.Name)
			default:
				pending = append(pending, p.Name+" on "+p.Spec.NodeName+": "+podState(p))
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		if len(pending) > 0 && ctx.Err() == nil {
			return fmt.Errorf("node cleanup not done after %s: %s", timeout, strings.Join(pending, "; "))
		}
		return err
	}
	for _, p := range pods {
		if err := c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete cleanup Pod %s: %w", p.Name, err)
		}
	}
	if len(pods) > 0 {
		progress(fmt.Sprintf("nodes cleaned up: %d cleanup Pods (--cleanup) Succeeded", len(pods)))
	}
	return nil
}

// cleanupPod is the Pod that runs ds's containers once with --cleanup
// on node.
func cleanupPod(ds *appsv1.DaemonSet, node string) *corev1.Pod {
	spec := *ds.Spec.Template.Spec.DeepCopy()
	spec.NodeName = node
	spec.RestartPolicy = corev1.RestartPolicyNever
	for i := range spec.Containers {
		ct := &spec.Containers[i]
		ct.Args = append(ct.Args, "--cleanup")
		ct.ReadinessProbe, ct.LivenessProbe, ct.StartupProbe = nil, nil, nil
	}
	l := map[string]string{CleanupLabel: ds.Name}
	for k, v := range ds.Labels {
		if k == "app.kubernetes.io/part-of" {
			l[k] = v
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: kube.Namespace, Name: ds.Name + "-cleanup-" + node, Labels: l},
		Spec:       spec,
	}
}

// waitPodsGone waits until no Pod of causeway-system matches sel.
func waitPodsGone(ctx context.Context, c client.Client, sel labels.Selector, timeout time.Duration) error {
	var left []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(kube.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return false, fmt.Errorf("list Pods: %w", err)
		}
		left = left[:0]
		for _, p := range pods.Items {
			left = append(left, p.Name)
		}
		return len(left) == 0, nil
	})
	if err != nil && len(left) > 0 && ctx.Err() == nil {
		return fmt.Errorf("the Pods of %s still there after %s: %s", sel, timeout, strings.Join(left, ", "))
	}
	return err
}

// deleteImportSlices deletes the multicluster EndpointSlices the MCS
// controller made (the ones with the MCS API's source-cluster label) in
// every namespace; the garbage collector would too once their owner, the
// ServiceImport, goes with the CRDs, but not at once.
func deleteImportSlices(ctx context.Context, c client.Client) (int, error) {
	has, err := labels.Parse(mcsv1beta1.LabelSourceCluster)
	if err != nil {
		return 0, err
	}
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.MatchingLabelsSelector{Selector: has}); err != nil {
		return 0, fmt.Errorf("list EndpointSlices: %w", err)
	}
	for i := range list.Items {
		if err := c.Delete(ctx, &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("delete EndpointSlice %s: %w", client.ObjectKeyFromObject(&list.Items[i]), err)
		}
	}
	return len(list.Items), nil
}
