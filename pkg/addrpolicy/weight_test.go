package addrpolicy

import (
	"maps"
	"testing"
)

func TestCapWeights(t *testing.T) {
	for _, tc := range []struct {
		name    string
		weights map[string]int
		want    map[string]int
	}{
		{"equal clusters", map[string]int{"c1": 3, "c2": 3, "c3": 3}, map[string]int{"c1": 3, "c2": 3, "c3": 3}},
		{"a larger remote within the bound", map[string]int{"c1": 10, "c2": 90}, map[string]int{"c1": 10, "c2": 90}},
		{"a remote claiming the most allowed", map[string]int{"c1": 3, "c2": MaxRecordEndpointCount}, map[string]int{"c1": 3, "c2": 27}},
		{"bounded by all the others", map[string]int{"c1": 2, "c2": 1, "c3": 1000}, map[string]int{"c1": 2, "c2": 1, "c3": 27}},
		{"the local cluster's own count stays", map[string]int{"c1": 5000, "c2": 1}, map[string]int{"c1": 5000, "c2": 1}},
		{"a sole exporter", map[string]int{"c2": 5000}, map[string]int{"c2": 5000}},
		{"the others without ready endpoints", map[string]int{"c1": 0, "c2": 5000}, map[string]int{"c1": 0, "c2": 5000}},
		{"two remotes, each against the other's claim", map[string]int{"c1": 1, "c2": 100, "c3": 100},
			map[string]int{"c1": 1, "c2": 100, "c3": 100}},
		{"nothing", map[string]int{}, map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := maps.Clone(tc.weights)
			got := CapWeights("c1", tc.weights)
			if !maps.Equal(got, tc.want) {
				t.Errorf("CapWeights(c1, %v) = %v, want %v", tc.weights, got, tc.want)
			}
			if !maps.Equal(in, tc.weights) {
				t.Errorf("CapWeights changed its input: %v", tc.weights)
			}
		})
	}
}

// One remote, whatever it claims, gets at most 90 % of the weight when
// another cluster has any.
func TestCapWeightsShare(t *testing.T) {
	for _, honest := range []int{1, 2, 3, 7, 100, 5000} {
		for _, claim := range []int{0, 1, honest, 9 * honest, 9*honest + 1, MaxRecordEndpointCount} {
			got := CapWeights("c1", map[string]int{"c1": honest, "c2": claim})
			if share := float64(got["c2"]) / float64(got["c1"]+got["c2"]); share > 0.9 {
				t.Errorf("local %d, remote claiming %d: remote share %.3f > 0.9 (%v)", honest, claim, share, got)
			}
		}
	}
}
