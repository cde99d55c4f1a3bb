// Package mcs is the Multi-Cluster Services sync layer (KEP-1645):
// ServiceExports go to the broker, the records of all exporting clusters
// merge into one ServiceImport with a clusterset VIP, and EndpointSlices
// for every source cluster appear in every member cluster.
package mcs
