package mcs

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func testImport(typ mcsv1beta1.ServiceImportType, ports ...mcsv1beta1.ServicePort) *mcsv1beta1.ServiceImport {
	return &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kubecon", Name: "whereami", UID: "uid-1"},
		Spec:       mcsv1beta1.ServiceImportSpec{Type: typ, Ports: ports},
	}
}

var httpPort = mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}

func backend(addr string, ready bool) Backend {
	return Backend{Address: netip.MustParseAddr(addr), Ready: ready, Serving: ready}
}

func slicesOf(all []discoveryv1.EndpointSlice, cluster string) []discoveryv1.EndpointSlice {
	var out []discoveryv1.EndpointSlice
	for _, s := range all {
		if s.Labels[mcsv1beta1.LabelSourceCluster] == cluster {
			out = append(out, s)
		}
	}
	return out
}

func addrs(s discoveryv1.EndpointSlice) []string {
	var out []string
	for _, e := range s.Endpoints {
		out = append(out, e.Addresses...)
	}
	return out
}

func TestRenderEndpointSlices(t *testing.T) {
	local1 := backend("10.244.1.5", true)
	local1.NodeName, local1.Zone = "node-a", "z1"
	remote := backend("10.245.2.7", true)
	remote.NodeName = "node-a" // a remote node that happens to share the name
	got := RenderEndpointSlices(RenderInput{
		Import:         testImport(mcsv1beta1.ClusterSetIP, httpPort),
		LocalClusterID: "c1",
		Sources: []SourceEndpoints{
			{ClusterID: "c2", Backends: []Backend{remote}, ReadyEndpoints: 3},
			{ClusterID: "c1", Backends: []Backend{local1, backend("10.244.1.6", false)}, ReadyEndpoints: 1},
		},
	})
	if len(got) != 2 {
		t.Fatalf("%d slices, want one per cluster: %+v", len(got), got)
	}
	for _, s := range got {
		if s.Namespace != "kubecon" || s.AddressType != discoveryv1.AddressTypeIPv4 {
			t.Errorf("%s: namespace %q addressType %q", s.Name, s.Namespace, s.AddressType)
		}
		if s.Labels[mcsv1beta1.LabelServiceName] != "whereami" || s.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
			t.Errorf("%s: labels %v", s.Name, s.Labels)
		}
		if _, ok := s.Labels[discoveryv1.LabelServiceName]; ok {
			t.Errorf("%s: has %s, kube-proxy would mix it into a local Service", s.Name, discoveryv1.LabelServiceName)
		}
		want := []metav1.OwnerReference{{APIVersion: "multicluster.x-k8s.io/v1beta1", Kind: "ServiceImport", Name: "whereami", UID: "uid-1", Controller: ptrTo(true)}}
		if !reflect.DeepEqual(s.OwnerReferences, want) {
			t.Errorf("%s: owner refs %+v", s.Name, s.OwnerReferences)
		}
		if len(s.Ports) != 1 || s.Ports[0].Name == nil || *s.Ports[0].Name != "http" || *s.Ports[0].Protocol != "TCP" || *s.Ports[0].Port != 80 {
			t.Errorf("%s: ports %+v", s.Name, s.Ports)
		}
		if !strings.HasPrefix(s.Name, "whereami-"+s.Labels[mcsv1beta1.LabelSourceCluster]+"-") {
			t.Errorf("name %q", s.Name)
		}
		want1 := map[string]string{"c1": "1", "c2": "3"}[s.Labels[mcsv1beta1.LabelSourceCluster]]
		if s.Annotations[AnnotationReadyEndpoints] != want1 || len(s.Annotations) != 1 {
			t.Errorf("%s: annotations %v, want %s=%s", s.Name, s.Annotations, AnnotationReadyEndpoints, want1)
		}
	}
	// Headless slices carry no weight.
	for _, s := range RenderEndpointSlices(RenderInput{Import: testImport(mcsv1beta1.Headless, httpPort), LocalClusterID: "c1",
		Sources: []SourceEndpoints{{ClusterID: "c2", Backends: []Backend{remote}}}}) {
		if s.Annotations != nil {
			t.Errorf("headless slice %s: annotations %v", s.Name, s.Annotations)
		}
	}
	// A change of the weight alone is an update.
	again := RenderEndpointSlices(RenderInput{Import: testImport(mcsv1beta1.ClusterSetIP, httpPort), LocalClusterID: "c1",
		Sources: []SourceEndpoints{{ClusterID: "c2", Backends: []Backend{remote}, ReadyEndpoints: 4}}})
	if p := PlanEndpointSlices(again, ExistingSlices(slicesOf(got, "c2"))); len(p.Update) != 1 {
		t.Errorf("ready endpoints 3 → 4: plan %+v, want one update", p)
	}
	c1 := slicesOf(got, "c1")
	if len(c1) != 1 || !slices.Equal(addrs(c1[0]), []string{"10.244.1.5", "10.244.1.6"}) {
		t.Fatalf("c1 slices %+v", c1)
	}
	e0, e1 := c1[0].Endpoints[0], c1[0].Endpoints[1]
	if !*e0.Conditions.Ready || *e1.Conditions.Ready || *e1.Conditions.Serving || *e1.Conditions.Terminating {
		t.Errorf("conditions: %+v / %+v", e0.Conditions, e1.Conditions)
	}
	if e0.NodeName == nil || *e0.NodeName != "node-a" || e0.Zone == nil || *e0.Zone != "z1" {
		t.Errorf("local endpoint topology: node %v zone %v", e0.NodeName, e0.Zone)
	}
	c2 := slicesOf(got, "c2")
	if len(c2) != 1 || c2[0].Endpoints[0].NodeName != nil {
		t.Errorf("remote node name kept: %+v", c2)
	}
}

