// Package nodenet is the one node reconciler: given a netlink handle in a
// network namespace, it makes the kernel state a Causeway component owns
// there equal to a desired state. It owns
//
//   - routes identified by rtnetlink protocol, table and optionally
//     device (SyncRoutes, ListRoutes), one per destination and metric;
//   - a VXLAN device (EnsureVXLAN, DeleteVXLAN), the addresses of a device
//     (SyncAddrs), and the static FDB and neighbour entries of a device
//     (AddNeighbours, PruneNeighbours);
//   - sysctls (ReadSysctl, SyncSysctls).
//
// LinkLocal is the IPv6 link-local address the kernel derives from a MAC:
// the overlays' IPv6 next hop.
//
// Every call takes the complete desired set, re-reads the kernel and
// changes only what differs, so an equal call changes nothing and a later
// call repairs whatever was changed behind its back. State that is not
// the caller's (routes of other protocols, tables or devices; other
// devices) is never touched. Each call reports what it changed, one
// human-readable line per change.
//
// The route agent (pkg/routeagent), the cable drivers (pkg/cable/...) and
// the lab (pkg/lab/netlab) all program the node through it; the numbers
// (route protocols, metrics, tables, VNIs) stay theirs and are documented
// in their READMEs.
package nodenet
