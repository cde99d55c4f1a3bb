package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"

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
	bcp, err := s.ControlPlane("broker")
	if err != nil {
		return err
	}
	admin, err := bcp.RESTConfig()
	if err != nil {
		return err
	}
	for _, c := range s.Members() {
		raw, err := broker.EnsureClusterIdentity(ctx, admin, c)
		if err != nil {
			return fmt.Errorf("broker identity of %s: %w", c, err)
		}
		cfg, err := clientcmd.Load(raw)
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
