package addrpolicy

// RemoteWeightFactor bounds a remote cluster's weight against the other
// exporting clusters' (CapWeights): with 9, one remote takes at most 90 %
// of a clusterset VIP's connections away from the others.
const RemoteWeightFactor = 9

// CapWeights bounds the weights an importer gives the exporting clusters
// of one ClusterSetIP Service: each cluster's claimed ready endpoints
// (weights, by cluster ID), which set the share of the VIP's connections
// it gets and which nobody can check (CheckRecord only bounds them by
// MaxRecordEndpointCount). A remote cluster's weight is at most
// RemoteWeightFactor times the sum of the other clusters' claimed
// weights, so one remote claiming endpoints it does not have draws at
// most 90 % of the connections from the others (uncapped: up to
// 150000/(150000+n)). The local cluster's own count is left as it is, as
// is a remote's when no other cluster has a weight (it serves every
// connection anyway). Several remotes acting together are bounded each
// against the others' claims, not jointly. Pure; it returns a new map.
func CapWeights(local string, weights map[string]int) map[string]int {
	total := 0
	for _, w := range weights {
		total += max(w, 0)
	}
	out := make(map[string]int, len(weights))
	for id, w := range weights {
		others := total - max(w, 0)
		if id != local && others > 0 {
			w = min(w, RemoteWeightFactor*others)
		}
		out[id] = w
	}
	return out
}
