// Package controller is the MCS controller: it runs once per member
// cluster (leader-elected among its replicas), and syncs that cluster with
// the broker:
//
//   - export: each ServiceExport and its Service become a
//     ServiceExportRecord in the cluster's broker namespace (with the
//     Service's ready count, and a headless Service's backends copied from
//     its EndpointSlices, split over parts when there are many); the export's
//     Valid, Ready and Conflict conditions are set;
//   - import: the records of every cluster are merged per Service
//     (mcs.Merge); a clusterset VIP is allocated in the broker; a
//     ServiceImport and the multi-cluster EndpointSlices (one set per
//     source cluster, this cluster's own backends included) are written in
//     every namespace that exists here, and removed when the last export
//     goes;
//   - globalnet: the record carries the global addresses (IP:port pairs,
//     or one global IP per ready pod of a headless Service) of the
//     Service's GlobalIngress, which the globalnet controller
//     (pkg/globalnet/controller) allocates and writes; this controller
//     only reads it. Importers reach a
//     remote cluster at its global addresses and render a backend ready
//     only where the mirrored Endpoint of its cluster reaches it
//     (ServiceImport condition Reachable);
//   - liveness: the Lease causeway-liveness in the cluster's broker
//     namespace is renewed; a cluster whose Lease has not changed for the
//     lease duration plus the dead-cluster timeout has its endpoints
//     withdrawn, until it renews again.
//
// Everything is keyed by (namespace, name) of the Service: any event about
// it (local ServiceExport, Service, EndpointSlices, ServiceImport,
// GlobalIngress, a broker record or VIP allocation, a cluster dying or
// coming back, its Cluster or Endpoint mirror changing, its namespace
// appearing) queues that key, and one reconcile computes the
// desired state of the key from the caches and applies the difference.
// The caches report changes only; every Service exported or imported
// here is re-checked once per ResyncPeriod, one at a time, spread evenly
// over the period (runVerify).
package controller