func TestRenderNeverReadiesTerminating(t *testing.T) {
	b := backend("10.244.1.5", true)
	b.Terminating = true
	got := RenderEndpointSlices(RenderInput{
		Import:  testImport(mcsv1beta1.ClusterSetIP, httpPort),
		Sources: []SourceEndpoints{{ClusterID: "c1", Backends: []Backend{b}}},
	})
	c := got[0].Endpoints[0].Conditions
	if *c.Ready || !*c.Serving || !*c.Terminating {
		t.Errorf("terminating backend rendered ready=%v serving=%v terminating=%v", *c.Ready, *c.Serving, *c.Terminating)
	}
}

func TestRenderPortMappings(t *testing.T) {
	metrics := mcsv1beta1.ServicePort{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090}
	pod := backend("10.244.1.5", true)
	pod.Ports = map[string]int32{"http": 8080, "metrics": 9090}
	global := backend("242.1.0.4", true)
	global.Ports = map[string]int32{"http": 40001} // this cluster exports no metrics port
	nothing := backend("10.244.1.9", true)
	nothing.Ports = map[string]int32{"other": 1}
	got := RenderEndpointSlices(RenderInput{
		Import:  testImport(mcsv1beta1.ClusterSetIP, httpPort, metrics),
		Sources: []SourceEndpoints{{ClusterID: "c2", Backends: []Backend{pod, global, nothing}}},
	})
	if len(got) != 2 {
		t.Fatalf("%d slices, want one per port mapping", len(got))
	}
	byAddr := map[string][]string{}
	for _, s := range got {
		var ps []string
		for _, p := range s.Ports {
			ps = append(ps, fmt.Sprintf("%s=%d", *p.Name, *p.Port))
		}
		for _, a := range addrs(s) {
			byAddr[a] = ps
		}
	}
	want := map[string][]string{
		"10.244.1.5": {"http=8080", "metrics=9090"},
		"242.1.0.4":  {"http=40001"},
	}
	if !reflect.DeepEqual(byAddr, want) {
		t.Errorf("ports by address = %v, want %v", byAddr, want)
	}
}

