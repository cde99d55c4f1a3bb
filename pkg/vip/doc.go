// Package vip keeps the eBPF ClusterSet VIP datapath (bpf/vip.c) equal to a
// desired set of services.
//
// The programs translate a VIP:port, IPv4 or IPv6, at the socket layer
// (cgroup connect4/6, sendmsg4/6, recvmsg4/6 and getpeername4/6 hooks;
// dual-stack sockets reach an IPv4 VIP as ::ffff:<vip>) to one backend of
// the VIP's family picked from a BPF
// map in proportion to the backends' weights (an alias table per service),
// optionally with ClientIP session affinity per network namespace, so no
// per-packet NAT is involved. The route agent computes, from the
// ServiceImports and EndpointSlices, one plain value map[ServiceKey]Service
// and hands it to Table.Set; the implementation diffs it against what the maps
// hold and writes only the entries that changed, in an order under which a
// concurrent lookup never sees a service pointing at a missing backend.
// Connected UDP sockets whose backend a Set removed are then terminated (a
// socket iterator with bpf_sock_destroy, run in each network namespace of
// the cgroup's processes), so their applications reconnect.
//
// Layers: plan.go is the pure diff (no I/O; the package's tests apply it
// to in-memory maps with the programs' lookup semantics), Validate is what
// every Set refuses, and Kernel (Linux) loads the programs, pins maps and
// links under a bpffs directory, attaches them to a cgroup v2 directory and
// adopts existing pins on restart.
// See README.md for the contract with the node.
package vip
