package gateway

import "github.com/causeway-net/causeway/pkg/broker"

// brokerNamespace is the broker namespace cluster id writes to.
func brokerNamespace(id string) string { return broker.Namespace(id) }

// clusterIDFromNamespace is the inverse of brokerNamespace.
func clusterIDFromNamespace(ns string) (string, bool) { return broker.ClusterIDFromNamespace(ns) }
