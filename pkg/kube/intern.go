package kube

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Interner shares one copy of strings that repeat across the objects of an
// informer cache (namespaces, label keys, well-known label values,
// condition types, reasons and messages). Decoding gives every object its
// own copy of each string; with tens of thousands of cached objects those
// copies are a good part of the cache. The table is bounded: once it holds
// max strings, new ones are returned as they are.
type Interner struct {
	mu  sync.Mutex
	m   map[string]string
	max int
}

// NewInterner returns an Interner holding at most max strings.
func NewInterner(max int) *Interner {
	return &Interner{m: map[string]string{}, max: max}
}

// String returns the shared copy of s.
func (in *Interner) String(s string) string {
	if s == "" {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) < in.max {
		in.m[s] = s
	}
	return s
}

// Len is the number of strings held.
func (in *Interner) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.m)
}

// Meta interns an object's namespace and label keys, and the values of
// the labels named in values (values of other labels, such as Service
// names, are mostly unique and stay as they are).
func (in *Interner) Meta(m *metav1.ObjectMeta, values ...string) {
	m.Namespace = in.String(m.Namespace)
	if len(m.Labels) == 0 {
		return
	}
	labels := make(map[string]string, len(m.Labels))
	for k, v := range m.Labels {
		for _, name := range values {
			if k == name {
				v = in.String(v)
				break
			}
		}
		labels[in.String(k)] = v
	}
	m.Labels = labels
}

// Conditions interns the type, status, reason and message of conditions.
func (in *Interner) Conditions(cs []metav1.Condition) {
	for i := range cs {
		c := &cs[i]
		c.Type = in.String(c.Type)
		c.Status = metav1.ConditionStatus(in.String(string(c.Status)))
		c.Reason = in.String(c.Reason)
		if len(c.Message) <= 256 {
			c.Message = in.String(c.Message)
		}
	}
}
