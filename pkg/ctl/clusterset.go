package ctl

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/kube"
	"github.com/causeway-net/causeway/pkg/lab"
)

// clusterSetFlags say which clusters a command talks to:
//
//	--kubeconfig [name=]path   (repeatable; name defaults to the file's current context)
//	--context name             (repeatable; contexts of $KUBECONFIG / ~/.kube/config)
//
// Every command of the ClusterSet (show, export, …) shares them. With
// neither, the clusters of the local lab are used ($CAUSEWAY_LAB_DIR or
// /var/lib/causeway/lab).
type clusterSetFlags struct {
	kubeconfigs []string
	contexts    []string
}

func (f *clusterSetFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.kubeconfigs, "kubeconfig", nil, "a member cluster's kubeconfig as [name=]path (repeat for every cluster)")
	fs.StringArrayVar(&f.contexts, "context", nil, "a member cluster as a context of the default kubeconfig (repeatable)")
}

// memberCluster is one cluster a command talks to.
type memberCluster struct {
	Name   string
	Client client.Client
	// Config is the cluster's client configuration (pods/exec).
	Config *rest.Config
}

// clusters returns the clusters named by the flags, sorted by name.
func (f *clusterSetFlags) clusters() ([]memberCluster, error) {
	var out []memberCluster
	seen := map[string]bool{}
	add := func(name string, cfg clientcmd.ClientConfig) error {
		rc, err := cfg.ClientConfig()
		if err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		c, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
		if err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
		if seen[name] {
			return fmt.Errorf("cluster %s given twice", name)
		}
		seen[name] = true
		out = append(out, memberCluster{Name: name, Client: c, Config: rc})
		return nil
	}
	for _, kc := range f.kubeconfigs {
		name, path, named := strings.Cut(kc, "=")
		if !named {
			path = kc
		}
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{})
		if !named {
			raw, err := cfg.RawConfig()
			if err != nil {
				return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
			}
			name = raw.CurrentContext
			if name == "" {
				return nil, fmt.Errorf("kubeconfig %s has no current context: name the cluster as name=%s", path, path)
			}
		}
		if err := add(name, cfg); err != nil {
			return nil, err
		}
	}
	for _, ctx := range f.contexts {
		cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(),
			&clientcmd.ConfigOverrides{CurrentContext: ctx})
		if err := add(ctx, cfg); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		lab, err := labClusters()
		if err != nil {
			return nil, fmt.Errorf("no clusters: give --kubeconfig [name=]path or --context name for every member cluster (%v)", err)
		}
		out = lab
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// cluster returns the cluster named name, or the only one when name is "".
func (f *clusterSetFlags) cluster(name string) (memberCluster, error) {
	all, err := f.clusters()
	if err != nil {
		return memberCluster{}, err
	}
	if name == "" {
		if len(all) == 1 {
			return all[0], nil
		}
		names := make([]string, len(all))
		for i, c := range all {
			names[i] = c.Name
		}
		return memberCluster{}, fmt.Errorf("several clusters (%s): choose one with --cluster", strings.Join(names, ", "))
	}
	for _, c := range all {
		if c.Name == name {
			return c, nil
		}
	}
	return memberCluster{}, fmt.Errorf("no cluster %q", name)
}

// labClusters are the member clusters of the local lab, used when no
// cluster is named on the command line.
func labClusters() ([]memberCluster, error) {
	st, err := loadLab()
	if err != nil {
		return nil, err
	}
	var out []memberCluster
	for _, name := range st.Members() {
		rc, err := st.RESTConfig(name)
		if err != nil {
			return nil, err
		}
		c, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
		if err != nil {
			return nil, err
		}
		out = append(out, memberCluster{Name: name, Client: c, Config: rc})
	}
	return out, nil
}

// loadLab is the local lab's state ($CAUSEWAY_LAB_DIR or lab.DefaultDir).
func loadLab() (*lab.State, error) {
	dir := lab.DefaultDir
	if d := os.Getenv("CAUSEWAY_LAB_DIR"); d != "" {
		dir = d
	}
	return lab.Load(dir)
}
