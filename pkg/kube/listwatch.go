package kube

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ListWatch lists and watches one resource through a controller-runtime
// client (the resource's Go types come from its scheme), for a reflector
// such as plaincache's.
func ListWatch[L client.ObjectList](c client.WithWatch, newList func() L) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l := newList()
			return l, c.List(ctx, l, &client.ListOptions{Raw: &opts})
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, newList(), &client.ListOptions{Raw: &opts})
		},
	}
}

// ProtobufClientset is a clientset of cfg's API server that speaks
// protobuf (cheaper to decode than JSON for the built-in types a cache
// lists and watches in bulk, such as EndpointSlices).
func ProtobufClientset(cfg *rest.Config) (*kubernetes.Clientset, error) {
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return kubernetes.NewForConfig(pb)
}
