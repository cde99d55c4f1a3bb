package broker

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/causeway-net/causeway/internal/kubetest"
)

// TestApplyConcurrently: members' identities are ensured at once (lab
// up does) and all update the ClusterSet-wide objects, such as the
// admission policies. Every apply succeeds, whoever wrote in between
// its read and its write (before the retry, lab up failed in CI with
// "the object has been modified").
func TestApplyConcurrently(t *testing.T) {
	api := kubetest.Start(t, "broker")
	cs := kubernetes.NewForConfigOrDie(api.Config)
	ctx := context.Background()
	const writers = 8
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shared"}, Data: map[string]string{"writer": fmt.Sprint(i)}}
			errs <- apply(ctx, "config map shared",
				func() error {
					_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
					return err
				},
				func() error {
					have, err := cs.CoreV1().ConfigMaps("default").Get(ctx, cm.Name, metav1.GetOptions{})
					if err != nil {
						return err
					}
					have.Data = cm.Data
					_, err = cs.CoreV1().ConfigMaps("default").Update(ctx, have, metav1.UpdateOptions{})
					return err
				})
		}()
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
