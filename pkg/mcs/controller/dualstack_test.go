package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// TestDualStackImport: a dual-stack export (ipFamilies IPv4, IPv6 and a
// ClusterIP of each) is imported with one clusterset VIP per family, in
// the order of ipFamilies, each from its range, and an EndpointSlice per
// family; the same export turned single-stack IPv4 keeps its IPv4 VIP and
// its exporter releases the IPv6 one in the broker. c3, the exporter, has
// no controller here: its record is written and its VIPs allocated (the
// allocator its controller runs) with its broker identity; c1 only
// imports, and so adopts c3's allocations and claims none.
func TestDualStackImport(t *testing.T) {
	e := newEnv(t, "c1")
	ctx := context.Background()
	// c3 writes its record with its broker identity; c1 reaches it
	// through a Valid Endpoint covering both families.
	e.remoteMember("c3")
	e.tunnel("c1", "c3", true, "10.97.0.0/16", "fd00:97::/108")
	e.namespace("c1", "demo")
	e.start("c1")
	c1 := e.c("c1")

	rec := mcs.ExportRecord{ClusterID: "c3", ServiceNamespace: "demo", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
		ExportCreationTimestamp: metav1.Now(), IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		ClusterIPs: []string{"10.97.0.30", "fd00:97::30"}, ReadyEndpoints: 2, ServingEndpoints: 2,
		Ports: []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	if err := writeRecord(t, e.member("c3"), "c3", rec); err != nil {
		t.Fatal(err)
	}
	v4, v6 := mcs.MustParseVIPRange(mcs.DefaultVIPRange), mcs.MustParseVIPRange(mcs.DefaultVIPRangeIPv6)
	c3alloc, err := mcs.NewFamilyVIPAllocator(v4, v6, mcs.NewBrokerVIPStore(e.member("c3"), "c3"), "c3")
	if err != nil {
		t.Fatal(err)
	}
	c3exports := func(c string) (time.Time, bool) { return time.Time{}, c == "c3" }
	web := types.NamespacedName{Namespace: "demo", Name: "web"}
	if _, err := c3alloc.Allocate(ctx, web, rec.IPFamilies, c3exports, nil); err != nil {
		t.Fatal(err)
	}
	var vip4 netip.Addr
	kubetest.Eventually(t, "an IPv4 and an IPv6 VIP, and a slice per family", func() error {
		ips, err := importIPs(c1, "demo", "web")
		if err != nil {
			return err
		}
		if len(ips) != 2 || !v4.Contains(ips[0]) || !v6.Contains(ips[1]) {
			return fmt.Errorf("spec.ips %v, want an address of %s, then one of %s", ips, v4.Prefix(), v6.Prefix())
		}
		vip4 = ips[0]
		return wantSlices(c1, map[discoveryv1.AddressType]string{discoveryv1.AddressTypeIPv4: "10.97.0.30", discoveryv1.AddressTypeIPv6: "fd00:97::30"})
	})

	rec.IPFamilies, rec.ClusterIPs = []corev1.IPFamily{corev1.IPv4Protocol}, []string{"10.97.0.30"}
	if err := writeRecord(t, e.member("c3"), "c3", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := c3alloc.Allocate(ctx, web, rec.IPFamilies, c3exports, nil); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, "single-stack: the IPv4 VIP stays, the IPv6 one is released", func() error {
		ips, err := importIPs(c1, "demo", "web")
		if err != nil {
			return err
		}
		if len(ips) != 1 || ips[0] != vip4 {
			return fmt.Errorf("spec.ips %v, want [%s]", ips, vip4)
		}
		var held causewayv1alpha1.VIPAllocationList
		if err := e.broker.Client.List(ctx, &held, client.MatchingLabels{mcs.LabelVIPServiceNamespace: "demo", mcs.LabelVIPServiceName: "web"}); err != nil {
			return err
		}
		if len(held.Items) != 1 || held.Items[0].Name != mcs.VIPObjectName(vip4) {
			return fmt.Errorf("%d allocations in the broker, want only %s", len(held.Items), mcs.VIPObjectName(vip4))
		}
		return wantSlices(c1, map[discoveryv1.AddressType]string{discoveryv1.AddressTypeIPv4: "10.97.0.30"})
	})
}

// importIPs returns the spec.ips of ServiceImport ns/name.
func importIPs(c client.Client, ns, name string) ([]netip.Addr, error) {
	var si mcsv1beta1.ServiceImport
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &si); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, s := range si.Spec.IPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// wantSlices checks that demo/web's multicluster EndpointSlices are one
// per address type in want, holding want's address.
func wantSlices(c client.Client, want map[discoveryv1.AddressType]string) error {
	var list discoveryv1.EndpointSliceList
	if err := c.List(context.Background(), &list, client.InNamespace("demo"), client.MatchingLabels{mcsv1beta1.LabelServiceName: "web"}); err != nil {
		return err
	}
	got := map[discoveryv1.AddressType]string{}
	for _, s := range list.Items {
		for _, ep := range s.Endpoints {
			got[s.AddressType] += fmt.Sprint(ep.Addresses)
		}
	}
	for typ, addr := range want {
		if got[typ] != "["+addr+"]" {
			return fmt.Errorf("slices hold %v, want %v", got, want)
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("slices hold %v, want %v", got, want)
	}
	return nil
}
