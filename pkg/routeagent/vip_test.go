package routeagent

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/vip"
)

// importUID is the UID the tests give ServiceImport ns/name.
func importUID(ns, name string) types.UID { return types.UID(ns + "/" + name) }

// testImport is ServiceImport ns/name (UID importUID) with VIP ip.
func testImport(ns, name, ip string, typ mcsv1beta1.ServiceImportType, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: importUID(ns, name)},
		Spec: mcsv1beta1.ServiceImportSpec{Type: typ, Ports: ports}}
	if ip != "" {
		si.Spec.IPs = []string{ip}
	}
	return si
}

// slice is a multicluster EndpointSlice of ns/svc as the MCS controller
// writes it (managed-by, controlled by the import).
func slice(ns, svc, cluster string, ports map[string]int32, proto corev1.Protocol, eps map[string]*bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc + "-" + cluster,
			Labels: map[string]string{LabelServiceName: svc, LabelSourceCluster: cluster, discoveryv1.LabelManagedBy: mcs.ManagedBy},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName,
				Name: svc, UID: importUID(ns, svc), Controller: ptr.To(true)}}},
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

// vipConfig is the VIP configuration of a node of c1 with the default
// ranges and no limits.
var vipConfig = VIPConfig{ClusterID: "c1",
	Ranges: []netip.Prefix{netip.MustParsePrefix(addrpolicy.DefaultVIPRange), netip.MustParsePrefix(addrpolicy.DefaultVIPRangeIPv6)}}

