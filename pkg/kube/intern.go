package kube

import (
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Strings that repeat across the objects of an informer cache (namespaces,
// label keys, well-known label values, condition types, reasons and
// messages) are shared through the standard library's unique package:
// decoding gives every object its own copy of each string, and with tens of
// thousands of cached objects those copies are a good part of the cache.

// Intern returns the shared copy of s.
func Intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// InternMeta interns an object's namespace, label and annotation keys,
// the values of the labels and annotations named in values (values of
// other labels, such as Service names, are mostly unique and stay as they
// are), and its owner references' API versions and kinds.
func InternMeta(m *metav1.ObjectMeta, values ...string) {
	m.Namespace = Intern(m.Namespace)
	m.Labels = internMap(m.Labels, values)
	m.Annotations = internMap(m.Annotations, values)
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind = Intern(r.APIVersion), Intern(r.Kind)
	}
}

// InternTypeMeta interns an object's API version and kind (set on objects
// decoded from JSON, such as custom resources).
func InternTypeMeta(t *metav1.TypeMeta) {
	t.APIVersion, t.Kind = Intern(t.APIVersion), Intern(t.Kind)
}

// internMap returns m with interned keys and the values of the keys named
// in values interned.
func internMap(m map[string]string, values []string) map[string]string {
	if len(m) == 0 {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		for _, name := range values {
			if k == name {
				v = Intern(v)
				break
			}
		}
		out[Intern(k)] = v
	}
	return out
}

// InternConditions interns the type, status, reason and (short) message of
// conditions.
func InternConditions(cs []metav1.Condition) {
	for i := range cs {
		c := &cs[i]
		c.Type = Intern(c.Type)
		c.Status = metav1.ConditionStatus(Intern(string(c.Status)))
		c.Reason = Intern(c.Reason)
		if len(c.Message) <= 256 {
			c.Message = Intern(c.Message)
		}
	}
}
