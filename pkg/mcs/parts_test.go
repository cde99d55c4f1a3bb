package mcs

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// backends returns n backends 10.<base>.x.y, every third not ready.
func backends(base, n int) []causewayv1alpha1.RecordBackend {
	out := make([]causewayv1alpha1.RecordBackend, n)
	for i := range out {
		ready := i%3 != 2
		out[i] = causewayv1alpha1.RecordBackend{Address: fmt.Sprintf("10.%d.%d.%d", base, i/250, i%250+1), Hostname: fmt.Sprintf("p%d", i), Ready: ready, Serving: ready}
	}
	return out
}

func headlessRecord(groups ...int) ExportRecord {
	r := ExportRecord{ClusterID: "c1", ServiceNamespace: "ns", ServiceName: "db", Type: mcsv1beta1.Headless,
		Ports: []causewayv1alpha1.RecordPort{{Name: "sql", Protocol: corev1.ProtocolTCP, Port: 5432}}}
	for i, n := range groups {
		r.Endpoints = append(r.Endpoints, causewayv1alpha1.RecordEndpoints{AddressType: "IPv4",
			Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "sql", Port: int32(5432 + i)}}, Backends: backends(i, n)})
	}
	return r
}

func countBackends(r ExportRecord) int {
	n := 0
	for _, g := range r.Endpoints {
		n += len(g.Backends)
	}
	return n
}

func byName(objs []ExportRecord) map[string]ExportRecord {
	out := map[string]ExportRecord{}
	for _, o := range objs[1:] {
		out[RecordPartName(o.ServiceNamespace, o.ServiceName, o.Part.Revision, int(o.Part.Index))] = o
	}
	return out
}

func TestSplitJoinRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups []int
		max    int
		want   []int // backends per object
	}{
		{name: "no endpoints", max: 10, want: []int{0}},
		{name: "fits", groups: []int{7}, max: 10, want: []int{7}},
		{name: "exactly the bound (backends and a port per group)", groups: []int{4, 4}, max: 10, want: []int{8}},
		{name: "one over", groups: []int{10}, max: 10, want: []int{9, 1}},
		{name: "groups cut where a bound falls", groups: []int{3, 15, 4}, max: 10, want: []int{8, 9, 5}},
		{name: "5 000 at the default bound", groups: []int{5000}, want: []int{999, 999, 999, 999, 999, 5}},
		{name: "5 001 in three groups", groups: []int{2000, 1, 3000}, want: []int{999, 999, 997, 999, 999, 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := headlessRecord(tc.groups...)
			Aggregate(&r)
			objs := SplitRecord(r, tc.max)
			var got []int
			for i, o := range objs {
				got = append(got, countBackends(o))
				if len(objs) == 1 {
					if o.Part != nil {
						t.Errorf("a record of one object has Part %+v", o.Part)
					}
					continue
				}
				if o.Part == nil || o.Part.Index != int32(i) || o.Part.Count != int32(len(objs)) || o.Part.Revision != objs[0].Part.Revision {
					t.Errorf("object %d: part %+v", i, o.Part)
				}
				if i > 0 && (len(o.Ports) != 0 || o.ReadyEndpoints != 0 || o.ClusterID != "c1" || o.ServiceName != "db" || o.Type != mcsv1beta1.Headless) {
					t.Errorf("part %d carries more or less than identity and endpoints: %+v", i, o)
				}
				items := 0
				for _, g := range o.Endpoints {
					if len(g.Backends) == 0 {
						t.Errorf("object %d has an empty group", i)
					}
					items += len(g.Backends) + len(g.Ports)
				}
				if limit := cmp.Or(tc.max, MaxRecordItems); items > limit {
					t.Errorf("object %d has %d items, more than %d", i, items, limit)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("backends per object %v, want %v", got, tc.want)
			}
			joined, err := JoinRecord(objs[0], byName(objs))
			if err != nil {
				t.Fatal(err)
			}
			if countBackends(joined) != countBackends(r) || joined.Part != nil || joined.ReadyEndpoints != r.ReadyEndpoints || !reflect.DeepEqual(joined.Ports, r.Ports) {
				t.Errorf("joined %d backends (part %v, ready %d), want %d (ready %d)", countBackends(joined), joined.Part, joined.ReadyEndpoints, countBackends(r), r.ReadyEndpoints)
			}
			var want, have []causewayv1alpha1.RecordBackend
			for _, g := range r.Endpoints {
				want = append(want, g.Backends...)
			}
			for _, g := range joined.Endpoints {
				have = append(have, g.Backends...)
			}
			if !reflect.DeepEqual(want, have) {
				t.Error("joined backends differ from the record's")
			}
			if again := SplitRecord(r, tc.max); !reflect.DeepEqual(again, objs) {
				t.Error("an unchanged record splits differently")
			}
		})
	}
}