func TestVIPDesired(t *testing.T) {
	imp := testImport
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
	got := VIPDesired(vipConfig,
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
	).Services
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
		si := testImport("demo", "whereami", "243.0.0.10", mcsv1beta1.ClusterSetIP, mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
		si.Spec.SessionAffinity, si.Spec.SessionAffinityConfig = tc.affinity, tc.config
		if got := VIPDesired(vipConfig, []*mcsv1beta1.ServiceImport{si}, nil).Services[k].AffinitySeconds; got != tc.want {
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
		si := testImport("demo", "whereami", "243.0.0.10", mcsv1beta1.ClusterSetIP, http)
		if tc.itp != "" {
			si.Spec.InternalTrafficPolicy = &tc.itp
		}
		if tc.td != "" {
			si.Spec.TrafficDistribution = &tc.td
		}
		got := VIPDesired(vipConfig, []*mcsv1beta1.ServiceImport{si}, slices(tc.localReady)).Services
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
	si := testImport("demo", "web", "", mcsv1beta1.ClusterSetIP, mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80})
	si.Spec.IPs = []string{"243.0.0.10", "fd63:6175:7365::10", "::ffff:243.0.0.11"}
	si.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	got := VIPDesired(vipConfig, []*mcsv1beta1.ServiceImport{si}, []*discoveryv1.EndpointSlice{
		slice("demo", "web", "c1", ports, corev1.ProtocolTCP, map[string]*bool{"10.96.0.5": ptr.To(true), "fd00:96::6": ptr.To(true)}),
		v6(slice("demo", "web", "c1", ports, corev1.ProtocolTCP, map[string]*bool{"fd00:96::5": ptr.To(true), "10.96.0.6": ptr.To(true)}), "2"),
		v6(slice("demo", "web", "c3", ports, corev1.ProtocolTCP, map[string]*bool{"fd00:97::9": ptr.To(true), "::ffff:10.97.0.9": ptr.To(true)}), "3"),
	}).Services
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
	if err := vip.Validate(got, vip.Limits{}); err != nil {
		t.Errorf("the table refuses the dual-stack desired state: %v", err)
	}
}

// TestVIPDesiredLocalInputs: only what the MCS controller writes is
// programmed. An import's address outside the ClusterSet's VIP ranges (a
// ClusterIP, the metadata address, a node's address, a global IP) is not;
// a slice without the controller's managed-by value, without a controller
// reference, or controlling another import (by name or UID) is not; of two
// imports holding the same VIP, the older keeps it.
func TestVIPDesiredLocalInputs(t *testing.T) {
	http := mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	ready := map[string]*bool{"10.96.0.5": ptr.To(true)}
	ports := map[string]int32{"http": 80}
	key := func(ip string) vip.ServiceKey {
		return vip.ServiceKey{VIP: netip.MustParseAddr(ip), Port: 80, Proto: vip.TCP}
	}
	backend := []vip.Backend{{Addr: netip.MustParseAddr("10.96.0.5"), Port: 80, Weight: 1}}
	for _, tc := range []struct {
		name    string
		imports []*mcsv1beta1.ServiceImport
		slices  []*discoveryv1.EndpointSlice
		want    map[vip.ServiceKey]vip.Service
		ignored int
	}{
		{name: "in the range", imports: []*mcsv1beta1.ServiceImport{testImport("demo", "web", "243.0.0.10", mcsv1beta1.ClusterSetIP, http)},
			slices: []*discoveryv1.EndpointSlice{slice("demo", "web", "c1", ports, corev1.ProtocolTCP, ready)},
			want:   map[vip.ServiceKey]vip.Service{key("243.0.0.10"): {Backends: backend}}},
		{name: "addresses outside the ranges", imports: func() []*mcsv1beta1.ServiceImport {
			si := testImport("demo", "web", "", mcsv1beta1.ClusterSetIP, http)
			si.Spec.IPs = []string{"10.96.0.1", "169.254.169.254", "172.18.1.11", "242.0.1.2", "243.16.0.1", "fd00::1", "243.0.0.10"}
			return []*mcsv1beta1.ServiceImport{si}
		}(), slices: []*discoveryv1.EndpointSlice{slice("demo", "web", "c1", ports, corev1.ProtocolTCP, ready)},
			want: map[vip.ServiceKey]vip.Service{key("243.0.0.10"): {Backends: backend}}, ignored: 6},
		{name: "a slice not managed by the MCS controller", imports: []*mcsv1beta1.ServiceImport{testImport("demo", "web", "243.0.0.10", mcsv1beta1.ClusterSetIP, http)},
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := slice("demo", "web", "c1", ports, corev1.ProtocolTCP, ready)
				s.Labels[discoveryv1.LabelManagedBy] = "tenant"
				return s
			}()},
			want: map[vip.ServiceKey]vip.Service{key("243.0.0.10"): {Backends: []vip.Backend{}}}, ignored: 1},
		{name: "a slice without a controller", imports: []*mcsv1beta1.ServiceImport{testImport("demo", "web", "243.0.0.10", mcsv1beta1.ClusterSetIP, http)},
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := slice("demo", "web", "c1", ports, corev1.ProtocolTCP, ready)
				s.OwnerReferences[0].Controller = nil
				return s
			}()},
			want: map[vip.ServiceKey]vip.Service{key("243.0.0.10"): {Backends: []vip.Backend{}}}, ignored: 1},
		{name: "a slice controlled by an import of another UID", imports: []*mcsv1beta1.ServiceImport{testImport("demo", "web", "243.0.0.10", mcsv1beta1.ClusterSetIP, http)},
			slices: []*discoveryv1.EndpointSlice{func() *discoveryv1.EndpointSlice {
				s := slice("demo", "web", "c1", ports, corev1.ProtocolTCP, ready)
				s.OwnerReferences[0].UID = "an-older-web"
				return s
			}()},
			want: map[vip.ServiceKey]vip.Service{key("243.0.0.10"): {Backends: []vip.Backend{}}}, ignored: 1},
		{name: "a slice of a Service without an import", imports: nil,
			slices: []*discoveryv1.EndpointSlice{slice("demo", "web", "c1", ports, corev1.ProtocolTCP, ready)},
			want:   map[vip.ServiceKey]vip.Service{}, ignored: 1},
		{name: "two imports with one VIP: the older keeps it", imports: func() []*mcsv1beta1.ServiceImport {
			older := testImport("demo", "web", "243.0.0.10", mcsv1beta1.ClusterSetIP, http)
			older.CreationTimestamp = metav1.Unix(100, 0)
			newer := testImport("tenant", "steal", "243.0.0.10", mcsv1beta1.ClusterSetIP, http)
			newer.CreationTimestamp = metav1.Unix(200, 0)
			return []*mcsv1beta1.ServiceImport{newer, older}
		}(), slices: []*discoveryv1.EndpointSlice{
			slice("demo", "web", "c1", ports, corev1.ProtocolTCP, ready),
			slice("tenant", "steal", "c1", ports, corev1.ProtocolTCP, map[string]*bool{"10.244.9.9": ptr.To(true)}),
		}, want: map[vip.ServiceKey]vip.Service{key("243.0.0.10"): {Backends: backend}}, ignored: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := VIPDesired(vipConfig, tc.imports, tc.slices)
			if !reflect.DeepEqual(st.Services, tc.want) || st.Ignored != tc.ignored || len(st.LeftOut) != 0 {
				t.Errorf("VIPDesired: %v, %d ignored, left out %v; want %v, %d ignored", st.Services, st.Ignored, st.LeftOut, tc.want, tc.ignored)
			}
		})
	}
}

