package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"

	"github.com/causeway-net/causeway/pkg/broker"
)

// NodeBrokerAPIServer is where processes inside a node's namespace reach
// the broker: the kubelet forwards it to the broker's API server.
const NodeBrokerAPIServer = "https://127.0.0.1:6444"

// BrokerKubeconfig is the path of a cluster's broker identity, as the
// daemons inside its nodes use it.
func (s *State) BrokerKubeconfig(cluster string) string {
	return filepath.Join(s.controlPlaneDir(cluster), "broker.kubeconfig")
}

// joinBroker gives every cluster its broker identity (namespace,
// ServiceAccount, RBAC, token; pkg/broker), the way `causewayctl join`
// does, and writes it where the cluster's daemons read it.
func (s *State) joinBroker(ctx context.Context) error {
	admin, err := s.RESTConfig("broker")
	if err != nil {
		return err
	}
	bc, err := s.Client("broker")
	if err != nil {
		return err
	}
	// Identities first, then every cluster announced in order, and only
	// then the credentials handed to the daemons: when two clusters' CIDRs
	// overlap, gateways keep the older one, so c1 must be announced before
	// any gateway publishes (c1 before c2, as users of the lab expect; the
	// gateways update these objects later).
	//
	// The daemons run as processes reading a kubeconfig file, not a
	// mounted Secret the MCS controller could rotate: their broker token
	// lives as long as their local ones, not the join file's 24 hours.
	ids := map[string][]byte{}
	for _, c := range s.Members() {
		if _, err := broker.EnsureClusterIdentity(ctx, admin, c); err != nil {
			return fmt.Errorf("broker identity of %s: %w", c, err)
		}
		token, _, err := broker.Token(ctx, admin, c, daemonTokenLifetime)
		if err != nil {
			return fmt.Errorf("broker identity of %s: %w", c, err)
		}
		if ids[c], err = broker.Kubeconfig(admin, c, token); err != nil {
			return err
		}
	}
	for _, c := range s.Members() {
		if err := s.announce(ctx, bc, c); err != nil {
			return err
		}
	}
	for _, c := range s.Members() {
		cfg, err := clientcmd.Load(ids[c])
		if err != nil {
			return fmt.Errorf("broker identity of %s: %w", c, err)
		}
		for _, cl := range cfg.Clusters {
			cl.Server = NodeBrokerAPIServer
		}
		path := s.BrokerKubeconfig(c)
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return err
		}
		if err := os.Chmod(path, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (s *State) announce(ctx context.Context, bc client.Client, cluster string) error {
	c, _ := s.Topology.Cluster(cluster)
	obj := &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: broker.Namespace(cluster), Name: cluster},
		Spec: v1alpha1.ClusterSpec{ClusterID: cluster,
			PodCIDRs: []string{c.PodCIDR.String()}, ServiceCIDRs: []string{c.ServiceCIDR.String()}},
	}
	if err := bc.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("announce cluster %s in the broker: %w", cluster, err)
	}
	return nil
}