func TestJoinRecordIncomplete(t *testing.T) {
	r := headlessRecord(25)
	objs := SplitRecord(r, 10) // head, parts 1 and 2
	changed := headlessRecord(25)
	changed.Endpoints[0].Backends[24].Ready = false
	next := SplitRecord(changed, 10)
	if next[0].Part.Revision == objs[0].Part.Revision {
		t.Fatal("a changed backend keeps the revision")
	}
	var incomplete *IncompleteRecordError
	for _, tc := range []struct {
		name    string
		objects map[string]ExportRecord
		missing int // 0: complete
	}{
		{name: "complete", objects: byName(objs)},
		{name: "complete, with the next revision's parts written already", objects: merged(byName(objs), byName(next))},
		{name: "no parts", objects: nil, missing: 1},
		{name: "last part missing", objects: without(byName(objs), RecordPartName("ns", "db", objs[0].Part.Revision, 2)), missing: 2},
		{name: "only the next revision's parts", objects: byName(next), missing: 1},
		{name: "a part whose spec disagrees with its name", objects: edited(byName(objs), RecordPartName("ns", "db", objs[0].Part.Revision, 1)), missing: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			joined, err := JoinRecord(objs[0], tc.objects)
			switch {
			case tc.missing == 0 && err != nil:
				t.Fatal(err)
			case tc.missing == 0 && countBackends(joined) != 25:
				t.Errorf("joined %d backends, want 25", countBackends(joined))
			case tc.missing != 0 && !errors.As(err, &incomplete):
				t.Fatalf("err %v, want an IncompleteRecordError", err)
			case tc.missing != 0 && (incomplete.Missing != tc.missing || incomplete.Count != 3 || !strings.Contains(err.Error(), "cluster c1")):
				t.Errorf("err %+v, want part %d of 3 missing", incomplete, tc.missing)
			}
		})
	}
}

