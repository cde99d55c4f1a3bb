package addrpolicy

import "github.com/causeway-net/causeway/api/v1alpha1"

// RecordBackends is what one ServiceExportRecord object (a record, or a
// head or part of a split one) counts against its cluster's
// Quotas.Backends in an importer: the backends it carries (a headless
// export's endpoints, in any object of the set) plus, for its ClusterIPs,
// one per ClusterIP and port (each is a backend entry of the import's
// clusterset VIP in every node's VIP table, pkg/vip).
func RecordBackends(spec *v1alpha1.ServiceExportRecordSpec) int {
	n := len(spec.ClusterIPs) * max(1, len(spec.Ports))
	for _, g := range spec.Endpoints {
		n += len(g.Backends)
	}
	return n
}
