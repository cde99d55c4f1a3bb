package routeagent

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/pkg/mcs"
)

// BenchmarkVIPDesired measures what one sync of the route agent computes:
// a node's VIP table from its cache (ServiceImports and parsed slices) at
// a ClusterSet's size, services imports with two ports each exported by
// members clusters with one ready endpoint each.
//
//	go test -run '^$' -bench BenchmarkVIPDesired ./pkg/routeagent/
func BenchmarkVIPDesired(b *testing.B) {
	for _, size := range []struct{ services, members int }{{100, 100}, {500, 100}} {
		b.Run(fmt.Sprintf("services=%d/members=%d", size.services, size.members), func(b *testing.B) {
			imports, eps := clusterSetInputs(size.services, size.members)
			parsed := parseVIPSlices(eps)
			b.ReportAllocs()
			var st VIPState
			for b.Loop() {
				st = vipDesired(vipConfig, imports, parsed)
			}
			if want := 2 * size.services; len(st.Services) != want {
				b.Fatalf("%d services in the table, want %d", len(st.Services), want)
			}
		})
	}
}

// clusterSetInputs are a node's VIP inputs when each of members clusters
// exports the same services Services: a ClusterSetIP import with a TCP
// and a UDP port for each Service, and one slice per member with one
// ready endpoint (the member's global IP) at ports 1024 and 1025.
func clusterSetInputs(services, members int) ([]*mcsv1beta1.ServiceImport, []*discoveryv1.EndpointSlice) {
	http := mcsv1beta1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	echo := mcsv1beta1.ServicePort{Name: "echo", Protocol: corev1.ProtocolUDP, Port: 8080}
	var imports []*mcsv1beta1.ServiceImport
	var eps []*discoveryv1.EndpointSlice
	ready := true
	for i := range services {
		name := fmt.Sprintf("s%d", i)
		imports = append(imports, testImport("bench", name, fmt.Sprintf("243.0.%d.%d", i/250, i%250+1), mcsv1beta1.ClusterSetIP, http, echo))
		for m := range members {
			s := slice("bench", name, fmt.Sprintf("m%d", m), map[string]int32{"http": 1024, "echo": 1025}, corev1.ProtocolTCP,
				map[string]*bool{fmt.Sprintf("242.%d.%d.2", m/250, m%250): &ready})
			for j := range s.Ports {
				if *s.Ports[j].Name == echo.Name {
					s.Ports[j].Protocol = ptr.To(corev1.ProtocolUDP)
				}
			}
			s.Annotations = map[string]string{mcs.AnnotationReadyEndpoints: "1"}
			eps = append(eps, s)
		}
	}
	return imports, eps
}
