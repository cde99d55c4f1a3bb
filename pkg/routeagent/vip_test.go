package routeagent

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/vip"
)

func slice(ns, svc, cluster string, ports map[string]int32, proto corev1.Protocol, eps map[string]*bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-" + cluster, Labels: map[string]string{LabelServiceName: svc, LabelSourceCluster: cluster}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for name, p := range ports {
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(p), Protocol: ptr.To(proto)})
	}
	for addr, ready := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}})
	}
	return s
}

func TestVIPDesired(t *testing.T) {
	imp := func(ns, name, ip string, typ mcsv1beta1.ServiceImportType, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
		si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: mcsv1beta1.ServiceImportSpec{Type: typ, Ports: ports}}
		if ip != "" {
			si.Spec.IPs = []string{ip}
		}
		return si
	}
	http := mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	echo := mcsv1beta1.ServicePort{Name: "echo", Protocol: corev1.ProtocolUDP, Port: 8080}
	key := func(ip string, port uint16, p vip.Proto) vip.ServiceKey {
		return vip.ServiceKey{VIP: netip.MustParseAddr(ip), Port: port, Proto: p}
	}
	be := func(ip string, port uint16, weight uint32) vip.Backend {
		return vip.Backend{Addr: netip.MustParseAddr(ip), Port: port, Weight: weight}
	}

	weighted := func(s *discoveryv1.EndpointSlice, ready string) *discoveryv1.EndpointSlice {
		s.Annotations = map[string]string{mcs.AnnotationReadyEndpoints: ready}
		return s
	}
	got := VIPDesired("c1",
		[]*mcsv1beta1.ServiceImport{
			imp("demo", "whereami", "243.0.0.10", mcsv1beta1.ClusterSetIP, http, echo),
			imp("demo", "headless", "", mcsv1beta1.Headless, http),             // no VIP: not in the table
			imp("demo", "nobody", "243.0.0.11", mcsv1beta1.ClusterSetIP, http), // no slices: no backends
			imp("other", "whereami", "243.0.0.12", mcsv1beta1.ClusterSetIP, http),
		},
		[]*discoveryv1.EndpointSlice{
			weighted(slice("demo", "whereami", "c1", map[string]int32{"http": 80}, corev1.ProtocolTCP, map[string]*bool{"10.96.0.5": ptr.To(true)}), "1"),
			weighted(slice("demo", "whereami", "c3", map[string]int32{"http": 80}, corev1.ProtocolTCP, map[string]*bool{"10.97.0.9": nil, "10.97.0.8": ptr.To(false)}), "3"),
			// No annotation (or a malformed one): weight 1.
			weighted(slice("demo", "whereami", "c3", map[string]int32{"echo": 8080}, corev1.ProtocolUDP, map[string]*bool{"10.97.0.9": ptr.To(true)}), "many"),
			// Same name, other namespace: belongs to other/whereami only.
			slice("other", "whereami", "c2", map[string]int32{"http": 8443}, corev1.ProtocolTCP, map[string]*bool{"10.98.0.1": ptr.To(true)}),
			// A slice of a Service with no import changes nothing.
			slice("demo", "stray", "c1", map[string]int32{"http": 80}, corev1.ProtocolTCP, map[string]*bool{"10.96.0.99": ptr.To(true)}),
		},
	)
	want := map[vip.ServiceKey]vip.Service{
		key("243.0.0.10", 80, vip.TCP):   {Backends: []vip.Backend{be("10.96.0.5", 80, 1), be("10.97.0.9", 80, 3)}}, // not-ready 10.97.0.8 left out
		key("243.0.0.10", 8080, vip.UDP): {Backends: []vip.Backend{be("10.97.0.9", 8080, 1)}},
		key("243.0.0.11", 80, vip.TCP):   {Backends: []vip.Backend{}},
		key("243.0.0.12", 80, vip.TCP):   {Backends: []vip.Backend{be("10.98.0.1", 8443, 1)}}, // the slice's port, not the VIP's
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("VIPDesired:\n got %v\nwant %v", got, want)
	}
}

// TestVIPDesiredAffinity: sessionAffinity ClientIP gives the import's
// timeout, 10800 s when unset; None gives none.
func TestVIPDesiredAffinity(t *testing.T) {
	k := vip.ServiceKey{VIP: netip.MustParseAddr("243.0.0.10"), Port: 80, Proto: vip.TCP}
	for _, tc := range []struct {
		name     string
		affinity corev1.ServiceAffinity
		config   *corev1.SessionAffinityConfig
		want     uint32
	}{
		{"unset", "", nil, 0},
		{"None", corev1.ServiceAffinityNone, nil, 0},
		{"ClientIP default", corev1.ServiceAffinityClientIP, nil, 10800},
		{"ClientIP 60 s", corev1.ServiceAffinityClientIP, &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}, 60},
	} {
		si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "whereami"},
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"243.0.0.10"},
				Ports:           []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
				SessionAffinity: tc.affinity, SessionAffinityConfig: tc.config}}
		if got := VIPDesired("c1", []*mcsv1beta1.ServiceImport{si}, nil)[k].AffinitySeconds; got != tc.want {
			t.Errorf("%s: affinity %d s, want %d", tc.name, got, tc.want)
		}
	}
}

