// Package controller is the globalnet controller (cmd/globalnet), the
// one authority over this cluster's global addresses: it gives every
// exported ClusterSetIP Service port a (global IP, global port) pair and
// every ready backing pod of an exported headless Service inside the
// cluster's pod CIDRs a global IP, out of the cluster's global CIDR (the
// first IPv4 entry of its mirrored Cluster's spec.globalCIDRs, which the
// active gateway claims in the broker and writes), and persists each
// Service's allocation in a GlobalIngress object (the Service's
// namespace and name). Every namespace labelled
// causeway.dev/global-egress gets global egress IPs of its own out of the
// same pool, persisted with its pods' addresses in the cluster-scoped
// GlobalEgress named after it. Released allocations stay reserved for a
// quarantine before their addresses are handed out again.
//
// It only writes GlobalIngress and GlobalEgress objects (and Warning
// Events): the active
// gateway programs netfilter from them (pkg/globalnet.Rules, pkg/nat),
// and the MCS controller copies the addresses into the Service's export
// record. Replicas elect one acting leader through the Lease
// causeway-globalnet. See README.md for the contract.
package controller
