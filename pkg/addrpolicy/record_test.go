package addrpolicy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// goodRecord is a valid flat-network ClusterSetIP record of cluster c2
// (pod CIDR 10.2.0.0/16, service CIDR 10.92.0.0/16).
func goodRecord() *v1alpha1.ServiceExportRecordSpec {
	return &v1alpha1.ServiceExportRecordSpec{
		ClusterID: "c2", ServiceNamespace: "demo", ServiceName: "web", Type: mcsv1beta1.ClusterSetIP,
		ClusterIPs: []string{"10.92.0.10"},
		Ports: []v1alpha1.RecordPort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
		},
		Endpoints: []v1alpha1.RecordEndpoints{{AddressType: "IPv4",
			Ports:    []v1alpha1.RecordEndpointPort{{Name: "http", Port: 8080}, {Name: "dns", Port: 5353}},
			Backends: []v1alpha1.RecordBackend{{Address: "10.2.1.5", Hostname: "web-0", Ready: true}, {Address: "10.2.1.6", Ready: true}}}},
		ExportedLabels: map[string]string{"app.kubernetes.io/name": "web"},
	}
}

var flatClaim = Claim{ClusterID: "c2", Tunnel: true, Subnets: prefixes("10.2.0.0/16", "10.92.0.0/16")}

// globalRecord is goodRecord of a globalnet cluster whose global CIDR is
// 242.0.2.0/24; its own addresses overlap ours (10.244/10.96).
func globalRecord() *v1alpha1.ServiceExportRecordSpec {
	r := goodRecord()
	r.ClusterIPs = []string{"10.96.0.10"}
	r.Ports[0].Global = &v1alpha1.GlobalAddress{IP: "242.0.2.2", Port: 1024}
	r.Ports[1].Global = &v1alpha1.GlobalAddress{IP: "242.0.2.2", Port: 1025}
	r.Endpoints[0].Backends[0].Address, r.Endpoints[0].Backends[1].Address = "10.244.1.5", "10.244.1.6"
	return r
}

var globalClaim = Claim{ClusterID: "c2", Tunnel: true, Subnets: prefixes("242.0.2.0/24")}

