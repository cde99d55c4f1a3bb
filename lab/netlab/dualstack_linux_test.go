package netlab

import (
	"net"
	"net/netip"
	"path/filepath"
	"testing"
)

// TestDualStackPodToPod: in a dual-stack cluster a pod reaches a pod of
// another node over IPv6 and over IPv4, and the server sees the client's
// address of the same family.
func TestDualStackPodToPod(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	names := h.Names()
	pod6, svc6 := IPv6CIDRs(1)
	c := mustCluster(t, ClusterSpec{Name: "c1", Index: 1, Nodes: 2, PodCIDR6: pod6, ServiceCIDR6: svc6})
	mustApply(t, h, Topology{Prefix: h.prefix, Clusters: []Cluster{c}})
	n0, n1 := c.Nodes[0], c.Nodes[1]
	mkPod := func(n Node, name, ip string) Pod {
		a := netip.MustParseAddr(ip)
		return Pod{Cluster: "c1", Node: n.Name, Namespace: "kubecon", Name: name, IP: a, IP6: n.PodIP6(a)}
	}
	server, client := mkPod(n0, "whereami-0", "10.244.0.2"), mkPod(n1, "client-0", "10.244.1.2")
	for _, p := range []Pod{server, client, server} { // twice: idempotent
		if err := h.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	cmd := startWhereami(t, h, server, filepath.Join(t.TempDir(), "whereami.log"))
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	for _, p := range []struct{ server, client netip.Addr }{{server.IP6, client.IP6}, {server.IP, client.IP}} {
		id := waitHTTP(t, h, names.PodOf(client), "http://"+net.JoinHostPort(p.server.String(), "8080")+"/")
		if id.Pod != server.Name {
			t.Errorf("GET %s answered by %+v", p.server, id)
		}
		if host, _, _ := net.SplitHostPort(id.Client); host != p.client.String() {
			t.Errorf("GET %s: server saw client %s, want %s", p.server, id.Client, p.client)
		}
	}
	// The node reaches its own pod and the other node's pods over IPv6.
	for _, ns := range []string{names.Node("c1", "n0"), names.Node("c1", "n1")} {
		if id := waitHTTP(t, h, ns, "http://"+net.JoinHostPort(server.IP6.String(), "8080")+"/"); id.Pod != server.Name {
			t.Errorf("from %s: answered by %+v", ns, id)
		}
	}
}