// TestVIPDesiredTrafficPolicy: internalTrafficPolicy Local keeps the local
// cluster's backend only (none when it exports nothing ready);
// trafficDistribution PreferClose keeps it while it is ready and falls back
// to every cluster.
func TestVIPDesiredTrafficPolicy(t *testing.T) {
	http := mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	k := vip.ServiceKey{VIP: netip.MustParseAddr("243.0.0.10"), Port: 80, Proto: vip.TCP}
	local := vip.Backend{Addr: netip.MustParseAddr("10.96.0.5"), Port: 80, Weight: 1}
	remote := vip.Backend{Addr: netip.MustParseAddr("242.0.1.2"), Port: 1024, Weight: 1}
	slices := func(localReady bool) []*discoveryv1.EndpointSlice {
		return []*discoveryv1.EndpointSlice{
			slice("demo", "whereami", "c1", map[string]int32{"http": 80}, corev1.ProtocolTCP, map[string]*bool{"10.96.0.5": ptr.To(localReady)}),
			slice("demo", "whereami", "c2", map[string]int32{"http": 1024}, corev1.ProtocolTCP, map[string]*bool{"242.0.1.2": ptr.To(true)}),
		}
	}
	for _, tc := range []struct {
		name       string
		itp        corev1.ServiceInternalTrafficPolicy
		td         string
		localReady bool
		want       []vip.Backend
	}{
		{"default", "", "", true, []vip.Backend{local, remote}},
		{"Cluster", corev1.ServiceInternalTrafficPolicyCluster, "", true, []vip.Backend{local, remote}},
		{"Local", corev1.ServiceInternalTrafficPolicyLocal, "", true, []vip.Backend{local}},
		{"Local, local not ready", corev1.ServiceInternalTrafficPolicyLocal, "", false, []vip.Backend{}},
		{"PreferClose", "", corev1.ServiceTrafficDistributionPreferClose, true, []vip.Backend{local}},
		{"PreferClose, local not ready", "", corev1.ServiceTrafficDistributionPreferClose, false, []vip.Backend{remote}},
	} {
		si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "whereami"},
			Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"243.0.0.10"}, Ports: []mcsv1beta1.ServicePort{http}}}
		if tc.itp != "" {
			si.Spec.InternalTrafficPolicy = &tc.itp
		}
		if tc.td != "" {
			si.Spec.TrafficDistribution = &tc.td
		}
		got := VIPDesired("c1", []*mcsv1beta1.ServiceImport{si}, slices(tc.localReady))
		if !reflect.DeepEqual(got[k].Backends, tc.want) {
			t.Errorf("%s: backends %v, want %v", tc.name, got[k].Backends, tc.want)
		}
	}
}

// TestVIPDesiredDualStack: a dual-stack import's IPv4 VIP gets the IPv4
// slices' backends and its IPv6 VIP the IPv6 slices', each weighted by its
// slice; addresses of the other family (a misfiled slice, an IPv4-mapped
// address) and IPv4-mapped VIPs are left out.
func TestVIPDesiredDualStack(t *testing.T) {
	v6 := func(s *discoveryv1.EndpointSlice, ready string) *discoveryv1.EndpointSlice {
		s.Name += "-ipv6"
		s.AddressType = discoveryv1.AddressTypeIPv6
		s.Annotations = map[string]string{mcs.AnnotationReadyEndpoints: ready}
		return s
	}
	ports := map[string]int32{"http": 80}
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web"}, Spec: mcsv1beta1.ServiceImportSpec{
		Type: mcsv1beta1.ClusterSetIP, IPs: []string{"243.0.0.10", "fd63:6175:7365::10", "::ffff:243.0.0.11"},
		IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
		Ports:      []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
	}}
	got := VIPDesired("c1", []*mcsv1beta1.ServiceImport{si}, []*discoveryv1.EndpointSlice{
		slice("demo", "web", "c1", ports, corev1.ProtocolTCP, map[string]*bool{"10.96.0.5": ptr.To(true), "fd00:96::6": ptr.To(true)}),
		v6(slice("demo", "web", "c1", ports, corev1.ProtocolTCP, map[string]*bool{"fd00:96::5": ptr.To(true), "10.96.0.6": ptr.To(true)}), "2"),
		v6(slice("demo", "web", "c3", ports, corev1.ProtocolTCP, map[string]*bool{"fd00:97::9": ptr.To(true), "::ffff:10.97.0.9": ptr.To(true)}), "3"),
	})
	b := func(ip string, weight uint32) vip.Backend {
		return vip.Backend{Addr: netip.MustParseAddr(ip), Port: 80, Weight: weight}
	}
	want := map[vip.ServiceKey]vip.Service{
		{VIP: netip.MustParseAddr("243.0.0.10"), Port: 80, Proto: vip.TCP}:         {Backends: []vip.Backend{b("10.96.0.5", 1)}},
		{VIP: netip.MustParseAddr("fd63:6175:7365::10"), Port: 80, Proto: vip.TCP}: {Backends: []vip.Backend{b("fd00:96::5", 2), b("fd00:97::9", 3)}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("VIPDesired:\n got %v\nwant %v", got, want)
	}
	// What the kernel table accepts: every backend of its VIP's family.
	if err := vip.NewFake(vip.Limits{}).Set(t.Context(), got); err != nil {
		t.Errorf("the fake table refuses the dual-stack desired state: %v", err)
	}
}
