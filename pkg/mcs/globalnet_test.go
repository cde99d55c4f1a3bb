package mcs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
)

// globalRecord is c2's export of a two-port Service with two backends,
// one ready.
func globalRecord(headless bool) ExportRecord {
	r := ExportRecord{
		ClusterID:        "c2",
		ServiceNamespace: "gn",
		ServiceName:      "web",
		Type:             mcsv1beta1.ClusterSetIP,
		Ports: []causewayv1alpha1.RecordPort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
			{Name: "grpc", Protocol: corev1.ProtocolTCP, Port: 9090},
		},
		ClusterIPs: []string{"10.96.0.10"},
		Endpoints: []causewayv1alpha1.RecordEndpoints{{AddressType: "IPv4",
			Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "grpc", Port: 9000}, {Name: "http", Port: 8080}},
			Backends: []causewayv1alpha1.RecordBackend{
				{Address: "10.244.0.5", Hostname: "a", Ready: true, Serving: true},
				{Address: "10.244.0.6", Hostname: "b"},
			}}},
	}
	if headless {
		r.Type, r.ClusterIPs = mcsv1beta1.Headless, nil
	}
	return r
}

// dualRecord is globalRecord of a dual-stack Service: an IPv6 ClusterIP
// and one ready IPv6 backend besides.
func dualRecord(headless bool) ExportRecord {
	r := globalRecord(headless)
	r.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	if !headless {
		r.ClusterIPs = append(r.ClusterIPs, "fd00:10:96:2::10")
	}
	r.Endpoints = append(r.Endpoints, causewayv1alpha1.RecordEndpoints{AddressType: "IPv6",
		Ports:    r.Endpoints[0].Ports,
		Backends: []causewayv1alpha1.RecordBackend{{Address: "fd00:10:244:2::5", Hostname: "a", Ready: true, Serving: true}}})
	return r
}

// dualTunnel is what a dual-stack globalnet cluster's Endpoint announces:
// its global CIDR and its IPv6 pod and service CIDRs.
var dualTunnel = []netip.Prefix{netip.MustParsePrefix("242.0.2.0/24"),
	netip.MustParsePrefix("fd00:10:244:2::/64"), netip.MustParsePrefix("fd00:10:96:2::/112")}

func withGlobals(r ExportRecord) ExportRecord {
	SetGlobalAddresses(&r, causewayv1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.10", IP: "242.0.2.2",
		Ports: []causewayv1alpha1.GlobalIngressPort{
			{Name: "http", Protocol: "TCP", Port: 80, GlobalPort: 1024},
			{Name: "grpc", Protocol: "TCP", Port: 9090, GlobalPort: 1025},
		},
		Pods: []causewayv1alpha1.GlobalPodAddress{{PodIP: "10.244.0.5", GlobalIP: "242.0.2.252"}},
	})
	return r
}

// backendsString renders a source as "addr ports ready/serving" lines.
func backendsString(src SourceEndpoints) string {
	var b []string
	for _, e := range src.Backends {
		b = append(b, fmt.Sprintf("%s %v %v/%v", e.Address, e.Ports, e.Ready, e.Serving))
	}
	return strings.Join(b, "; ")
}

