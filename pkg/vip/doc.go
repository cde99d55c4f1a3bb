// Package vip keeps the eBPF ClusterSet VIP datapath (bpf/vip.c) equal to a
// desired set of services.
//
// The programs translate a VIP:port at the socket layer (cgroup connect4,
// sendmsg4, recvmsg4 and getpeername4 hooks) to one backend picked from a BPF
// map in proportion to the backends' weights (an alias table per service),
// optionally with ClientIP session affinity per network namespace, so no
// per-packet NAT is involved. The route agent computes, from the
// ServiceImports and EndpointSlices, one plain value map[ServiceKey]Service
// and hands it to Table.Set; the implementation diffs it against what the maps
// hold and writes only the entries that changed, in an order under which a
// concurrent lookup never sees a service pointing at a missing backend.
//
// Layers: plan.go is the pure diff (no I/O), Fake applies it to in-memory maps
// with the programs' lookup semantics (for controller tests), and Kernel
// (Linux) loads the programs, pins maps and links under a bpffs directory,
// attaches them to a cgroup v2 directory and adopts existing pins on restart.
// See README.md for the contract with the node.
package vip
