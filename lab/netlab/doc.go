// Package netlab builds the host plumbing of the local lab: network
// namespaces for clusters' node networks, nodes, pods and the shared WAN,
// veth links and bridges between them, addresses and routes, cgroup v2
// directories per node and pod, and a way to start processes inside a given
// network namespace and cgroup.
//
// The package has two layers. The pure layer (topology.go, names.go,
// cgroup.go) describes a lab as plain data: clusters, nodes, CIDRs,
// addresses, namespace and interface names, cgroup paths; it does no I/O and
// is unit-tested. The mechanism (Host, Linux only) makes a description real:
// Host.Apply creates what is missing and removes what is no longer described,
// Host.EnsurePod and Host.DeletePod manage pods, Host.Start runs a program in
// a namespace and cgroup, Host.Teardown removes everything carrying the
// lab's prefix and Host.Leftovers lists what is still there.
//
// Every namespace, cgroup directory, bpffs pin and WireGuard UAPI socket the
// lab owns carries the lab's prefix (by default "cwl-"), so that teardown
// finds them all without any state file. See ../README.md for the topology,
// the address plan and the cgroup layout.
package netlab
