package mcs

import (
	"maps"
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
)

// BuildServiceImport returns the desired ServiceImport for a merge result:
// metadata (name, namespace, the exported labels and annotations of the merge),
// spec (with vips as spec.ips when the type is ClusterSetIP) and
// status.clusters. Spec and status are written separately (status is a
// subresource); conditions are left to the controller.
func BuildServiceImport(m MergeResult, namespace, name string, vips []netip.Addr) *mcsv1beta1.ServiceImport {
	si := &mcsv1beta1.ServiceImport{
		TypeMeta: metav1.TypeMeta{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   namespace,
			Name:        name,
			Labels:      maps.Clone(m.Labels),
			Annotations: maps.Clone(m.Annotations),
		},
		Spec: *m.Spec.DeepCopy(),
	}
	si.Spec.IPs = nil
	if si.Spec.Type == mcsv1beta1.ClusterSetIP {
		for _, v := range vips {
			si.Spec.IPs = append(si.Spec.IPs, v.String())
		}
	}
	if si.Spec.Ports == nil {
		si.Spec.Ports = []mcsv1beta1.ServicePort{} // required field
	}
	si.Status.Clusters = append([]mcsv1beta1.ClusterStatus(nil), m.Clusters...)
	return si
}

// SlicePlan is what to do to the existing EndpointSlices of one import to
// reach the desired ones.
type SlicePlan struct {
	// Create are desired slices that do not exist.
	Create []discoveryv1.EndpointSlice
	// Update are desired slices whose existing copy differs; each carries
	// the existing resourceVersion.
	Update []discoveryv1.EndpointSlice
	// Delete are existing slices that are not desired.
	Delete []ExistingSlice
}

// Empty tells whether the plan changes nothing.
func (p SlicePlan) Empty() bool { return len(p.Create)+len(p.Update)+len(p.Delete) == 0 }

// ExistingSlice is what PlanEndpointSlices needs of an existing slice: its
// identity and the SliceHash of its content (what a cache of the slices
// written here keeps instead of the content).
type ExistingSlice struct {
	Namespace, Name, ResourceVersion string
	Hash                             string
}

// ExistingSlices returns the slices of have managed by ManagedBy (the
// others are not this controller's) as PlanEndpointSlices takes them.
func ExistingSlices(have []discoveryv1.EndpointSlice) []ExistingSlice {
	var out []ExistingSlice
	for i := range have {
		if s := &have[i]; s.Labels[discoveryv1.LabelManagedBy] == ManagedBy {
			out = append(out, ExistingSlice{Namespace: s.Namespace, Name: s.Name, ResourceVersion: s.ResourceVersion, Hash: SliceHash(s)})
		}
	}
	return out
}

// PlanEndpointSlices compares the desired slices of one ServiceImport
// (RenderEndpointSlices) with its existing ones by name, and returns the
// changes. Slices of equal content (SliceHash) are left alone, so a resync
// of an unchanged import makes no API calls.
func PlanEndpointSlices(want []discoveryv1.EndpointSlice, have []ExistingSlice) SlicePlan {
	existing := make(map[string]ExistingSlice, len(have))
	for _, s := range have {
		existing[s.Name] = s
	}
	var p SlicePlan
	for i := range want {
		w := &want[i]
		h, ok := existing[w.Name]
		delete(existing, w.Name)
		switch {
		case !ok:
			p.Create = append(p.Create, *w)
		case SliceHash(w) != h.Hash:
			u := *w.DeepCopy()
			u.ResourceVersion = h.ResourceVersion
			p.Update = append(p.Update, u)
		}
	}
	for _, s := range have {
		if _, ok := existing[s.Name]; ok {
			p.Delete = append(p.Delete, s)
		}
	}
	return p
}
