package lab

import (
	"fmt"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// MergedKubeconfig is the kubeconfig with one admin context per cluster
// and the broker, each named after it.
func (s *State) MergedKubeconfig() (*clientcmdapi.Config, error) {
	out := clientcmdapi.NewConfig()
	for _, name := range append(s.Members(), "broker") {
		cp, err := s.ControlPlane(name)
		if err != nil {
			return nil, err
		}
		cfg, err := clientcmd.LoadFromFile(cp.AdminKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		ctx, ok := cfg.Contexts[cfg.CurrentContext]
		if !ok {
			return nil, fmt.Errorf("%s: kubeconfig %s has no current context", name, cp.AdminKubeconfig)
		}
		cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
		if cluster == nil || user == nil {
			return nil, fmt.Errorf("%s: kubeconfig %s: context %q lacks its cluster or user", name, cp.AdminKubeconfig, cfg.CurrentContext)
		}
		out.Clusters[name] = cluster
		out.AuthInfos[name+"-admin"] = user
		out.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name + "-admin"}
	}
	if members := s.Members(); len(members) > 0 {
		out.CurrentContext = members[0]
	}
	// Certificates and keys inline: the file is all a user of the lab's
	// clusters needs, readable anywhere it is copied.
	if err := clientcmdapi.FlattenConfig(out); err != nil {
		return nil, fmt.Errorf("inline the certificates: %w", err)
	}
	return out, nil
}

// WriteMergedKubeconfig writes MergedKubeconfig to <lab dir>/kubeconfig
// and returns the path.
func (s *State) WriteMergedKubeconfig() (string, error) {
	cfg, err := s.MergedKubeconfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}
