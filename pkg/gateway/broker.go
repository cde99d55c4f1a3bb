package gateway

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// brokerNamespacePrefix prefixes a member cluster's namespace in the
// broker. This mirrors pkg/broker (Namespace, ClusterIDFromNamespace);
// switch to it once that package is on main.
const brokerNamespacePrefix = "cluster-"

// brokerNamespace is the broker namespace cluster id writes to.
func brokerNamespace(id string) string { return brokerNamespacePrefix + id }

// clusterIDFromNamespace is the inverse of brokerNamespace.
func clusterIDFromNamespace(ns string) (string, bool) {
	id, ok := strings.CutPrefix(ns, brokerNamespacePrefix)
	return id, ok && id != ""
}

func metaFor(ns, name string) metav1.ObjectMeta { return metav1.ObjectMeta{Namespace: ns, Name: name} }
