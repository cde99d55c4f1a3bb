package bench

import (
	"slices"
	"testing"
)

func TestNftElements(t *testing.T) {
	out := []byte(`{"nftables": [{"metainfo": {"version": "1.0.6"}},
 {"table": {"family": "ip", "name": "causeway-globalnet"}},
 {"map": {"family": "ip", "name": "ingress", "table": "causeway-globalnet", "elem": [[1, 2], [3, 4]]}},
 {"set": {"family": "ip", "name": "remotes", "table": "causeway-globalnet", "elem": ["10.0.0.0/8"]}},
 {"set": {"family": "ip", "name": "empty", "table": "causeway-globalnet"}},
 {"set": {"family": "ip", "name": "other", "table": "kube-proxy", "elem": ["1.2.3.4"]}}]}`)
	n, err := nftElements(out)
	if err != nil || n != 3 {
		t.Errorf("nftElements = %d, %v; want 3 (the causeway tables' only)", n, err)
	}
	if _, err := nftElements([]byte("not json")); err == nil {
		t.Error("no error for output that is not JSON")
	}
}

func TestCompareSnapshots(t *testing.T) {
	before := SoakSnapshot{
		Daemons: []DaemonStats{{Name: "c1/n0/gateway", RSSBytes: 40 << 20, Goroutines: 100}},
		Nodes:   []NodeCounts{{Name: "c1/n0", Routes: 20, NftElements: 8, VIPServices: 2, VIPBackends: 4, Conntrack: 400}},
	}
	within := SoakSnapshot{
		Daemons: []DaemonStats{{Name: "c1/n0/gateway", RSSBytes: 55 << 20, Goroutines: 120}},
		Nodes:   []NodeCounts{{Name: "c1/n0", Routes: 20, NftElements: 8, VIPServices: 2, VIPBackends: 4, Conntrack: 800}},
	}
	if g := compareSnapshots(before, within); len(g) != 0 {
		t.Errorf("within tolerance: growth %q", g)
	}
	beyond := SoakSnapshot{
		Daemons: []DaemonStats{{Name: "c1/n0/gateway", RSSBytes: 60 << 20, Goroutines: 121}, {Name: "c1/n1/gateway"}},
		Nodes:   []NodeCounts{{Name: "c1/n0", Routes: 21, NftElements: 7, VIPServices: 3, VIPBackends: 4, Conntrack: 801}},
	}
	g := compareSnapshots(before, beyond)
	want := []string{
		"c1/n0/gateway: RSS 60.0 MiB, was 40.0 MiB (limit 58.0)",
		"c1/n0/gateway: 121 goroutines, was 100 (limit 120)",
		"c1/n1/gateway: not running at the start",
		"c1/n0: 21 routes, was 20",
		"c1/n0: 7 nftables elements, was 8",
		"c1/n0: 3 VIP services, was 2",
		"c1/n0: 801 conntrack entries, was 400 (limit 800)",
	}
	if !slices.Equal(g, want) {
		t.Errorf("growth\n%q\nwant\n%q", g, want)
	}

	// Routes are named: one replaced by another is growth too.
	before.Nodes[0].routes = []string{"a", "b"}
	moved := SoakSnapshot{Daemons: before.Daemons, Nodes: []NodeCounts{before.Nodes[0]}}
	moved.Nodes[0].routes = []string{"a", "c"}
	if g, want := compareSnapshots(before, moved), []string{"c1/n0: routes gone [b], added [c]"}; !slices.Equal(g, want) {
		t.Errorf("a route replaced: growth %q, want %q", g, want)
	}
}
