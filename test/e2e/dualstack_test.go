package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/lab/netlab"
)

// TestLabDualStack brings up `lab up --ip-family dual` (one node per
// cluster) and checks issue 11's dual-stack lab promise: pods have an
// IPv4 and an IPv6 address, the demo Service a ClusterIP of each family
// that answers over IPv6 inside its cluster; exported from c1, whereami's
// ServiceImport has one VIP per family, AAAA of its clusterset name is
// the IPv6 VIP, and from c3 a dual-stack socket's connect to
// [::ffff:<IPv4 VIP>] answers from c1 (through c1's global IP:port) and a
// connect to [<IPv6 VIP>] answers from c1 too, reached directly at its
// IPv6 ClusterIP through the tunnel, the backend seeing c3's IPv6 pod
// address (no NAT on IPv6). Exported from c2 as well (its IPv4 CIDRs are
// c1's, its IPv6 ones its own), [<IPv6 VIP>] is answered by both.
//
// The tunnel is WireGuard; CAUSEWAY_E2E_CABLE=vxlan|ipsec runs it over
// another cable driver (cableArgs).
func TestLabDualStack(t *testing.T) {
	l := StartLab(t, append([]string{"--ip-family", "dual", "--nodes", "1"}, cableArgs()...)...)
	ctx := context.Background()

	pod6, _ := netlab.IPv6CIDRs(3)
	client3 := &corev1.Pod{}
	if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "client"}, client3); err != nil {
		t.Fatal(err)
	}
	if ips := client3.Status.PodIPs; len(ips) != 2 || !pod6.Contains(netip.MustParseAddr(ips[1].IP)) {
		t.Fatalf("c3 client pod IPs %v, want an IPv4 and one of %s", ips, pod6)
	}

	svc := &corev1.Service{}
	if err := l.Client("c1").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, svc); err != nil {
		t.Fatal(err)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("c1 whereami ClusterIPs %v, want one per family", svc.Spec.ClusterIPs)
	}
	for _, id := range l.curlWhereami("c1/demo/client", "http://"+net.JoinHostPort(svc.Spec.ClusterIPs[1], "80"), nil, 60) {
		if id.Cluster != "c1" {
			t.Errorf("c1's IPv6 ClusterIP answered from %q", id.Cluster)
		}
	}

	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c1"); err != nil {
		t.Fatalf("export from c1: %v\n%s", err, out)
	}
	var vip4, vip6 string
	waitFor(t, "c3's ServiceImport with an IPv4 and an IPv6 VIP", func() error {
		si := &mcsv1beta1.ServiceImport{}
		if err := l.Client("c3").Get(ctx, client.ObjectKey{Namespace: "demo", Name: "whereami"}, si); err != nil {
			return err
		}
		vip4, vip6 = "", ""
		for _, ip := range si.Spec.IPs {
			if a, err := netip.ParseAddr(ip); err == nil && a.Is4() {
				vip4 = ip
			} else if err == nil {
				vip6 = ip
			}
		}
		if vip4 == "" || vip6 == "" || !slices.Contains(si.Spec.IPFamilies, corev1.IPv6Protocol) {
			return fmt.Errorf("ServiceImport IPs %v families %v", si.Spec.IPs, si.Spec.IPFamilies)
		}
		return nil
	})
	waitFor(t, "AAAA of whereami.demo.svc.clusterset.local in c3", func() error {
		out, err := l.Exec("c3/demo/client", "dig", "+short", "AAAA", "whereami.demo.svc.clusterset.local")
		if err != nil || strings.TrimSpace(out) != vip6 {
			return fmt.Errorf("dig: %v: %q, want %s", err, out, vip6)
		}
		return nil
	})
	url := "http://[::ffff:" + vip4 + "]"
	for _, id := range l.curlWhereami("c3/demo/client", url, nil, 60) {
		if id.Cluster != "c1" {
			t.Errorf("%s from c3 answered from %q, want c1", url, id.Cluster)
		}
	}
	url6 := "http://[" + vip6 + "]"
	client6 := netip.MustParseAddr(client3.Status.PodIPs[1].IP)
	for _, id := range l.curlWhereami("c3/demo/client", url6, nil, 100) {
		if id.Cluster != "c1" {
			t.Errorf("%s from c3 answered from %q, want c1", url6, id.Cluster)
		}
		if ap, err := netip.ParseAddrPort(id.Client); err != nil || ap.Addr() != client6 {
			t.Errorf("%s from c3: c1's backend saw client %q, want c3's pod address %s", url6, id.Client, client6)
		}
	}

	if out, err := l.causewayctl("export", "demo/whereami", "--cluster", "c2"); err != nil {
		t.Fatalf("export from c2: %v\n%s", err, out)
	}
	clusters := map[string]int{}
	var errs []string
	for i := 0; i < 150 && (clusters["c1"] == 0 || clusters["c2"] == 0); i++ {
		id, err := l.whereami("c3/demo/client", url6)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		clusters[id.Cluster]++
	}
	if clusters["c1"] == 0 || clusters["c2"] == 0 || len(clusters) != 2 {
		t.Errorf("%s from c3 with c1 and c2 exporting: answers by cluster %v, want both and no other; errors %v", url6, clusters, errs)
	}
	t.Logf("%s from c3, c1 and c2 exporting: answers by cluster %v, %d errors before", url6, clusters, len(errs))
}
