package ctl

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/nodeview"
)

func TestReport(t *testing.T) {
	var out bytes.Buffer
	if err := report(&out, []finding{{true, "a", "fine"}, {true, "b", "fine"}}); err != nil {
		t.Errorf("all ok: %v", err)
	}
	if !strings.Contains(out.String(), "all 2 checks passed") {
		t.Errorf("summary missing:\n%s", out.String())
	}
	out.Reset()
	err := report(&out, []finding{{true, "a", "fine"}, {false, "c1: tunnel n0 → c3", "error"}})
	if err == nil || !strings.Contains(err.Error(), "1 of 2 checks failed") {
		t.Errorf("one failed: err=%v", err)
	}
	if !strings.Contains(out.String(), "FAIL c1: tunnel n0 → c3") {
		t.Errorf("failed check not shown:\n%s", out.String())
	}
}

// TestCheckTunnel: a connected tunnel passes with the loss of a stalled
// echo or two and fails from half of its health checks lost; a tunnel not
// connected fails whatever its loss.
func TestCheckTunnel(t *testing.T) {
	conn := func(status v1alpha1.ConnectionStatus, loss int32) v1alpha1.Connection {
		return v1alpha1.Connection{ClusterID: "c3", Status: status, LatencyRTT: &v1alpha1.LatencyRTT{LossPercent: loss}}
	}
	for _, tc := range []struct {
		conn v1alpha1.Connection
		ok   bool
	}{
		{conn(v1alpha1.Connected, 0), true},
		{conn(v1alpha1.Connected, 10), true},
		{conn(v1alpha1.Connected, 40), true},
		{conn(v1alpha1.Connected, 50), false},
		{conn(v1alpha1.Connecting, 0), false},
		{conn(v1alpha1.ConnError, 0), false},
		{v1alpha1.Connection{ClusterID: "c3", Status: v1alpha1.Connected}, true}, // no health checks yet
	} {
		f := checkTunnel("c1", "n0", tc.conn)
		if f.ok != tc.ok || f.what != "c1: tunnel n0 → c3" {
			t.Errorf("%+v: finding %+v, want ok=%v", tc.conn, f, tc.ok)
		}
	}
}

// TestCheckNode: a healthy gateway node passes every check; each fault
// of a node view fails exactly its own check.
func TestCheckNode(t *testing.T) {
	healthy := func() *nodeview.Node {
		return &nodeview.Node{
			Sysctls: map[string]string{"net.ipv4.ip_forward": "1"},
			Links:   []nodeview.Link{{Name: "vx-causeway", Up: true, MTU: 1370}, {Name: "cw-gw", Up: true, MTU: 1420}},
			Iptables: []nodeview.IptablesChain{
				{Table: "mangle", Chain: "POSTROUTING", Rules: []string{"[0:0] -A POSTROUTING -j CAUSEWAY-MSS"}},
				{Table: "filter", Chain: "FORWARD", Rules: []string{"[0:0] -A FORWARD -j CAUSEWAY-FORWARD"}},
				{Table: "nat", Chain: "POSTROUTING", Rules: []string{"[0:0] -A POSTROUTING -j CAUSEWAY-POSTROUTING"}},
			},
			Nftables: []nodeview.NftTable{{Family: "ip", Name: "causeway-globalnet"}},
		}
	}
	failed := func(fs []finding) []string {
		var out []string
		for _, f := range fs {
			if !f.ok {
				out = append(out, f.what)
			}
		}
		return out
	}
	if f := failed(checkNode("c1/n0: ", healthy(), "vx-causeway", "cw-gw", true)); len(f) != 0 {
		t.Errorf("healthy node failed %q", f)
	}
	for name, tc := range map[string]struct {
		break_ func(*nodeview.Node)
		want   string
	}{
		"forwarding off": {func(n *nodeview.Node) { n.Sysctls["net.ipv4.ip_forward"] = "0" }, "c1/n0: ip forwarding"},
		"overlay down":   {func(n *nodeview.Node) { n.Links[0].Up = false }, "c1/n0: overlay vx-causeway"},
		"tunnel missing": {func(n *nodeview.Node) { n.Links = n.Links[:1] }, "c1/n0: tunnel device cw-gw"},
		"jump missing":   {func(n *nodeview.Node) { n.Iptables = n.Iptables[1:] }, "c1/n0: chain CAUSEWAY-MSS"},
		"no nft table":   {func(n *nodeview.Node) { n.Nftables = nil }, "c1/n0: globalnet table ip causeway-globalnet"},
		"view error":     {func(n *nodeview.Node) { n.Errors = []string{"routes: boom"} }, "c1/n0: node view"},
	} {
		n := healthy()
		tc.break_(n)
		if f := failed(checkNode("c1/n0: ", n, "vx-causeway", "cw-gw", true)); !reflect.DeepEqual(f, []string{tc.want}) {
			t.Errorf("%s: failed %q, want %q", name, f, tc.want)
		}
	}
	// A node without an active gateway is not asked for tunnel or table.
	n := healthy()
	n.Links, n.Nftables = n.Links[:1], nil
	if f := failed(checkNode("c1/n1: ", n, "vx-causeway", "", true)); len(f) != 0 {
		t.Errorf("non-gateway node failed %q", f)
	}
}
