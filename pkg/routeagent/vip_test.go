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
	be := func(ip string, port uint16) vip.Backend {
		return vip.Backend{Addr: netip.MustParseAddr(ip), Port: port}
	}

	got := VIPDesired(
		[]*mcsv1beta1.ServiceImport{
			imp("demo", "whereami", "243.0.0.10", mcsv1beta1.ClusterSetIP, http, echo),
			imp("demo", "headless", "", mcsv1beta1.Headless, http),             // no VIP: not in the table
			imp("demo", "nobody", "243.0.0.11", mcsv1beta1.ClusterSetIP, http), // no slices: no backends
			imp("other", "whereami", "243.0.0.12", mcsv1beta1.ClusterSetIP, http),
		},
		[]*discoveryv1.EndpointSlice{
			slice("demo", "whereami", "c1", map[string]int32{"http": 80}, corev1.ProtocolTCP, map[string]*bool{"10.96.0.5": ptr.To(true)}),
			slice("demo", "whereami", "c3", map[string]int32{"http": 80}, corev1.ProtocolTCP, map[string]*bool{"10.97.0.9": nil, "10.97.0.8": ptr.To(false)}),
			slice("demo", "whereami", "c3", map[string]int32{"echo": 8080}, corev1.ProtocolUDP, map[string]*bool{"10.97.0.9": ptr.To(true)}),
			// Same name, other namespace: belongs to other/whereami only.
			slice("other", "whereami", "c2", map[string]int32{"http": 8443}, corev1.ProtocolTCP, map[string]*bool{"10.98.0.1": ptr.To(true)}),
			// A slice of a Service with no import changes nothing.
			slice("demo", "stray", "c1", map[string]int32{"http": 80}, corev1.ProtocolTCP, map[string]*bool{"10.96.0.99": ptr.To(true)}),
		},
	)
	want := map[vip.ServiceKey][]vip.Backend{
		key("243.0.0.10", 80, vip.TCP):   {be("10.96.0.5", 80), be("10.97.0.9", 80)}, // not-ready 10.97.0.8 left out
		key("243.0.0.10", 8080, vip.UDP): {be("10.97.0.9", 8080)},
		key("243.0.0.11", 80, vip.TCP):   {},
		key("243.0.0.12", 80, vip.TCP):   {be("10.98.0.1", 8443)}, // the slice's port, not the VIP's
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("VIPDesired:\n got %v\nwant %v", got, want)
	}
}
