package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/nodeview"
)

// Every node view comes from the node itself: causewayctl runs the
// route agent's `inspect` command in the route agent Pod of the node
// through pods/exec (the user needs create on pods/exec in
// causeway-system, nothing on the node).

// componentLabel selects a Causeway workload's Pods (the chart's
// app.kubernetes.io/component).
const componentLabel = "app.kubernetes.io/component"

// nodeRef is a node of a member cluster and its route agent Pod.
type nodeRef struct {
	cluster memberCluster
	Node    string
	pod     *corev1.Pod
}

func (n nodeRef) String() string { return n.cluster.Name + "/" + n.Node }

// parseNodeName splits "<cluster>/<node>".
func parseNodeName(s string) (cluster, node string, err error) {
	cluster, node, ok := strings.Cut(s, "/")
	if !ok || cluster == "" || node == "" || strings.Contains(node, "/") {
		return "", "", fmt.Errorf("node %q: want <cluster>/<node>", s)
	}
	return cluster, node, nil
}

// componentPods are the running Pods of a Causeway component in c,
// sorted by node.
func componentPods(ctx context.Context, c memberCluster, component string) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := c.Client.List(ctx, &pods, client.InNamespace(gwNamespace), client.MatchingLabels{componentLabel: component}); err != nil {
		return nil, fmt.Errorf("%s: list %s pods: %w", c.Name, component, err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Spec.NodeName < out[j].Spec.NodeName })
	return out, nil
}

// selectNodes are the nodes named by name ("<cluster>/<node>"), or every
// node with a route agent of every cluster when name is "".
func selectNodes(ctx context.Context, clusters []memberCluster, name string) ([]nodeRef, error) {
	var wantCluster, wantNode string
	if name != "" {
		var err error
		if wantCluster, wantNode, err = parseNodeName(name); err != nil {
			return nil, err
		}
	}
	var out []nodeRef
	found := false
	for _, c := range clusters {
		if wantCluster != "" && c.Name != wantCluster {
			continue
		}
		found = true
		pods, err := componentPods(ctx, c, "route-agent")
		if err != nil {
			return nil, err
		}
		for i := range pods {
			if wantNode == "" || pods[i].Spec.NodeName == wantNode {
				out = append(out, nodeRef{cluster: c, Node: pods[i].Spec.NodeName, pod: &pods[i]})
			}
		}
	}
	switch {
	case wantCluster != "" && !found:
		return nil, fmt.Errorf("no cluster %s among the clusters given", wantCluster)
	case name != "" && len(out) == 0:
		return nil, fmt.Errorf("no running route agent on node %s", name)
	}
	return out, nil
}

// inspect runs `route-agent inspect` in n's route agent Pod and decodes
// the node's view. The agent's --bpffs and --vip-pin-dir are passed on,
// so inspect reads the maps the agent pins.
func (n nodeRef) inspect(ctx context.Context) (*nodeview.Node, error) {
	c := n.pod.Spec.Containers[0]
	if len(c.Command) == 0 {
		return nil, fmt.Errorf("%s: route agent pod %s has no command", n, n.pod.Name)
	}
	cmd := []string{c.Command[0], "inspect"}
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--bpffs=") || strings.HasPrefix(a, "--vip-pin-dir=") {
			cmd = append(cmd, a)
		}
	}
	out, err := execIn(ctx, n.cluster, n.pod, c.Name, cmd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n, err)
	}
	var v nodeview.Node
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("%s: decode the node view: %w", n, err)
	}
	return &v, nil
}

// execIn runs cmd in a container of pod through pods/exec and returns its
// standard output; a failure carries its standard error.
func execIn(ctx context.Context, c memberCluster, pod *corev1.Pod, container string, cmd []string) ([]byte, error) {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.Config, "GET", req.URL().String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.Config, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err) })
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return nil, fmt.Errorf("exec %s in pod %s/%s: %w: %s", strings.Join(cmd, " "), pod.Namespace, pod.Name, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
