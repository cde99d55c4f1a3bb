package mcs

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ContentHash agrees with equality.Semantic where an API round trip
// differs from the object written (nil or empty lists and maps), and
// differs for every change of content.
func TestContentHash(t *testing.T) {
	ready := true
	base := discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Labels: map[string]string{"a": "1"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	same := base.DeepCopy()
	same.Annotations = map[string]string{}
	same.Ports = []discoveryv1.EndpointPort{}
	same.Name, same.ResourceVersion = "other", "9" // not content
	if SliceHash(&base) != SliceHash(same) {
		t.Errorf("nil and empty ports/annotations, or metadata, change the hash")
	}
	empty := discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{}}
	if SliceHash(&empty) != SliceHash(&discoveryv1.EndpointSlice{}) {
		t.Errorf("nil and empty endpoints hash differently")
	}
	notReady := false
	for name, change := range map[string]func(s *discoveryv1.EndpointSlice){
		"label value":   func(s *discoveryv1.EndpointSlice) { s.Labels["a"] = "2" },
		"annotation":    func(s *discoveryv1.EndpointSlice) { s.Annotations = map[string]string{"b": ""} },
		"address":       func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Addresses[0] = "10.0.0.2" },
		"readiness":     func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = &notReady },
		"no readiness":  func(s *discoveryv1.EndpointSlice) { s.Endpoints[0].Conditions.Ready = nil },
		"address type":  func(s *discoveryv1.EndpointSlice) { s.AddressType = discoveryv1.AddressTypeIPv6 },
		"endpoint gone": func(s *discoveryv1.EndpointSlice) { s.Endpoints = nil },
		"owner": func(s *discoveryv1.EndpointSlice) {
			s.OwnerReferences = []metav1.OwnerReference{{Kind: "ServiceImport", Name: "x"}}
		},
	} {
		c := base.DeepCopy()
		change(c)
		if SliceHash(c) == SliceHash(&base) {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}
