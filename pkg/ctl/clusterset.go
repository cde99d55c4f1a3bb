package ctl

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/pkg/about"
	"github.com/causeway-net/causeway/pkg/kube"
)

// clusterSetFlags say which clusters a command talks to:
//
//	--kubeconfig [name=]path   (repeatable; name defaults to the file's current context)
//	--context name             (repeatable; contexts of $KUBECONFIG / ~/.kube/config)
//
// Every command of the ClusterSet (show, export, …) shares them. With
// neither, every context of the default kubeconfig whose cluster is a
// member is used (memberContexts).
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
		if seen[name] {
			return fmt.Errorf("cluster %s given twice", name)
		}
		seen[name] = true
		c, err := newMemberCluster(name, cfg)
		if err != nil {
			return err
		}
		out = append(out, c)
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
		members, err := memberContexts()
		if err != nil {
			return nil, err
		}
		out = members
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// newMemberCluster is a client of the cluster cfg names.
func newMemberCluster(name string, cfg clientcmd.ClientConfig) (memberCluster, error) {
	rc, err := cfg.ClientConfig()
	if err != nil {
		return memberCluster{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	c, err := client.New(rc, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		return memberCluster{}, fmt.Errorf("cluster %s: %w", name, err)
	}
	return memberCluster{Name: name, Client: c, Config: rc}, nil
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

// memberProbeTimeout bounds the question "is this context a member?".
const memberProbeTimeout = 5 * time.Second

// memberContexts are the clusters of the default kubeconfig ($KUBECONFIG
// or ~/.kube/config) that are members of a ClusterSet: those whose API
// server has the About API's ClusterProperty cluster.clusterset.k8s.io
// (causewayctl join writes it), each named by its context. The contexts
// are asked in parallel, each within memberProbeTimeout.
func memberContexts() ([]memberCluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("load the kubeconfig: %w", err)
	}
	names := slices.Sorted(maps.Keys(raw.Contexts))
	type probe struct {
		c   memberCluster
		err error
	}
	probes := make([]probe, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			cfg := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: name})
			c, err := newMemberCluster(name, cfg)
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), memberProbeTimeout)
				defer cancel()
				_, err = about.ClusterID(ctx, c.Client)
			}
			probes[i] = probe{c, err}
		})
	}
	wg.Wait()
	var out []memberCluster
	var why []string
	for i, p := range probes {
		if p.err != nil {
			why = append(why, fmt.Sprintf("%s: %v", names[i], p.err))
			continue
		}
		out = append(out, p.c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no member cluster among the contexts of the kubeconfig (%s); a member has the ClusterProperty %s that causewayctl join writes; or name them with --kubeconfig [name=]path / --context name",
			strings.Join(why, "; "), about.ClusterIDProperty)
	}
	return out, nil
}
