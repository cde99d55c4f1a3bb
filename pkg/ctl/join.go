package ctl

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/kube"
)

// BrokerSecret is the Secret in causeway-system holding a cluster's broker
// kubeconfig (key "kubeconfig"), as `causewayctl join` writes it.
const BrokerSecret = "causeway-broker"

// clusterIDProperty is the About API's ClusterProperty naming the cluster.
var clusterIDProperty = schema.GroupVersionKind{Group: "about.k8s.io", Version: "v1alpha1", Kind: "ClusterProperty"}

func newJoinCommand() *cobra.Command {
	var brokerKubeconfig, kubeconfig, clusterID, namespace, out string
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Join a cluster to the ClusterSet's broker",
		Long: `Join a cluster to a ClusterSet: in the broker, create the cluster's namespace
(cluster-<id>), ServiceAccount and RBAC (it may write only its own namespace
and read the others), and store the resulting broker kubeconfig in the
cluster as Secret causeway-system/causeway-broker, which the gateway and MCS
controller Pods of the Helm chart mount (the daemons' own ServiceAccounts
may not read Secrets). The cluster ID is --cluster-id, or the About API's
ClusterProperty cluster.clusterset.k8s.io when the cluster has one.
Idempotent: joining again refreshes the credentials.`,
		Example: `  causewayctl join --broker-kubeconfig broker-admin.yaml --kubeconfig c1.yaml --cluster-id c1`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			local, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("cluster kubeconfig: %w", err)
			}
			cl, err := client.New(local, client.Options{Scheme: kube.NewScheme()})
			if err != nil {
				return err
			}
			if clusterID == "" {
				if clusterID, err = aboutClusterID(ctx, cl); err != nil {
					return err
				}
			}
			if msgs := validation.IsDNS1123Label(clusterID); len(msgs) > 0 {
				return fmt.Errorf("cluster ID %q: %v", clusterID, msgs)
			}
			admin, err := clientcmd.BuildConfigFromFlags("", brokerKubeconfig)
			if err != nil {
				return fmt.Errorf("broker kubeconfig: %w", err)
			}
			raw, err := broker.EnsureClusterIdentity(ctx, admin, clusterID)
			if err != nil {
				return err
			}
			if err := storeBrokerSecret(ctx, cl, namespace, raw); err != nil {
				return err
			}
			if out != "" {
				if err := os.WriteFile(out, raw, 0o600); err != nil {
					return err
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cluster %s joined the broker: namespace %s, credentials in Secret %s/%s\n",
				clusterID, broker.Namespace(clusterID), namespace, BrokerSecret)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&brokerKubeconfig, "broker-kubeconfig", "", "kubeconfig with admin rights on the broker API server (required)")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the joining cluster (required)")
	f.StringVar(&clusterID, "cluster-id", "", "the cluster's ID, a DNS label (default: the About API's cluster.clusterset.k8s.io)")
	f.StringVar(&namespace, "namespace", "causeway-system", "namespace of Causeway's objects in the joining cluster")
	f.StringVar(&out, "output", "", "also write the broker kubeconfig to this file (mode 0600)")
	_ = cmd.MarkFlagRequired("broker-kubeconfig")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}

// aboutClusterID reads ClusterProperty cluster.clusterset.k8s.io.
func aboutClusterID(ctx context.Context, cl client.Client) (string, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterIDProperty)
	if err := cl.Get(ctx, client.ObjectKey{Name: "cluster.clusterset.k8s.io"}, u); err != nil {
		return "", fmt.Errorf("no --cluster-id and no About API ClusterProperty cluster.clusterset.k8s.io: %w", err)
	}
	v, _, _ := unstructured.NestedString(u.Object, "value")
	if v == "" {
		return "", fmt.Errorf("ClusterProperty cluster.clusterset.k8s.io has no value")
	}
	return v, nil
}

func storeBrokerSecret(ctx context.Context, cl client.Client, namespace string, kubeconfig []byte) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := cl.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: BrokerSecret}}
	existing := &corev1.Secret{}
	err := cl.Get(ctx, client.ObjectKeyFromObject(sec), existing)
	switch {
	case apierrors.IsNotFound(err):
		sec.Data = map[string][]byte{"kubeconfig": kubeconfig}
		err = cl.Create(ctx, sec)
	case err == nil:
		existing.Data = map[string][]byte{"kubeconfig": kubeconfig}
		err = cl.Update(ctx, existing)
	}
	if err != nil {
		return fmt.Errorf("store Secret %s/%s: %w", namespace, BrokerSecret, err)
	}
	return nil
}
