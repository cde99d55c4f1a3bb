package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/chart"
	"github.com/causeway-net/causeway/pkg/kube"
)

// daemonTokenLifetime is the lifetime of the daemons' ServiceAccount
// tokens; `lab up` on a running lab issues fresh ones.
const daemonTokenLifetime = 365 * 24 * time.Hour

// DaemonKubeconfig is the path of the kubeconfig a daemon (one of
// kube.Daemons) uses in a cluster: its own ServiceAccount's token, the
// API server through the node's forwarder.
func (s *State) DaemonKubeconfig(cluster, daemon string) string {
	return filepath.Join(s.controlPlaneDir(cluster), kube.ServiceAccountName(daemon)+".kubeconfig")
}

// installIdentities gives the daemons of every member cluster their own
// identity, as the Helm chart does (chart.InstallIdentities: its
// identities and generated roles): a ServiceAccount each in
// causeway-system with least-privilege rights, and writes each a
// kubeconfig with a token from the TokenRequest API.
func (s *State) installIdentities(ctx context.Context) error {
	return forEach(s.Members(), func(name string) error {
		cp, err := s.ControlPlane(name)
		if err != nil {
			return err
		}
		rc, err := cp.RESTConfig()
		if err != nil {
			return err
		}
		cl, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
		if err != nil {
			return err
		}
		if err := chart.InstallIdentities(ctx, cl); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		for _, d := range kube.Daemons {
			token, err := kube.ServiceAccountToken(ctx, rc, kube.Namespace, kube.ServiceAccountName(d), daemonTokenLifetime)
			if err != nil {
				return fmt.Errorf("cluster %s: %w", name, err)
			}
			// Written aside and renamed: a daemon starting meanwhile reads
			// the old file or the new one, never half of one.
			path := s.DaemonKubeconfig(name, d)
			if err := cp.TokenKubeconfig(path+".tmp", NodeAPIServer, token); err != nil {
				return err
			}
			if err := os.Rename(path+".tmp", path); err != nil {
				return err
			}
		}
		return nil
	})
}