func TestCheckRecord(t *testing.T) {
	cfg := Config{LocalCIDRs: prefixes("10.244.0.0/16", "10.96.0.0/16"), NodeCIDRs: prefixes("172.20.1.0/24", "198.18.0.0/15")}
	headless := func(r *v1alpha1.ServiceExportRecordSpec) { r.Type, r.ClusterIPs = mcsv1beta1.Headless, nil }
	for _, tc := range []struct {
		name   string
		record func() *v1alpha1.ServiceExportRecordSpec
		edit   func(*v1alpha1.ServiceExportRecordSpec)
		claim  Claim
		want   RecordReason // "" accepted
		msg    string
	}{
		{name: "flat", record: goodRecord, claim: flatClaim},
		{name: "flat headless", record: goodRecord, edit: headless, claim: flatClaim},
		{name: "globalnet", record: globalRecord, claim: globalClaim},
		{name: "globalnet headless", record: globalRecord, claim: globalClaim, edit: func(r *v1alpha1.ServiceExportRecordSpec) {
			headless(r)
			r.Ports[0].Global, r.Ports[1].Global = nil, nil
			r.Endpoints[0].Backends[0].GlobalIP = "242.0.2.254"
		}},
		{name: "no tunnel: addresses not placed", record: goodRecord, claim: Claim{ClusterID: "c2"},
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"10.96.0.1"} }},
		{name: "ClusterSetIP: pod addresses are not reached (host network)", record: goodRecord, claim: flatClaim,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Endpoints[0].Backends[0].Address = "172.31.0.5" }},

		{name: "ClusterIP outside", record: goodRecord, claim: flatClaim, want: RecordOutsideClaim, msg: "clusterIP 10.96.0.10 is outside",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"10.96.0.10"} }},
		{name: "headless backend outside", record: goodRecord, claim: flatClaim, want: RecordOutsideClaim, msg: "backend 172.20.1.7",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) {
				headless(r)
				r.Endpoints[0].Backends[1].Address = "172.20.1.7"
			}},
		{name: "global IP outside", record: globalRecord, claim: globalClaim, want: RecordOutsideClaim, msg: `port "dns" global IP 242.0.1.2`,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[1].Global.IP = "242.0.1.2" }},
		{name: "globalnet cluster without global addresses", record: globalRecord, claim: globalClaim, want: RecordOutsideClaim,
			msg: "carries no global address", edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[0].Global, r.Ports[1].Global = nil, nil }},
		{name: "backend in the VIP range", record: goodRecord, claim: flatClaim, want: RecordReservedAddress, msg: "clusterset VIP range",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Endpoints[0].Backends[0].Address = "243.0.0.7" }},
		{name: "ClusterIP in the IPv6 VIP range", record: goodRecord, claim: flatClaim, want: RecordReservedAddress, msg: "IPv6 clusterset VIP range",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = append(r.ClusterIPs, "fd63:6175:7365::7") }},
		{name: "backend loopback", record: goodRecord, claim: flatClaim, want: RecordReservedAddress, msg: "127.0.0.0/8",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Endpoints[0].Backends[0].Address = "127.0.0.1" }},
		{name: "ClusterIP link-local, no tunnel", record: goodRecord, claim: Claim{ClusterID: "c2"}, want: RecordReservedAddress, msg: "169.254",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"169.254.169.254"} }},
		{name: "unspecified", record: goodRecord, claim: flatClaim, want: RecordReservedAddress, msg: "not a unicast",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"0.0.0.0"} }},
		{name: "broadcast", record: goodRecord, claim: flatClaim, want: RecordReservedAddress,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"255.255.255.255"} }},
		{name: "multicast v6", record: goodRecord, claim: flatClaim, want: RecordReservedAddress, msg: "ff00::/8",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"ff02::1"} }},
		{name: "zone", record: goodRecord, claim: flatClaim, want: RecordInvalidAddress, msg: "zone",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"fd00::1%eth0"} }},
		{name: "mapped", record: goodRecord, claim: flatClaim, want: RecordInvalidAddress, msg: "IPv4-mapped",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterIPs = []string{"::ffff:10.92.0.10"} }},
		{name: "garbage", record: goodRecord, claim: flatClaim, want: RecordInvalidAddress,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Endpoints[0].Backends[0].Address = "banana" }},
		{name: "family", record: goodRecord, claim: flatClaim, want: RecordInvalidAddress, msg: "not an IPv6",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Endpoints[0].AddressType = "IPv6" }},

		{name: "claim is a /1 half", record: goodRecord, want: RecordInvalidClaim, msg: "shorter than /8",
			claim: Claim{ClusterID: "c2", Tunnel: true, Subnets: prefixes("0.0.0.0/1", "128.0.0.0/1")}},
		{name: "claim overlaps the node network", record: goodRecord, want: RecordInvalidClaim, msg: "node network",
			claim: Claim{ClusterID: "c2", Tunnel: true, Subnets: prefixes("10.92.0.0/16", "172.20.0.0/16")}},
		{name: "claim overlaps local", record: goodRecord, want: RecordInvalidClaim, msg: "overlaps local 10.96.0.0/16",
			claim: Claim{ClusterID: "c2", Tunnel: true, Subnets: prefixes("10.96.0.0/12")}},

		{name: "counts: ready and serving", record: goodRecord, claim: flatClaim,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ReadyEndpoints, r.ServingEndpoints = 5000, 5000 }},
		{name: "counts: more ready than serving", record: goodRecord, claim: flatClaim, want: RecordInvalidField, msg: "a ready endpoint serves",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ReadyEndpoints, r.ServingEndpoints = 2, 1 }},
		{name: "counts: negative", record: goodRecord, claim: flatClaim, want: RecordInvalidField, msg: "not negative",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ReadyEndpoints, r.ServingEndpoints = -1, 0 }},
		{name: "counts: a claimed weight beyond the bound", record: goodRecord, claim: flatClaim, want: RecordTooLarge, msg: "150001 ready endpoints",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ReadyEndpoints, r.ServingEndpoints = 150001, 150001 }},
		{name: "a lone part of a split record", record: goodRecord, claim: flatClaim, want: RecordInvalidField, msg: "not the joined record",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) {
				r.Part = &v1alpha1.RecordPart{Index: 1, Count: 2, Revision: "abc"}
			}},
		{name: "port 0", record: goodRecord, claim: flatClaim, want: RecordInvalidPort, msg: "outside 1–65535",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[0].Port = 0 }},
		{name: "port 65536", record: goodRecord, claim: flatClaim, want: RecordInvalidPort,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[0].Port = 65536 }},
		{name: "global port 0", record: globalRecord, claim: globalClaim, want: RecordInvalidPort, msg: "global port",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[0].Global.Port = 0 }},
		{name: "target port", record: goodRecord, claim: flatClaim, want: RecordInvalidPort, msg: "target port",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Endpoints[0].Ports[0].Port = -1 }},
		{name: "duplicate port name", record: goodRecord, claim: flatClaim, want: RecordInvalidPort, msg: "twice",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[1].Name = "http" }},
		{name: "duplicate port number", record: goodRecord, claim: flatClaim, want: RecordInvalidPort, msg: "twice",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[1].Protocol, r.Ports[1].Port = "TCP", 80 }},
		{name: "no ports", record: goodRecord, claim: flatClaim, want: RecordInvalidPort,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports = nil }},
		{name: "protocol", record: goodRecord, claim: flatClaim, want: RecordInvalidField, msg: "ICMP",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Ports[0].Protocol = "ICMP" }},
		{name: "type", record: goodRecord, claim: flatClaim, want: RecordInvalidField,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Type = "LoadBalancer" }},
		{name: "another cluster's ID", record: goodRecord, claim: flatClaim, want: RecordInvalidField, msg: `clusterID "c3"`,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ClusterID = "c3" }},
		{name: "service name", record: goodRecord, claim: flatClaim, want: RecordInvalidField,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ServiceName = "Web_1" }},
		{name: "affinity timeout", record: goodRecord, claim: flatClaim, want: RecordInvalidField,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) {
				r.SessionAffinity = corev1.ServiceAffinityClientIP
				r.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: new(int32(0))}}
			}},
		{name: "label", record: goodRecord, claim: flatClaim, want: RecordInvalidField, msg: "exported label",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.ExportedLabels["x"] = "not a label value!" }},
		{name: "address type", record: goodRecord, claim: flatClaim, want: RecordInvalidField,
			edit: func(r *v1alpha1.ServiceExportRecordSpec) { r.Endpoints[0].AddressType = "FQDN" }},

		{name: "huge port list", record: goodRecord, claim: flatClaim, want: RecordTooLarge, msg: "101 ports",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) {
				r.Ports = nil
				for i := range 101 {
					r.Ports = append(r.Ports, v1alpha1.RecordPort{Protocol: "TCP", Port: int32(1 + i)})
				}
			}},
		{name: "too many backends in total", record: goodRecord, claim: flatClaim, want: RecordTooLarge, msg: "10001 backends",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) {
				g := r.Endpoints[0]
				g.Backends = make([]v1alpha1.RecordBackend, 1000)
				r.Endpoints = nil
				for range 10 {
					r.Endpoints = append(r.Endpoints, g)
				}
				r.Endpoints[0].Backends = append(r.Endpoints[0].Backends, v1alpha1.RecordBackend{})
			}},
		{name: "long hostname", record: goodRecord, claim: flatClaim, want: RecordTooLarge, msg: "hostname",
			edit: func(r *v1alpha1.ServiceExportRecordSpec) {
				r.Endpoints[0].Backends[0].Hostname = strings.Repeat("a", 64)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.record()
			if tc.edit != nil {
				tc.edit(r)
			}
			err := CheckRecord(cfg, r, tc.claim)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *RecordError
			if !errors.As(err, &re) || re.Reason != tc.want || !strings.Contains(re.Message, tc.msg) {
				t.Fatalf("CheckRecord = %v, want %s containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

// TestRecordSubnetsFromDecide: what Decide accepts for a remote is what
// CheckRecord lets its records claim — the two rules agree on one space.
func TestRecordSubnetsFromDecide(t *testing.T) {
	cfg := Config{LocalCIDRs: prefixes("10.244.0.0/16", "10.96.0.0/16"), NodeCIDRs: prefixes("172.20.1.0/24")}
	ds := Decide(cfg, []Remote{
		{ClusterID: "c2", Endpoint: &Endpoint{Subnets: []string{"10.2.0.0/16", "10.92.0.0/16"}}},
		{ClusterID: "c3", Endpoint: &Endpoint{Subnets: []string{"172.20.0.0/16"}}},
	})
	if err := CheckRecord(cfg, goodRecord(), Claim{ClusterID: "c2", Tunnel: ds[0].Endpoint.Valid, Subnets: ds[0].Accepted()}); err != nil {
		t.Errorf("c2's record refused: %v", err)
	}
	if ds[1].Endpoint.Valid || !strings.Contains(ds[1].Endpoint.Message, "node network") {
		t.Errorf("c3 claiming the node network: %+v", ds[1].Endpoint)
	}
}

// TestCheckRecordPerFamily: under globalnet an IPv4 address is reached
// through the global IP:port, an IPv6 one directly — inside the claim's
// IPv6 subnets, or, when the claim has none, not at all (no refusal).
func TestCheckRecordPerFamily(t *testing.T) {
	cfg := Config{LocalCIDRs: prefixes("10.244.0.0/16", "10.96.0.0/16", "fd00:10:244:1::/64", "fd00:10:96:1::/112")}
	dual := func() *v1alpha1.ServiceExportRecordSpec {
		r := globalRecord()
		r.ClusterIPs = append(r.ClusterIPs, "fd00:10:96:2::a")
		r.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
		return r
	}
	dualClaim := Claim{ClusterID: "c2", Tunnel: true, Subnets: prefixes("242.0.2.0/24", "fd00:10:96:2::/112", "fd00:10:244:2::/64")}
	r := dual()
	if !ReachedThroughGlobal(r, netip.MustParseAddr("10.96.0.10")) || ReachedThroughGlobal(r, netip.MustParseAddr("fd00:10:96:2::a")) {
		t.Fatal("want IPv4 through the global pair, IPv6 directly")
	}
	if ReachedThroughGlobal(goodRecord(), netip.MustParseAddr("10.92.0.10")) {
		t.Fatal("a record without global addresses is reached directly")
	}
	for _, tc := range []struct {
		name  string
		claim Claim
		want  RecordReason // "" accepted
	}{
		{"IPv6 ClusterIP inside the claim's IPv6 subnets", dualClaim, ""},
		{"claim without IPv6: the IPv6 ClusterIP is not reached, no refusal", globalClaim, ""},
		{"IPv6 ClusterIP outside the claim's IPv6 subnets", Claim{ClusterID: "c2", Tunnel: true, Subnets: prefixes("242.0.2.0/24", "fd00:10:244:2::/64")}, RecordOutsideClaim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRecord(cfg, dual(), tc.claim)
			var re *RecordError
			if tc.want == "" && err != nil || tc.want != "" && (!errors.As(err, &re) || re.Reason != tc.want) {
				t.Fatalf("CheckRecord = %v, want %q", err, tc.want)
			}
		})
	}
	if !Reaches(dualClaim.Subnets, netip.MustParseAddr("fd00::1")) || Reaches(globalClaim.Subnets, netip.MustParseAddr("fd00::1")) ||
		!Reaches(globalClaim.Subnets, netip.MustParseAddr("::ffff:10.0.0.1")) {
		t.Fatal("Reaches: a family is carried when the subnets hold one prefix of it")
	}
}