func TestRenderSplitsAndNamesStably(t *testing.T) {
	var bs []Backend
	for i := range 250 {
		bs = append(bs, backend(fmt.Sprintf("10.244.%d.%d", i/200, i%200+1), i%3 != 0))
	}
	in := RenderInput{
		Import:  testImport(mcsv1beta1.Headless, httpPort),
		Sources: []SourceEndpoints{{ClusterID: "c2", Backends: bs}},
	}
	got := RenderEndpointSlices(in)
	var sizes []int
	names := map[string]bool{}
	for _, s := range got {
		sizes = append(sizes, len(s.Endpoints))
		names[s.Name] = true
	}
	sort.Ints(sizes)
	if !slices.Equal(sizes, []int{50, 100, 100}) || len(names) != 3 {
		t.Errorf("slice sizes %v, %d distinct names", sizes, len(names))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		shuffled := slices.Clone(bs)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		in.Sources[0].Backends = shuffled
		if again := RenderEndpointSlices(in); !reflect.DeepEqual(again, got) {
			t.Fatal("rendering depends on the order of backends")
		}
	}
	small := RenderEndpointSlices(RenderInput{Import: in.Import, Sources: in.Sources, MaxEndpointsPerSlice: 30})
	if len(small) != 9 {
		t.Errorf("MaxEndpointsPerSlice 30: %d slices, want 9", len(small))
	}
	other := RenderEndpointSlices(RenderInput{Import: testImport(mcsv1beta1.Headless, httpPort), Sources: []SourceEndpoints{{ClusterID: "c3", Backends: bs}}})
	for _, s := range other {
		if names[s.Name] {
			t.Errorf("cluster c3 reuses slice name %s of c2", s.Name)
		}
	}
}

func TestRenderFamiliesHostnamesDuplicates(t *testing.T) {
	v6 := backend("fd00::5", true)
	v6.Hostname = "web-0"
	bad := backend("10.244.1.6", true)
	bad.Hostname = "Not_A_Label"
	dupNotReady := backend("10.244.1.7", false)
	dupReady := backend("10.244.1.7", true)
	got := RenderEndpointSlices(RenderInput{
		Import: testImport(mcsv1beta1.Headless), // headless without ports
		Sources: []SourceEndpoints{{ClusterID: "c1", Backends: []Backend{
			v6, bad, dupNotReady, dupReady, {Address: netip.Addr{}},
		}}},
	})
	if len(got) != 2 {
		t.Fatalf("%d slices, want one per family", len(got))
	}
	for _, s := range got {
		if len(s.Ports) != 0 || s.Ports == nil {
			t.Errorf("%s: ports %v, want empty list", s.Name, s.Ports)
		}
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv6:
			if h := s.Endpoints[0].Hostname; h == nil || *h != "web-0" {
				t.Errorf("hostname %v, want web-0", h)
			}
		case discoveryv1.AddressTypeIPv4:
			if !slices.Equal(addrs(s), []string{"10.244.1.6", "10.244.1.7"}) {
				t.Errorf("v4 addresses %v", addrs(s))
			}
			if s.Endpoints[0].Hostname != nil {
				t.Errorf("invalid hostname kept: %q", *s.Endpoints[0].Hostname)
			}
			if !*s.Endpoints[1].Conditions.Ready {
				t.Error("duplicate address: the ready copy should win")
			}
		}
	}
}

// clustersetDNS answers the clusterset.local names of one headless Service
// from EndpointSlices the way CoreDNS's kubernetes plugin (multicluster
// option) does: it takes slices carrying multicluster.kubernetes.io/
// service-name, indexes them by that label and the namespace, takes the
// cluster from multicluster.kubernetes.io/source-cluster, skips endpoints
// whose ready condition is false (a missing one counts as ready), names an
// endpoint by its hostname or else its dashed IP, and reads every port's
// name, protocol and number. It returns name → sorted addresses, and
// "_<port>._<proto>.<svc>.<ns>" → sorted SRV targets.
func clustersetDNS(t *testing.T, all []discoveryv1.EndpointSlice, ns, svc string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	base := svc + "." + ns + ".svc.clusterset.local"
	for _, s := range all {
		name, ok := s.Labels[mcsv1beta1.LabelServiceName]
		if !ok || name != svc || s.Namespace != ns {
			continue
		}
		cluster := s.Labels[mcsv1beta1.LabelSourceCluster]
		for _, p := range s.Ports {
			if p.Name == nil || p.Protocol == nil || p.Port == nil {
				t.Fatalf("slice %s has a port with a nil field; CoreDNS would dereference it", s.Name)
			}
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				host := strings.NewReplacer(".", "-", ":", "-").Replace(a)
				if e.Hostname != nil {
					host = *e.Hostname
				}
				fqdn := host + "." + cluster + "." + base
				out[base] = append(out[base], a)
				out[fqdn] = append(out[fqdn], a)
				for _, p := range s.Ports {
					srv := "_" + *p.Name + "._" + strings.ToLower(string(*p.Protocol)) + "." + base
					out[srv] = append(out[srv], fmt.Sprintf("%d %s", *p.Port, fqdn))
				}
			}
		}
	}
	for k := range out {
		sort.Strings(out[k])
	}
	return out
}

