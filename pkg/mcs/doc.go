// Package mcs is the Multi-Cluster Services sync layer (KEP-1645):
// ServiceExports go to the broker as ServiceExportRecords, the records of
// all exporting clusters merge into one ServiceImport (Merge: union of
// ports, oldest export wins conflicts, Conflict conditions on every export
// involved) with a
// clusterset VIP (VIPAllocator), and EndpointSlices for every source
// cluster appear in every member cluster (RenderEndpointSlices). Under
// globalnet an exporting cluster's records carry the global addresses its
// globalnet controller allocated (SetGlobalAddresses, from the
// GlobalIngress objects) and importers reach remote clusters through them
// (SourceFromRecord, Reachable).
//
// The functions here are the pure policy layer; BrokerVIPStore is the one
// mechanism. See README.md for the object flow, names and rules.
package mcs
