package install

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
)

// Claim claims clusterID in the broker for the cluster of cl, with the
// member identity of kubeconfig (refused when another cluster holds the
// ID: pkg/broker's Claim).
func Claim(ctx context.Context, cl client.Client, clusterID string, kubeconfig []byte) error {
	bc, err := ClientFromKubeconfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("broker credentials: %w", err)
	}
	uid, err := broker.MemberUID(ctx, cl)
	if err != nil {
		return err
	}
	return broker.Claim(ctx, bc, clusterID, uid)
}

// ClientFromKubeconfig is a client of the kubeconfig raw.
func ClientFromKubeconfig(raw []byte) (client.Client, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, err
	}
	return client.New(rc, client.Options{Scheme: kube.NewScheme()})
}

// StoreBrokerSecret stores a member kubeconfig with its token (a join
// file, or the identity --broker-kubeconfig created) as Secret
// broker.Secret in namespace, the token in a key of its own
// (broker.SecretData), which the MCS controller rotates.
func StoreBrokerSecret(ctx context.Context, cl client.Client, namespace string, kubeconfig []byte) error {
	data, err := broker.SecretData(kubeconfig)
	if err != nil {
		return err
	}
	return storeSecret(ctx, cl, namespace, broker.Secret, data)
}

// LeaveBroker removes the cluster of cl from the broker through its own
// broker identity (Secret broker.Secret in namespace): broker.Leave, which
// deletes its ServiceAccount last and so revokes its tokens. server, if
// set, is the broker's address as the caller reaches it (the Secret holds
// the one the cluster's Pods reach). Without the Secret there is nothing
// to remove.
func LeaveBroker(ctx context.Context, cl client.Client, namespace, server string, progress func(string)) error {
	sec := &corev1.Secret{}
	err := cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: broker.Secret}, sec)
	if apierrors.IsNotFound(err) {
		progress("no Secret " + namespace + "/" + broker.Secret + ": nothing to remove in the broker")
		return nil
	}
	if err != nil {
		return err
	}
	id, bc, err := brokerClient(sec.Data, server)
	if err != nil {
		return fmt.Errorf("broker Secret %s/%s: %w", namespace, broker.Secret, err)
	}
	if err := broker.Leave(ctx, bc, id); err != nil {
		return err
	}
	progress("broker: removed cluster " + id + "'s objects from " + broker.Namespace(id) + " and revoked its broker identity")
	return nil
}

// brokerClient is the cluster ID and broker client of Secret broker.Secret's
// data, at server if set.
func brokerClient(data map[string][]byte, server string) (string, client.Client, error) {
	id, err := broker.KubeconfigClusterID(data[broker.SecretKubeconfig])
	if err != nil {
		return "", nil, err
	}
	rc, err := broker.RESTConfigFromSecret(data)
	if err != nil {
		return "", nil, err
	}
	if server != "" {
		rc.Host = server
	}
	bc, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
	return id, bc, err
}

// storeSecret creates namespace unless it exists and makes the data of
// Secret namespace/name exactly data.
func storeSecret(ctx context.Context, cl client.Client, namespace, name string, data map[string][]byte) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := cl.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	existing := &corev1.Secret{}
	err := cl.Get(ctx, client.ObjectKeyFromObject(sec), existing)
	switch {
	case apierrors.IsNotFound(err):
		sec.Data = data
		err = cl.Create(ctx, sec)
	case err == nil:
		existing.Data = data
		err = cl.Update(ctx, existing)
	}
	if err != nil {
		return fmt.Errorf("store Secret %s/%s: %w", namespace, name, err)
	}
	return nil
}
