// Package kubelet is the lab kubelet: one per lab node, running as a
// process in the root network namespace (so it reaches its cluster's
// kube-apiserver on 127.0.0.1) and managing its node's network namespace
// and pods through netlab.Host.
//
// It registers the Node (labels, pod CIDR, addresses, capacity, a Ready
// condition), renews the node's Lease in kube-node-lease and refreshes the
// node's conditions, so kube-controller-manager's node lifecycle controller
// keeps the node Ready. It watches the Pods bound to its node and turns
// each into a network namespace and cgroup (netlab.EnsurePod; hostNetwork
// pods use the node's namespace) running one process per container. The
// process comes from the apps registry, which maps the container's image to
// a command line (an image it does not know runs the container's command
// from the host). With Config.Serving it serves the kubelet API (container
// logs, exec, port-forward) to the API server, and with
// Config.EgressSocket the API server's HTTP CONNECT egress into the node
// network. It reports pod IP, phase, conditions and container
// statuses through the status subresource, honours readiness probes
// (httpGet, tcpSocket) and restart policies, and on deletion stops the
// processes within the grace period, removes the namespace and cgroup and
// deletes the Pod object.
//
// Container processes outlive the kubelet: when Run returns they keep
// running, and the next kubelet on the same StateDir adopts them through
// the pid files it finds there (see ../README.md for the layout and what
// is unsupported).
package kubelet
