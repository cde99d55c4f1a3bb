// Package about reads and writes the About API's ClusterProperties
// (KEP-2149, api/about/v1alpha1) that name a cluster and its ClusterSet:
// cluster.clusterset.k8s.io holds the cluster's ID, clusterset.k8s.io the
// ClusterSet's name. `causewayctl join` writes both; a daemon started
// without --cluster-id reads the ID from the first, and uninstall deletes
// the second.
package about

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	aboutv1alpha1 "github.com/causeway-net/causeway/api/about/v1alpha1"
)

const (
	// ClusterIDProperty names the ClusterProperty holding the cluster's ID.
	ClusterIDProperty = "cluster.clusterset.k8s.io"
	// ClusterSetProperty names the ClusterProperty holding the ClusterSet's
	// name.
	ClusterSetProperty = "clusterset.k8s.io"
	// DefaultClusterSet is the ClusterSet's name join writes unless told
	// otherwise.
	DefaultClusterSet = "clusterset"
)

// +kubebuilder:rbac:groups=about.k8s.io,resources=clusterproperties,verbs=get

// ClusterID returns the value of ClusterProperty cluster.clusterset.k8s.io.
func ClusterID(ctx context.Context, c client.Reader) (string, error) {
	var p aboutv1alpha1.ClusterProperty
	if err := c.Get(ctx, client.ObjectKey{Name: ClusterIDProperty}, &p); err != nil {
		return "", fmt.Errorf("read ClusterProperty %s: %w", ClusterIDProperty, err)
	}
	if p.Spec.Value == "" {
		return "", fmt.Errorf("ClusterProperty %s has no value", ClusterIDProperty)
	}
	return p.Spec.Value, nil
}

// Check reports the ClusterProperties that Ensure would create, and an
// error when one already holds another value (a cluster's ID and
// membership do not change while it is in a ClusterSet; KEP-2149). A
// cluster without the About API CRD misses both.
func Check(ctx context.Context, c client.Reader, clusterID, clusterSet string) ([]aboutv1alpha1.ClusterProperty, error) {
	want := []aboutv1alpha1.ClusterProperty{
		{ObjectMeta: metav1.ObjectMeta{Name: ClusterIDProperty}, Spec: aboutv1alpha1.ClusterPropertySpec{Value: clusterID}},
		{ObjectMeta: metav1.ObjectMeta{Name: ClusterSetProperty}, Spec: aboutv1alpha1.ClusterPropertySpec{Value: clusterSet}},
	}
	var missing []aboutv1alpha1.ClusterProperty
	for _, w := range want {
		var got aboutv1alpha1.ClusterProperty
		err := c.Get(ctx, client.ObjectKey{Name: w.Name}, &got)
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			missing = append(missing, w)
		case err != nil:
			return nil, fmt.Errorf("read ClusterProperty %s: %w", w.Name, err)
		case got.Spec.Value != w.Spec.Value:
			return nil, fmt.Errorf("ClusterProperty %s is %q, not %q: the cluster already has another identity (delete the ClusterProperty to change it)", w.Name, got.Spec.Value, w.Spec.Value)
		}
	}
	return missing, nil
}

// Ensure makes the cluster's ClusterProperties say clusterID and
// clusterSet: it creates the missing ones, and changes nothing when Check
// refuses.
func Ensure(ctx context.Context, c client.Client, clusterID, clusterSet string) error {
	missing, err := Check(ctx, c, clusterID, clusterSet)
	if err != nil {
		return err
	}
	for i := range missing {
		if err := c.Create(ctx, &missing[i]); err != nil {
			return fmt.Errorf("create ClusterProperty %s: %w", missing[i].Name, err)
		}
	}
	return nil
}

// Leave deletes ClusterProperty clusterset.k8s.io: the cluster is no
// longer in a ClusterSet. Its ID (cluster.clusterset.k8s.io) stays.
func Leave(ctx context.Context, c client.Client) error {
	p := &aboutv1alpha1.ClusterProperty{ObjectMeta: metav1.ObjectMeta{Name: ClusterSetProperty}}
	if err := c.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		return fmt.Errorf("delete ClusterProperty %s: %w", ClusterSetProperty, err)
	}
	return nil
}
