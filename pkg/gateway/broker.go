package gateway

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/pkg/broker"
)

// brokerNamespace is the broker namespace cluster id writes to.
func brokerNamespace(id string) string { return broker.Namespace(id) }

// clusterIDFromNamespace is the inverse of brokerNamespace.
func clusterIDFromNamespace(ns string) (string, bool) { return broker.ClusterIDFromNamespace(ns) }

func metaFor(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