// TestVIPDesiredLimits: a table too small for every import is filled
// import by import — those with a backend of this cluster first, then the
// older — and an import that does not fit is left out whole; what is
// programmed always passes the table's own validation, whatever the
// order of the inputs.
func TestVIPDesiredLimits(t *testing.T) {
	two := []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}}
	mk := func(name string, age int64, cluster string, backends int) (*mcsv1beta1.ServiceImport, *discoveryv1.EndpointSlice) {
		si := testImport("demo", name, fmt.Sprintf("243.0.0.%d", 10+age), mcsv1beta1.ClusterSetIP, two...)
		si.CreationTimestamp = metav1.Unix(age, 0)
		eps := map[string]*bool{}
		for i := range backends {
			eps[fmt.Sprintf("10.97.%d.%d", age, i+1)] = ptr.To(true)
		}
		return si, slice("demo", name, cluster, map[string]int32{"http": 8080, "dns": 53}, corev1.ProtocolTCP, eps)
	}
	type imp struct {
		name     string
		age      int64
		cluster  string
		backends int
	}
	for _, tc := range []struct {
		name    string
		limits  vip.Limits
		imports []imp
		want    []string // imports programmed
		leftOut []string
	}{
		{name: "room for all", limits: vip.Limits{Services: 8, Backends: 20},
			imports: []imp{{"a", 1, "c2", 1}, {"b", 2, "c2", 1}, {"c", 3, "c3", 1}},
			want:    []string{"a", "b", "c"}},
		{name: "the newest remote-only imports left out", limits: vip.Limits{Services: 4, Backends: 20},
			imports: []imp{{"a", 1, "c2", 1}, {"b", 2, "c2", 1}, {"c", 3, "c3", 1}},
			want:    []string{"a", "b"}, leftOut: []string{"demo/c"}},
		{name: "local before older", limits: vip.Limits{Services: 4, Backends: 20},
			imports: []imp{{"a", 1, "c2", 1}, {"b", 2, "c2", 1}, {"mine", 9, "c1", 1}},
			want:    []string{"a", "mine"}, leftOut: []string{"demo/b"}},
		{name: "backends: a big import left out, a smaller newer one fits", limits: vip.Limits{Services: 8, Backends: 6},
			imports: []imp{{"a", 1, "c2", 1}, {"big", 2, "c2", 3}, {"c", 3, "c3", 1}},
			want:    []string{"a", "c"}, leftOut: []string{"demo/big"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var imports []*mcsv1beta1.ServiceImport
			var eps []*discoveryv1.EndpointSlice
			for _, i := range tc.imports {
				si, s := mk(i.name, i.age, i.cluster, i.backends)
				s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
					{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)}}
				imports, eps = append(imports, si), append(eps, s)
			}
			cfg := vipConfig
			cfg.Limits = tc.limits
			for round := range 10 {
				rand.Shuffle(len(imports), func(i, j int) { imports[i], imports[j] = imports[j], imports[i] })
				rand.Shuffle(len(eps), func(i, j int) { eps[i], eps[j] = eps[j], eps[i] })
				st := VIPDesired(cfg, imports, eps)
				programmed := map[string]bool{}
				for k := range st.Services {
					for _, si := range imports {
						if si.Spec.IPs[0] == k.VIP.String() {
							programmed[si.Name] = true
						}
					}
				}
				if got := slices.Sorted(maps.Keys(programmed)); !slices.Equal(got, tc.want) || !slices.Equal(st.LeftOut, tc.leftOut) {
					t.Fatalf("round %d: programmed %v, left out %v; want %v, %v", round, got, st.LeftOut, tc.want, tc.leftOut)
				}
				if err := vip.Validate(st.Services, tc.limits); err != nil {
					t.Fatalf("round %d: the table refuses what VIPDesired gives: %v", round, err)
				}
			}
		})
	}
}

