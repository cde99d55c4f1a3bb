// Package kube is the Kubernetes client plumbing Causeway's components
// share: a scheme with every API type Causeway reads or writes, the
// installation of Causeway's and the MCS API's CRDs (the embedded Helm
// chart's crds/), server-side apply, the daemons' ServiceAccount names and
// tokens. Rendering the chart is pkg/chart's (kept apart so the daemons do
// not link the Helm SDK).
package kube

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	aboutv1alpha1 "github.com/causeway-net/causeway/api/about/v1alpha1"
	"github.com/causeway-net/causeway/api/v1alpha1"
)

// NewScheme returns a scheme with the built-in types, CRDs, Causeway's
// types, the About API's ClusterProperty and both served versions of the
// MCS API.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme,
		apiextensionsv1.AddToScheme,
		v1alpha1.AddToScheme,
		aboutv1alpha1.AddToScheme,
		mcsv1alpha1.Install,
		mcsv1beta1.Install,
	} {
		if err := add(s); err != nil {
			panic(err) // static registration; cannot fail at run time
		}
	}
	return s
}