func merged(a, b map[string]ExportRecord) map[string]ExportRecord {
	out := map[string]ExportRecord{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func without(m map[string]ExportRecord, name string) map[string]ExportRecord {
	delete(m, name)
	return m
}

func edited(m map[string]ExportRecord, name string) map[string]ExportRecord {
	p := m[name]
	p.Part = &causewayv1alpha1.RecordPart{Index: 2, Count: p.Part.Count, Revision: p.Part.Revision}
	m[name] = p
	return m
}

func TestAggregate(t *testing.T) {
	g := func(family string, bs ...causewayv1alpha1.RecordBackend) causewayv1alpha1.RecordEndpoints {
		return causewayv1alpha1.RecordEndpoints{AddressType: family, Backends: bs}
	}
	ready := func(a string) causewayv1alpha1.RecordBackend {
		return causewayv1alpha1.RecordBackend{Address: a, Ready: true, Serving: true}
	}
	terminating := func(a string) causewayv1alpha1.RecordBackend {
		return causewayv1alpha1.RecordBackend{Address: a, Ready: true, Serving: true, Terminating: true}
	}
	for _, tc := range []struct {
		name           string
		typ            mcsv1beta1.ServiceImportType
		eps            []causewayv1alpha1.RecordEndpoints
		ready, serving int32
	}{
		{name: "none", typ: mcsv1beta1.ClusterSetIP},
		{name: "not ready", typ: mcsv1beta1.ClusterSetIP, eps: []causewayv1alpha1.RecordEndpoints{g("IPv4", causewayv1alpha1.RecordBackend{Address: "10.0.0.1"})}},
		{name: "terminating serves but is not ready", typ: mcsv1beta1.ClusterSetIP,
			eps: []causewayv1alpha1.RecordEndpoints{g("IPv4", terminating("10.0.0.1"), ready("10.0.0.2"))}, ready: 1, serving: 2},
		{name: "ready counts as serving even when the slice says not serving", typ: mcsv1beta1.ClusterSetIP,
			eps: []causewayv1alpha1.RecordEndpoints{g("IPv4", causewayv1alpha1.RecordBackend{Address: "10.0.0.1", Ready: true})}, ready: 1, serving: 1},
		{name: "an address in two port groups counts once", typ: mcsv1beta1.ClusterSetIP,
			eps: []causewayv1alpha1.RecordEndpoints{g("IPv4", ready("10.0.0.1"), ready("10.0.0.2")), g("IPv4", ready("10.0.0.2"))}, ready: 2, serving: 2},
		{name: "dual-stack: the family with most", typ: mcsv1beta1.ClusterSetIP,
			eps: []causewayv1alpha1.RecordEndpoints{g("IPv4", ready("10.0.0.1"), ready("10.0.0.2")), g("IPv6", ready("fd00::1"), ready("fd00::2"), ready("fd00::3"))}, ready: 3, serving: 3},
		{name: "headless keeps its endpoints", typ: mcsv1beta1.Headless,
			eps: []causewayv1alpha1.RecordEndpoints{g("IPv4", ready("10.0.0.1"), terminating("10.0.0.2"))}, ready: 1, serving: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ExportRecord{Type: tc.typ, Endpoints: tc.eps}
			Aggregate(&r)
			if r.ReadyEndpoints != tc.ready || r.ServingEndpoints != tc.serving {
				t.Errorf("ready %d serving %d, want %d %d", r.ReadyEndpoints, r.ServingEndpoints, tc.ready, tc.serving)
			}
			if kept := len(r.Endpoints) > 0; kept != (tc.typ == mcsv1beta1.Headless && len(tc.eps) > 0) {
				t.Errorf("endpoints kept: %v", kept)
			}
		})
	}
}

// TestRecordObjectBound: the largest objects SplitRecord can give stay
// under 1 MiB of JSON (etcd refuses requests over 1.5 MiB): a head with
// every bounded field at its schema maximum and exported annotations at
// the API server's 256 KiB, with endpoints of every string at its maximum,
// either in one group (most backends per object) or in 100 groups of 100
// ports each (most group ports).
func TestRecordObjectBound(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	head := ExportRecord{ClusterID: long(63), ServiceNamespace: long(63), ServiceName: long(63), Type: mcsv1beta1.Headless,
		ExportedLabels: map[string]string{}, ExportedAnnotations: map[string]string{}}
	var ports []causewayv1alpha1.RecordEndpointPort
	for i := range 100 {
		head.Ports = append(head.Ports, causewayv1alpha1.RecordPort{Name: fmt.Sprintf("%063d", i), Protocol: corev1.ProtocolSCTP, Port: 65535,
			AppProtocol: ptrTo(long(256)), Global: &causewayv1alpha1.GlobalAddress{IP: "242.255.255.255", Port: 65535}})
		ports = append(ports, causewayv1alpha1.RecordEndpointPort{Name: fmt.Sprintf("%063d", i), Port: 65535})
	}
	for i := range 64 {
		head.ExportedLabels[fmt.Sprintf("example.com/%051d", i)] = long(63)
		head.ExportedAnnotations[fmt.Sprintf("example.com/%051d", i)] = long(256*1024/64 - 63)
	}
	backend := func(i int) causewayv1alpha1.RecordBackend {
		return causewayv1alpha1.RecordBackend{Address: fmt.Sprintf("ffff:ffff:ffff:ffff:ffff:ffff:ffff:%04x", i), Hostname: long(63), NodeName: long(253),
			GlobalIP: "242.255.255.255", Zone: long(63), Ready: true, Serving: true, Terminating: true}
	}
	oneGroup, manyGroups := head, head
	g := causewayv1alpha1.RecordEndpoints{AddressType: "IPv6", Ports: ports[:1]}
	for i := range 3 * MaxRecordItems {
		g.Backends = append(g.Backends, backend(i))
	}
	oneGroup.Endpoints = []causewayv1alpha1.RecordEndpoints{g}
	for i := range 100 {
		g := causewayv1alpha1.RecordEndpoints{AddressType: "IPv6", Ports: ports}
		for j := range 20 {
			g.Backends = append(g.Backends, backend(i*20+j))
		}
		manyGroups.Endpoints = append(manyGroups.Endpoints, g)
	}
	for name, r := range map[string]ExportRecord{"one group": oneGroup, "100 groups of 100 ports": manyGroups} {
		largest := 0
		for _, o := range SplitRecord(r, 0) {
			b, err := json.Marshal(causewayv1alpha1.ServiceExportRecord{Spec: o})
			if err != nil {
				t.Fatal(err)
			}
			largest = max(largest, len(b))
		}
		t.Logf("%s: largest object %d bytes of JSON", name, largest)
		if largest >= 1<<20 {
			t.Errorf("%s: an object of %d bytes, want < 1 MiB", name, largest)
		}
	}
}
