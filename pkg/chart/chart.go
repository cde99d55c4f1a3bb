// Package chart renders Causeway's Helm chart (deploy/helm/causeway,
// embedded by package deploy) with the Helm SDK, the way `helm template`
// does: values over the chart's values.yaml, checked against its
// values.schema.json, into the objects to apply in a member cluster. The
// lab, `causewayctl join` and the tests install from it, so the chart is
// the one install source. Its CRDs (crds/) are installed by
// kube.InstallCRDs.
package chart

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	helmchart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/causeway-net/causeway/deploy"
	"github.com/causeway-net/causeway/pkg/kube"
)

// ReleaseName is the release name the chart is rendered with.
const ReleaseName = "causeway"

// Load loads the embedded chart.
func Load() (*helmchart.Chart, error) {
	root, err := fs.Sub(deploy.Chart, deploy.ChartDir)
	if err != nil {
		return nil, err
	}
	var files []*archive.BufferedFile
	err = fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(root, name)
		if err != nil {
			return err
		}
		files = append(files, &archive.BufferedFile{Name: name, Data: b})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the embedded chart: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("load the embedded chart: %w", err)
	}
	return c, nil
}

// applyOrder is the order kinds are applied in: each object after those
// it refers to. Render refuses a kind not listed.
var applyOrder = []string{
	"Namespace", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ConfigMap", "DaemonSet", "Deployment",
	"PodMonitor", "PrometheusRule",
}

// Render renders the embedded chart into namespace kube.Namespace with
// values over values.yaml (nested maps, as `helm --set` builds them) and
// returns the objects in apply order (applyOrder, then template file and
// document order). Values the schema refuses are an error naming each
// value and why.
func Render(values map[string]any) ([]*unstructured.Unstructured, error) {
	return render(values, kube.Namespace)
}

// render renders into namespace, which the chart refuses unless it is
// kube.Namespace.
func render(values map[string]any, namespace string) ([]*unstructured.Unstructured, error) {
	c, err := Load()
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(c, values,
		common.ReleaseOptions{Name: ReleaseName, Namespace: namespace, IsInstall: true}, nil)
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	// No lookups against a cluster: the context cancels nothing.
	out, err := engine.Engine{Strict: true}.RenderWithContext(context.Background(), c, top)
	if err != nil {
		return nil, fmt.Errorf("render the chart: %w", err)
	}
	names := make([]string, 0, len(out))
	for name := range out {
		if path.Ext(name) == ".yaml" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var objs []*unstructured.Unstructured
	for _, name := range names {
		docs, err := parseDocuments([]byte(out[name]))
		if err != nil {
			return nil, fmt.Errorf("rendered %s: %w", name, err)
		}
		for _, o := range docs {
			if !slices.Contains(applyOrder, o.GetKind()) {
				return nil, fmt.Errorf("rendered %s: kind %s has no place in the apply order", name, o.GetKind())
			}
		}
		objs = append(objs, docs...)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return slices.Index(applyOrder, a.GetKind()) - slices.Index(applyOrder, b.GetKind())
	})
	return objs, nil
}

// parseDocuments parses multi-document YAML; empty documents (comments
// only, or a template that rendered nothing) are skipped.
func parseDocuments(b []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if string(j) == "null" || string(j) == "{}" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("%w:\n%s", err, strings.TrimSpace(string(doc)))
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("document without apiVersion, kind or name:\n%s", strings.TrimSpace(string(doc)))
		}
		out = append(out, u)
	}
}