// TestVIPDesiredUnreachable: the backends of a cluster the active
// gateway found unreachable leave every service that has another
// cluster's, and stay where they are all there is.
func TestVIPDesiredUnreachable(t *testing.T) {
	http := mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	ready := map[string]int32{"http": 80}
	imports := []*mcsv1beta1.ServiceImport{
		testImport("demo", "both", "243.0.0.10", mcsv1beta1.ClusterSetIP, http),
		testImport("demo", "c2only", "243.0.0.11", mcsv1beta1.ClusterSetIP, http),
	}
	eps := []*discoveryv1.EndpointSlice{
		slice("demo", "both", "c2", ready, corev1.ProtocolTCP, map[string]*bool{"242.0.1.2": nil, "242.0.1.3": nil}),
		slice("demo", "both", "c3", ready, corev1.ProtocolTCP, map[string]*bool{"242.0.2.2": nil}),
		slice("demo", "c2only", "c2", ready, corev1.ProtocolTCP, map[string]*bool{"242.0.1.9": nil}),
	}
	addrs := func(st VIPState, ip string) []string {
		var out []string
		for _, b := range st.Services[vip.ServiceKey{VIP: netip.MustParseAddr(ip), Port: 80, Proto: vip.TCP}].Backends {
			out = append(out, b.Addr.String())
		}
		return out
	}
	cfg := vipConfig
	all := VIPDesired(cfg, imports, eps)
	if got := addrs(all, "243.0.0.10"); len(got) != 3 || all.Withdrawn != 0 {
		t.Fatalf("all reachable: backends %v, withdrawn %d", got, all.Withdrawn)
	}
	cfg.Unreachable = map[string]bool{"c2": true}
	st := VIPDesired(cfg, imports, eps)
	if got := addrs(st, "243.0.0.10"); !reflect.DeepEqual(got, []string{"242.0.2.2"}) {
		t.Errorf("c2 unreachable: both's backends %v, want c3's alone", got)
	}
	if got := addrs(st, "243.0.0.11"); !reflect.DeepEqual(got, []string{"242.0.1.9"}) {
		t.Errorf("c2 unreachable: c2only's backends %v, want c2's kept (nothing else)", got)
	}
	if st.Withdrawn != 2 {
		t.Errorf("withdrawn %d, want 2", st.Withdrawn)
	}
	cfg.Unreachable = map[string]bool{"c2": true, "c3": true}
	if got := addrs(VIPDesired(cfg, imports, eps), "243.0.0.10"); len(got) != 3 {
		t.Errorf("every cluster unreachable: backends %v, want all kept", got)
	}
}
