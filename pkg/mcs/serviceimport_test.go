package mcs

import (
	"net/netip"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

func TestBuildServiceImport(t *testing.T) {
	m := Merge([]ExportRecord{
		rec("c1", 0, func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": "web"} }),
		rec("c2", 1),
	})
	vip := netip.MustParseAddr("243.0.3.4")
	si := BuildServiceImport(m, "kubecon", "whereami", []netip.Addr{vip})
	if si.Namespace != "kubecon" || si.Name != "whereami" || si.Labels["tier"] != "web" {
		t.Errorf("metadata %+v", si.ObjectMeta)
	}
	if !slices.Equal(si.Spec.IPs, []string{"243.0.3.4"}) || si.Spec.Type != mcsv1beta1.ClusterSetIP {
		t.Errorf("spec %+v", si.Spec)
	}
	if len(si.Status.Clusters) != 2 || si.Status.Clusters[1].Cluster != "c2" {
		t.Errorf("clusters %v", si.Status.Clusters)
	}
	// The merge result is not aliased.
	si.Spec.Ports[0].Port = 1
	if m.Spec.Ports[0].Port != 80 {
		t.Error("BuildServiceImport aliases the merge result's ports")
	}

	hl := BuildServiceImport(Merge([]ExportRecord{rec("c1", 0, headless, ports())}), "kubecon", "db", []netip.Addr{vip})
	if hl.Spec.IPs != nil || hl.Spec.Ports == nil {
		t.Errorf("headless: ips %v (want none), ports %v (want empty list)", hl.Spec.IPs, hl.Spec.Ports)
	}
}

func TestPlanEndpointSlices(t *testing.T) {
	in := RenderInput{
		Import: testImport(mcsv1beta1.ClusterSetIP, httpPort),
		Sources: []SourceEndpoints{
			{ClusterID: "c1", Backends: []Backend{backend("10.244.1.5", true)}},
			{ClusterID: "c2", Backends: []Backend{backend("10.245.1.5", true)}},
		},
	}
	want := RenderEndpointSlices(in)

	p := PlanEndpointSlices(want, nil)
	if len(p.Create) != 2 || len(p.Update)+len(p.Delete) != 0 {
		t.Fatalf("from nothing: %+v", p)
	}

	// What the API server returns: the same plus server-set metadata.
	have := make([]discoveryv1.EndpointSlice, len(want))
	for i, s := range want {
		have[i] = *s.DeepCopy()
		have[i].ResourceVersion = "7"
		have[i].UID = "x"
		have[i].CreationTimestamp = metav1.Now()
	}
	if p := PlanEndpointSlices(want, ExistingSlices(have)); !p.Empty() {
		t.Errorf("unchanged: %+v", p)
	}

	// c1's backend turns not ready, c2 stops exporting, a foreign slice exists.
	in.Sources = []SourceEndpoints{{ClusterID: "c1", Backends: []Backend{backend("10.244.1.5", false)}}}
	foreign := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "whereami-abcde",
		Labels: map[string]string{discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}}}
	p = PlanEndpointSlices(RenderEndpointSlices(in), ExistingSlices(append(have, foreign)))
	if len(p.Create) != 0 || len(p.Update) != 1 || len(p.Delete) != 1 {
		t.Fatalf("after change: %+v", p)
	}
	if p.Update[0].ResourceVersion != "7" || *p.Update[0].Endpoints[0].Conditions.Ready {
		t.Errorf("update %+v", p.Update[0])
	}
	if c2 := want[1]; c2.Labels[mcsv1beta1.LabelSourceCluster] != "c2" || p.Delete[0].Name != c2.Name {
		t.Errorf("deleted %s, want c2's slice %s", p.Delete[0].Name, c2.Name)
	}
}