// TestRenderedSlicesServeClustersetDNS is demo step 8/9: a headless Service
// exported from two clusters answers A and SRV records for the ready pods
// of both, with <hostname>.<clusterid> names.
func TestRenderedSlicesServeClustersetDNS(t *testing.T) {
	pod := func(addr, host string, ready bool) Backend {
		b := backend(addr, ready)
		b.Hostname = host
		b.Ports = map[string]int32{"http": 8080}
		return b
	}
	imp := testImport(mcsv1beta1.Headless, httpPort)
	sources := []SourceEndpoints{
		{ClusterID: "c1", Backends: []Backend{pod("10.244.1.5", "web-0", true), pod("10.244.1.6", "web-1", false)}},
		{ClusterID: "c2", Backends: []Backend{pod("10.245.1.5", "web-0", true)}},
	}
	dns := clustersetDNS(t, RenderEndpointSlices(RenderInput{Import: imp, LocalClusterID: "c2", Sources: sources}), "kubecon", "whereami")
	want := map[string][]string{
		"whereami.kubecon.svc.clusterset.local":          {"10.244.1.5", "10.245.1.5"},
		"web-0.c1.whereami.kubecon.svc.clusterset.local": {"10.244.1.5"},
		"web-0.c2.whereami.kubecon.svc.clusterset.local": {"10.245.1.5"},
		"_http._tcp.whereami.kubecon.svc.clusterset.local": {
			"8080 web-0.c1.whereami.kubecon.svc.clusterset.local",
			"8080 web-0.c2.whereami.kubecon.svc.clusterset.local",
		},
	}
	if !reflect.DeepEqual(dns, want) {
		t.Errorf("DNS view:\n got %v\nwant %v", dns, want)
	}

	// Step 9: cluster c2's pods go away: its answers disappear.
	dns = clustersetDNS(t, RenderEndpointSlices(RenderInput{Import: imp, LocalClusterID: "c2", Sources: sources[:1]}), "kubecon", "whereami")
	if got := dns["whereami.kubecon.svc.clusterset.local"]; !slices.Equal(got, []string{"10.244.1.5"}) {
		t.Errorf("after c2 left: %v", got)
	}
	if _, ok := dns["web-0.c2.whereami.kubecon.svc.clusterset.local"]; ok {
		t.Error("c2's pod still resolvable")
	}
}

func TestRenderDuplicateAddressesOrderIndependent(t *testing.T) {
	x, y := backend("10.244.1.7", true), backend("10.244.1.7", true)
	x.Hostname, y.Hostname = "web-a", "web-b"
	render := func(bs ...Backend) []discoveryv1.EndpointSlice {
		return RenderEndpointSlices(RenderInput{
			Import:  testImport(mcsv1beta1.Headless, httpPort),
			Sources: []SourceEndpoints{{ClusterID: "c1", Backends: bs}},
		})
	}
	want := render(x, y)
	for range 20 {
		if got := render(y, x); !reflect.DeepEqual(got, want) {
			t.Fatal("rendering of duplicate addresses depends on order")
		}
	}
	if n := len(want[0].Endpoints); n != 1 {
		t.Errorf("%d endpoints for one address, want 1", n)
	}
}
