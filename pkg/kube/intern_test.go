package kube

import (
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func TestIntern(t *testing.T) {
	a := Intern(string([]byte("bench")))
	b := Intern(string([]byte("bench")))
	if a != "bench" || !same(a, b) {
		t.Fatalf("equal strings not shared: %q %q", a, b)
	}

	m1 := metav1.ObjectMeta{Namespace: string([]byte("ns")), Labels: map[string]string{string([]byte("k")): string([]byte("v")), string([]byte("id")): string([]byte("x1"))}}
	m2 := metav1.ObjectMeta{Namespace: string([]byte("ns")), Labels: map[string]string{string([]byte("k")): string([]byte("v")), string([]byte("id")): string([]byte("x2"))}}
	InternMeta(&m1, "k")
	InternMeta(&m2, "k")
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
	if m1.Labels["id"] != "x1" || m2.Labels["id"] != "x2" || same(m1.Labels["id"], Intern("x1")) {
		t.Errorf("labels %v %v: values not named must stay as they are", m1.Labels, m2.Labels)
	}

	o1 := metav1.ObjectMeta{Annotations: map[string]string{string([]byte("n")): string([]byte("3"))},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: string([]byte("v1")), Kind: string([]byte("Kind"))}}}
	o2 := metav1.ObjectMeta{Annotations: map[string]string{string([]byte("n")): string([]byte("3"))},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: string([]byte("v1")), Kind: string([]byte("Kind"))}}}
	InternMeta(&o1, "n")
	InternMeta(&o2, "n")
	if !same(o1.Annotations["n"], o2.Annotations["n"]) || !same(o1.OwnerReferences[0].Kind, o2.OwnerReferences[0].Kind) ||
		!same(o1.OwnerReferences[0].APIVersion, o2.OwnerReferences[0].APIVersion) {
		t.Errorf("annotation value or owner reference not interned")
	}
	t1 := metav1.TypeMeta{APIVersion: string([]byte("g/v1")), Kind: string([]byte("K"))}
	t2 := metav1.TypeMeta{APIVersion: string([]byte("g/v1")), Kind: string([]byte("K"))}
	InternTypeMeta(&t1)
	InternTypeMeta(&t2)
	if !same(t1.APIVersion, t2.APIVersion) || !same(t1.Kind, t2.Kind) {
		t.Errorf("type meta not interned")
	}

	c1 := []metav1.Condition{{Type: string([]byte("Ready")), Status: "True", Reason: string([]byte("R")), Message: string([]byte("ok"))}}
	c2 := []metav1.Condition{{Type: string([]byte("Ready")), Status: "True", Reason: string([]byte("R")), Message: string([]byte("ok"))}}
	InternConditions(c1)
	InternConditions(c2)
	if !same(c1[0].Type, c2[0].Type) || !same(c1[0].Reason, c2[0].Reason) || !same(c1[0].Message, c2[0].Message) {
		t.Errorf("condition strings not interned")
	}
}
