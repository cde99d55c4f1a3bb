package kube

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestParseManifests(t *testing.T) {
	fsys := fstest.MapFS{
		"a/one.yaml": {Data: []byte("# comment only\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: x\n---\n\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa, namespace: x}\n")},
		"a/two.yaml": {Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: x}\n")},
		"bad.yaml":   {Data: []byte("apiVersion: v1\nmetadata: {name: nokind}\n")},
	}
	objs, err := ParseManifests(fsys, "a/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	if want := "Namespace/x ServiceAccount/sa ConfigMap/cm"; strings.Join(got, " ") != want {
		t.Errorf("parsed %v, want %s", got, want)
	}
	if _, err := ParseManifests(fsys, "bad.yaml"); err == nil {
		t.Error("a document without kind parsed")
	}
	if _, err := ParseManifests(fsys, "none/*.yaml"); err == nil {
		t.Error("a pattern matching nothing gave no error")
	}
}

// The embedded identity manifests hold a ServiceAccount for every daemon.
func TestIdentitiesCoverDaemons(t *testing.T) {
	objs, err := Manifests(IdentityFiles...)
	if err != nil {
		t.Fatal(err)
	}
	accounts := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "ServiceAccount" && o.GetNamespace() == Namespace {
			accounts[o.GetName()] = true
		}
	}
	for _, d := range Daemons {
		if !accounts[ServiceAccountName(d)] {
			t.Errorf("no ServiceAccount %s", ServiceAccountName(d))
		}
	}
	if objs[0].GetKind() != "Namespace" || objs[0].GetName() != Namespace {
		t.Errorf("first identity object is %s %s, want the namespace", objs[0].GetKind(), objs[0].GetName())
	}
}
