package mcs

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

func TestRecordEndpointsFromSlices(t *testing.T) {
	port := func(name string, n int32) discoveryv1.EndpointPort {
		return discoveryv1.EndpointPort{Name: ptrTo(name), Port: ptrTo(n), Protocol: ptrTo(corev1.ProtocolTCP)}
	}
	ep := func(addr string, ready *bool, host string) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
		if host != "" {
			e.Hostname = ptrTo(host)
		}
		return e
	}
	a := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{port("http", 8080), port("admin", 9000)},
		Endpoints: []discoveryv1.Endpoint{ep("10.0.0.3", ptrTo(true), "p3"), ep("10.0.0.1", nil, "p1"), ep("10.0.0.2", ptrTo(false), "")}}
	// (serving unset follows ready.) The same mapping in another slice, ports in another order, with a
	// not-ready duplicate of 10.0.0.1 and a ready copy of 10.0.0.2.
	b := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{port("admin", 9000), port("http", 8080)},
		Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", ptrTo(false), ""), ep("10.0.0.2", ptrTo(true), "p2")}}
	other := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{port("http", 80)},
		Endpoints: []discoveryv1.Endpoint{ep("10.0.1.1", ptrTo(true), "")}}
	fqdn := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeFQDN, Endpoints: []discoveryv1.Endpoint{ep("example.org", nil, "")}}
	empty := discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("http", 80)}}

	got := RecordEndpointsFromSlices([]discoveryv1.EndpointSlice{a, b, other, fqdn, empty})
	want := []causewayv1alpha1.RecordEndpoints{
		{AddressType: "IPv4", Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "admin", Port: 9000}, {Name: "http", Port: 8080}},
			Backends: []causewayv1alpha1.RecordBackend{
				{Address: "10.0.0.1", Hostname: "p1", Ready: true, Serving: true},
				{Address: "10.0.0.2", Hostname: "p2", Ready: true, Serving: true},
				{Address: "10.0.0.3", Hostname: "p3", Ready: true, Serving: true},
			}},
		{AddressType: "IPv4", Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "http", Port: 80}},
			Backends: []causewayv1alpha1.RecordBackend{{Address: "10.0.1.1", Ready: true, Serving: true}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%+v\nwant\n%+v", got, want)
	}
	// Order of the input does not matter.
	if again := RecordEndpointsFromSlices([]discoveryv1.EndpointSlice{other, empty, b, fqdn, a}); !reflect.DeepEqual(again, got) {
		t.Errorf("input order changed the result:\n%+v", again)
	}
}

func TestSourceFromRecord(t *testing.T) {
	rec := ExportRecord{
		ClusterID:  "c2",
		Type:       mcsv1beta1.ClusterSetIP,
		Ports:      []causewayv1alpha1.RecordPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		ClusterIPs: []string{"10.96.0.10"},
		Endpoints: []causewayv1alpha1.RecordEndpoints{{AddressType: "IPv4",
			Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "http", Port: 8080}},
			Backends: []causewayv1alpha1.RecordBackend{
				{Address: "10.244.0.5", Hostname: "a", Ready: false, Serving: false},
				{Address: "10.244.0.6", Hostname: "b", Ready: true, Serving: true, Terminating: true},
			}}},
	}
	// ClusterSetIP: the ClusterIP at the service port, from the record as
	// the exporter publishes it (Aggregate); a terminating backend does
	// not make it ready.
	published := func(r ExportRecord) ExportRecord {
		r.Endpoints = slices.Clone(r.Endpoints)
		Aggregate(&r)
		if len(r.Endpoints) != 0 {
			t.Errorf("a published ClusterSetIP record carries endpoints: %+v", r.Endpoints)
		}
		return r
	}
	src := SourceFromRecord(published(rec), mcsv1beta1.ClusterSetIP, false)
	if len(src.Backends) != 1 || src.Backends[0].Address.String() != "10.96.0.10" || src.Backends[0].Ports["http"] != 80 || src.Backends[0].Ready || src.ReadyEndpoints != 0 {
		t.Errorf("ClusterSetIP source: %+v", src)
	}
	// Serving but not ready (terminating): serving, not ready.
	if src.Backends[0].Serving != true {
		t.Errorf("ClusterSetIP source with a serving, terminating pod is not serving: %+v", src)
	}
	rec.Endpoints[0].Backends[0].Ready = true
	if src := SourceFromRecord(published(rec), mcsv1beta1.ClusterSetIP, false); !src.Backends[0].Ready || !src.Backends[0].Serving || src.ReadyEndpoints != 1 {
		t.Errorf("ClusterSetIP source with a ready pod: %+v", src)
	}
	// Ready endpoints are counted per pod: three more ready pods, one of
	// them in another port group, a dual-stack one in both families.
	dual := rec
	dual.Endpoints = append(slices.Clone(rec.Endpoints),
		causewayv1alpha1.RecordEndpoints{AddressType: "IPv4", Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "http", Port: 8081}},
			Backends: []causewayv1alpha1.RecordBackend{{Address: "10.244.0.7", Ready: true}, {Address: "10.244.0.8", Ready: true}, {Address: "10.244.0.9", Ready: true}}},
		causewayv1alpha1.RecordEndpoints{AddressType: "IPv6", Ports: []causewayv1alpha1.RecordEndpointPort{{Name: "http", Port: 8080}},
			Backends: []causewayv1alpha1.RecordBackend{{Address: "fd00::9", Ready: true}}})
	if src := SourceFromRecord(published(dual), mcsv1beta1.ClusterSetIP, false); src.ReadyEndpoints != 4 {
		t.Errorf("ReadyEndpoints = %d, want 4 (10.244.0.5, .7, .8, .9; fd00::9 is .9's IPv6 address; .6 terminates)", src.ReadyEndpoints)
	}
	// Headless: the pods at their target ports, with hostnames.
	src = SourceFromRecord(rec, mcsv1beta1.Headless, false)
	if len(src.Backends) != 2 || src.Backends[0].Ports["http"] != 8080 || src.Backends[1].Hostname != "b" || !src.Backends[1].Terminating {
		t.Errorf("Headless source: %+v", src)
	}
	// A headless export under a ClusterSetIP import has nothing to offer.
	rec.ClusterIPs = nil
	if src := SourceFromRecord(rec, mcsv1beta1.ClusterSetIP, false); len(src.Backends) != 0 {
		t.Errorf("headless record under a ClusterSetIP import: %+v", src)
	}
}
