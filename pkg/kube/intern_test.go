package kube

import (
	"fmt"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestInterner(t *testing.T) {
	in := NewInterner(3)
	a := in.String(string([]byte("bench")))
	b := in.String(string([]byte("bench")))
	if a != "bench" || !same(a, b) {
		t.Fatalf("equal strings not shared: %q %q", a, b)
	}
	for i := range 5 {
		in.String(fmt.Sprintf("s%d", i))
	}
	if in.Len() != 3 {
		t.Errorf("interner holds %d strings, bound 3", in.Len())
	}
	over := string([]byte("s4"))
	if got := in.String(over); got != "s4" || !same(got, over) {
		t.Errorf("a string beyond the bound must come back as it was")
	}

	in = NewInterner(100)
	m1 := metav1.ObjectMeta{Namespace: string([]byte("ns")), Labels: map[string]string{string([]byte("k")): string([]byte("v")), string([]byte("id")): string([]byte("x1"))}}
	m2 := metav1.ObjectMeta{Namespace: string([]byte("ns")), Labels: map[string]string{string([]byte("k")): string([]byte("v")), string([]byte("id")): string([]byte("x2"))}}
	in.Meta(&m1, "k")
	in.Meta(&m2, "k")
	if !same(m1.Namespace, m2.Namespace) || !same(m1.Labels["k"], m2.Labels["k"]) {
		t.Errorf("namespace or shared label value not interned")
	}
	for k1 := range m1.Labels {
		for k2 := range m2.Labels {
			if k1 == k2 && !same(k1, k2) {
				t.Errorf("label key %q not interned", k1)
			}
		}
	}
	if m1.Labels["id"] != "x1" || m2.Labels["id"] != "x2" || in.Len() != 4 { // ns, k, v, id
		t.Errorf("labels %v %v, %d strings held", m1.Labels, m2.Labels, in.Len())
	}

	c1 := []metav1.Condition{{Type: string([]byte("Ready")), Status: "True", Reason: string([]byte("R")), Message: string([]byte("ok"))}}
	c2 := []metav1.Condition{{Type: string([]byte("Ready")), Status: "True", Reason: string([]byte("R")), Message: string([]byte("ok"))}}
	in.Conditions(c1)
	in.Conditions(c2)
	if !same(c1[0].Type, c2[0].Type) || !same(c1[0].Reason, c2[0].Reason) || !same(c1[0].Message, c2[0].Message) {
		t.Errorf("condition strings not interned")
	}
}