func TestSourceFromRecordGlobalnet(t *testing.T) {
	global := []netip.Prefix{netip.MustParsePrefix("242.0.2.0/24")}
	flat := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("10.244.0.0/16")}
	tunnel := func(subnets []netip.Prefix) Reach { return Reach{Tunnel: true, Subnets: subnets} }
	for _, tc := range []struct {
		name    string
		rec     ExportRecord
		typ     mcsv1beta1.ServiceImportType
		local   bool
		reach   Reach
		want    string
		wantWhy string // substring of the reason; "" = reachable
		// refused: substring of addrpolicy.CheckRecord's refusal of the
		// remote record ("" = accepted).
		refused string
	}{
		{name: "remote ClusterSetIP with globals uses the global IP:ports", rec: withGlobals(globalRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(global), want: "242.0.2.2 map[grpc:1025 http:1024] true/true"},
		{name: "local ClusterSetIP keeps its ClusterIP", rec: withGlobals(globalRecord(false)), local: true,
			typ: mcsv1beta1.ClusterSetIP, want: "10.96.0.10 map[grpc:9090 http:80] true/true"},
		{name: "remote ClusterSetIP without globals, flat tunnel", rec: globalRecord(false),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(flat), want: "10.96.0.10 map[grpc:9090 http:80] true/true"},
		{name: "remote without globals outside the subnets: refused", rec: globalRecord(false),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(global),
			refused: "AddressOutsideClaim: clusterIP 10.96.0.10 is outside the subnets cluster \"c2\" is reached through [242.0.2.0/24] (the record carries no global address of its family)"},
		{name: "no tunnel: not ready even with globals", rec: withGlobals(globalRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: Reach{NoTunnel: "its gateway endpoint is not valid"},
			want: "242.0.2.2 map[grpc:1025 http:1024] false/false", wantWhy: "no tunnel to cluster c2: its gateway endpoint is not valid"},
		{name: "globals outside a tunnel's subnets: refused", rec: withGlobals(globalRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(flat), refused: `port "http" global IP 242.0.2.2 is outside`},
		{name: "remote headless with globals: only pods with a global IP", rec: withGlobals(globalRecord(true)),
			typ: mcsv1beta1.Headless, reach: tunnel(global), want: "242.0.2.252 map[grpc:9000 http:8080] true/true"},
		{name: "local headless keeps pod IPs", rec: withGlobals(globalRecord(true)), local: true,
			typ: mcsv1beta1.Headless, want: "10.244.0.5 map[grpc:9000 http:8080] true/true; 10.244.0.6 map[grpc:9000 http:8080] false/false"},
		{name: "remote headless without globals over a global tunnel: refused", rec: globalRecord(true),
			typ: mcsv1beta1.Headless, reach: tunnel(global), refused: "backend 10.244.0.5 is outside"},
		// Dual-stack under globalnet: IPv4 through the global IP:port,
		// IPv6 directly (addrpolicy.ReachedThroughGlobal).
		{name: "dual-stack ClusterSetIP with globals: global IPv4 pair and the IPv6 ClusterIP", rec: withGlobals(dualRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(dualTunnel),
			want: "242.0.2.2 map[grpc:1025 http:1024] true/true; fd00:10:96:2::10 map[grpc:9090 http:80] true/true"},
		{name: "dual-stack ClusterSetIP over a tunnel without IPv6: the IPv6 ClusterIP left out", rec: withGlobals(dualRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(global), want: "242.0.2.2 map[grpc:1025 http:1024] true/true"},
		{name: "dual-stack IPv6 ClusterIP outside the tunnel's IPv6 subnets: refused", rec: withGlobals(dualRecord(false)),
			typ: mcsv1beta1.ClusterSetIP, reach: tunnel(append(slices.Clone(global), netip.MustParsePrefix("fd00:10:244:2::/64"))),
			refused: "clusterIP fd00:10:96:2::10 is outside"},
		{name: "local dual-stack ClusterSetIP keeps both ClusterIPs", rec: withGlobals(dualRecord(false)), local: true,
			typ: mcsv1beta1.ClusterSetIP, want: "10.96.0.10 map[grpc:9090 http:80] true/true; fd00:10:96:2::10 map[grpc:9090 http:80] true/true"},
		{name: "dual-stack headless with globals: IPv4 pods at their global IP, IPv6 pods directly", rec: withGlobals(dualRecord(true)),
			typ: mcsv1beta1.Headless, reach: tunnel(dualTunnel),
			want: "242.0.2.252 map[grpc:9000 http:8080] true/true; fd00:10:244:2::5 map[grpc:9000 http:8080] true/true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			Aggregate(&tc.rec) // as the exporter publishes it
			if !tc.local {
				err := addrpolicy.CheckRecord(addrpolicy.Config{}, &tc.rec, tc.reach.Claim(tc.rec.ClusterID))
				if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
					t.Fatalf("CheckRecord = %v, want refused %q", err, tc.refused)
				}
				if err != nil {
					return
				}
			}
			src := SourceFromRecord(tc.rec, tc.typ, tc.local)
			why := ""
			if !tc.local {
				src, why = Reachable(src, tc.rec, tc.reach)
			}
			if got := backendsString(src); got != tc.want {
				t.Errorf("backends\n got %s\nwant %s", got, tc.want)
			}
			if tc.wantWhy == "" && why != "" || tc.wantWhy != "" && !strings.Contains(why, tc.wantWhy) {
				t.Errorf("reason %q, want %q", why, tc.wantWhy)
			}
		})
	}
}

// TestGlobalAddressesOf: the MCS controller publishes a GlobalIngress's
// addresses only while it holds them (Allocated=True, not released, not
// being deleted), and port pairs only for the ClusterIP they lead to.
func TestGlobalAddressesOf(t *testing.T) {
	spec := causewayv1alpha1.GlobalIngressSpec{ClusterIP: "10.96.0.10", IP: "242.0.2.2",
		Ports: []causewayv1alpha1.GlobalIngressPort{{Name: "http", Protocol: "TCP", Port: 80, GlobalPort: 1024}}}
	allocated := metav1.Condition{Type: causewayv1alpha1.ConditionAllocated, Status: metav1.ConditionTrue, Reason: "Allocated"}
	exhausted := metav1.Condition{Type: causewayv1alpha1.ConditionAllocated, Status: metav1.ConditionFalse, Reason: causewayv1alpha1.ReasonGlobalPoolExhausted}
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		gi   *causewayv1alpha1.GlobalIngress
		want bool
	}{
		{"none", nil, false},
		{"allocated", &causewayv1alpha1.GlobalIngress{Spec: spec, Status: causewayv1alpha1.GlobalIngressStatus{Conditions: []metav1.Condition{allocated}}}, true},
		{"no condition yet", &causewayv1alpha1.GlobalIngress{Spec: spec}, false},
		{"pool exhausted", &causewayv1alpha1.GlobalIngress{Spec: spec, Status: causewayv1alpha1.GlobalIngressStatus{Conditions: []metav1.Condition{exhausted}}}, false},
		{"released", &causewayv1alpha1.GlobalIngress{Spec: func() causewayv1alpha1.GlobalIngressSpec {
			s := spec
			s.ReleasedAt = &metav1.MicroTime{Time: now.Time}
			return s
		}(), Status: causewayv1alpha1.GlobalIngressStatus{Conditions: []metav1.Condition{allocated}}}, false},
		{"being deleted", &causewayv1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now, Finalizers: []string{"x"}}, Spec: spec,
			Status: causewayv1alpha1.GlobalIngressStatus{Conditions: []metav1.Condition{allocated}}}, false},
	} {
		if _, ok := GlobalAddressesOf(tc.gi); ok != tc.want {
			t.Errorf("%s: usable %v, want %v", tc.name, ok, tc.want)
		}
	}

	r := globalRecord(false)
	SetGlobalAddresses(&r, spec)
	if g := r.Ports[0].Global; g == nil || g.IP != "242.0.2.2" || g.Port != 1024 || r.Ports[1].Global != nil {
		t.Errorf("ports %+v, want http at 242.0.2.2:1024 only", r.Ports)
	}
	// The Service got another ClusterIP (deleted and created again) and
	// the GlobalIngress still names the old one: no pair published.
	r = globalRecord(false)
	r.ClusterIPs = []string{"10.96.0.11"}
	SetGlobalAddresses(&r, spec)
	if r.Ports[0].Global != nil {
		t.Errorf("pair published for another ClusterIP: %+v", r.Ports[0])
	}
}
