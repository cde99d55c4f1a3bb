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

// InternMeta interns an object's namespace and label keys, and the values
// of the labels named in values (values of other labels, such as Service
// names, are mostly unique and stay as they are).
func InternMeta(m *metav1.ObjectMeta, values ...string) {
	m.Namespace = Intern(m.Namespace)
	if len(m.Labels) == 0 {
		return
	}
	labels := make(map[string]string, len(m.Labels))
	for k, v := range m.Labels {
		for _, name := range values {
			if k == name {
				v = Intern(v)
				break
			}
		}
		labels[Intern(k)] = v
	}
	m.Labels = labels
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
