package ctl

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/causeway-net/causeway/pkg/vip"
)

func vipKey(s string, p vip.Proto) vip.ServiceKey {
	ap := netip.MustParseAddrPort(s)
	return vip.ServiceKey{VIP: ap.Addr(), Port: ap.Port(), Proto: p}
}

func vipBackend(s string, w uint32) vip.Backend {
	ap := netip.MustParseAddrPort(s)
	return vip.Backend{Addr: ap.Addr(), Port: ap.Port(), Weight: w}
}

// TestCompareVIPs: every kind of difference between a node's maps and the
// API is named, an equal service (in another order, weight 0 as 1) is ok.
func TestCompareVIPs(t *testing.T) {
	same, weights, missing, stale := vipKey("243.0.0.1:80", vip.TCP), vipKey("243.0.0.2:80", vip.TCP), vipKey("243.0.0.3:80", vip.TCP), vipKey("243.0.0.4:80", vip.TCP)
	affinity := vipKey("243.0.0.1:53", vip.UDP)
	a, b := vipBackend("242.0.0.2:1024", 1), vipBackend("242.0.1.2:1024", 3)
	programmed := map[vip.ServiceKey]vip.Service{
		same:     {Backends: []vip.Backend{b, {Addr: a.Addr, Port: a.Port}}},
		weights:  {Backends: []vip.Backend{a, vipBackend("242.0.1.2:1024", 1), vipBackend("10.96.0.9:80", 1)}},
		stale:    {Backends: []vip.Backend{a}},
		affinity: {Backends: []vip.Backend{a}},
	}
	expected := map[vip.ServiceKey]vip.Service{
		same:     {Backends: []vip.Backend{a, b}},
		weights:  {Backends: []vip.Backend{a, b}},
		missing:  {},
		affinity: {Backends: []vip.Backend{a}, AffinitySeconds: 10800},
	}
	rows := compareVIPs("c3/n1", programmed, expected, map[vip.ServiceKey]string{same: "demo/whereami"})
	got := map[string][]string{}
	for _, r := range rows {
		if r.Node != "c3/n1" {
			t.Errorf("row of node %q", r.Node)
		}
		got[r.VIP] = r.Diff
	}
	want := map[string][]string{
		"243.0.0.1:53/UDP": {"affinity 0s, want 10800s"},
		"243.0.0.1:80/TCP": nil,
		"243.0.0.2:80/TCP": {"242.0.1.2:1024 weight 1, want 3", "stale 10.96.0.9:80"},
		"243.0.0.3:80/TCP": {"not programmed"},
		"243.0.0.4:80/TCP": {"not a service in the API"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diffs:\n got %v\nwant %v", got, want)
	}
	// Sorted by VIP, port, protocol.
	if r := rows[1]; r.VIP != "243.0.0.1:80/TCP" || r.Service != "demo/whereami" || r.Programmed.cell() != "242.0.0.2:1024 w1, 242.0.1.2:1024 w3" {
		t.Errorf("second row %+v (cell %q)", r, r.Programmed.cell())
	}
}
