package mcs

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// GlobalAddressesOf returns the allocation a GlobalIngress holds for its
// Service, and whether it holds one to publish: Allocated=True, not
// released, not being deleted. The globalnet controller writes the
// object (pkg/globalnet/controller); the MCS controller reads it.
func GlobalAddressesOf(gi *causewayv1alpha1.GlobalIngress) (causewayv1alpha1.GlobalIngressSpec, bool) {
	if gi == nil || gi.DeletionTimestamp != nil || gi.Spec.ReleasedAt != nil ||
		!meta.IsStatusConditionTrue(gi.Status.Conditions, causewayv1alpha1.ConditionAllocated) {
		return causewayv1alpha1.GlobalIngressSpec{}, false
	}
	return gi.Spec, true
}

type portKey struct {
	name, proto string
	port        int32
}

// SetGlobalAddresses puts spec's global addresses into the record r of the
// same Service: ports[].global (matched by name, protocol and port) when
// spec's ClusterIP is one of the record's (the pairs lead to it: an
// allocation for an earlier ClusterIP of the Service is not published)
// and, for headless Services, backends[].globalIP (matched by pod IP).
// Call it only with an allocation that holds (GlobalAddressesOf).
func SetGlobalAddresses(r *ExportRecord, spec causewayv1alpha1.GlobalIngressSpec) {
	if spec.IP != "" && slices.Contains(r.ClusterIPs, spec.ClusterIP) {
		pairs := make(map[portKey]int32, len(spec.Ports))
		for _, p := range spec.Ports {
			pairs[portKey{p.Name, p.Protocol, p.Port}] = p.GlobalPort
		}
		for i, p := range r.Ports {
			if gp, ok := pairs[portKey{p.Name, string(p.Protocol), p.Port}]; ok {
				r.Ports[i].Global = &causewayv1alpha1.GlobalAddress{IP: spec.IP, Port: gp}
			}
		}
	}
	if len(spec.Pods) == 0 {
		return
	}
	pods := make(map[string]string, len(spec.Pods))
	for _, p := range spec.Pods {
		pods[p.PodIP] = p.GlobalIP
	}
	for i := range r.Endpoints {
		for j, b := range r.Endpoints[i].Backends {
			if g, ok := pods[b.Address]; ok {
				r.Endpoints[i].Backends[j].GlobalIP = g
			}
		}
	}
}
