package lab

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// JoinDir is where DeployBrokerArgs has deploy-broker write the join
// files.
func (s *State) JoinDir() string { return filepath.Join(s.Dir, "join") }

// DeployBrokerArgs are the causewayctl arguments that set the lab's
// broker up for every cluster: the broker's admin kubeconfig, one
// --cluster-id per cluster, the join files into JoinDir. The join files
// hold the broker's address on the root namespace's loopback, where
// causewayctl reaches it.
func (s *State) DeployBrokerArgs() ([]string, error) {
	cp, err := s.ControlPlane("broker")
	if err != nil {
		return nil, err
	}
	args := []string{"deploy-broker", "--kubeconfig", cp.AdminKubeconfig, "--output-dir", s.JoinDir()}
	for _, c := range s.Members() {
		args = append(args, "--cluster-id", c)
	}
	return args, nil
}

// JoinArgs are the causewayctl arguments that join cluster to the lab's
// broker and install Causeway into it as `lab up` does without
// --no-install: its join file, its admin kubeconfig, its gateway nodes,
// the broker address its Pods reach (the node kubelets' forwarder,
// --broker-server) and the lab's chart values join does not set itself
// (JoinSetFlags). join discovers the CIDRs from the cluster.
func (s *State) JoinArgs(cluster string) ([]string, error) {
	c, ok := s.Topology.Cluster(cluster)
	if !ok {
		return nil, fmt.Errorf("no cluster %q in the lab", cluster)
	}
	cp, err := s.ControlPlane(cluster)
	if err != nil {
		return nil, err
	}
	args := []string{"join", "--join-file", filepath.Join(s.JoinDir(), cluster+".join.yaml"),
		"--kubeconfig", cp.AdminKubeconfig, "--broker-server", brokerServer()}
	for _, n := range c.Nodes {
		if n.Gateway() {
			args = append(args, "--gateway-node", s.NodeName(cluster, n.Name))
		}
	}
	for _, set := range s.JoinSetFlags(cluster) {
		args = append(args, "--set", set)
	}
	return args, nil
}

// UninstallArgs are the causewayctl arguments that remove Causeway from
// cluster (and what it wrote in the broker): its admin kubeconfig and
// the broker's address on the root namespace's loopback (the cluster's
// Secret holds the Pods' one, --broker-server of JoinArgs).
func (s *State) UninstallArgs(cluster string) ([]string, error) {
	cp, err := s.ControlPlane(cluster)
	if err != nil {
		return nil, err
	}
	b, err := s.ControlPlane("broker")
	if err != nil {
		return nil, err
	}
	return []string{"uninstall", "--kubeconfig", cp.AdminKubeconfig, "--broker-server", b.URL}, nil
}

// joinValues are the chart values join sets itself (from the join file
// and the cluster), left out of JoinSetFlags.
var joinValues = []string{"clusterID", "podCIDRs", "serviceCIDRs", "namespace"}

// JoinSetFlags are ChartValues of cluster as `join --set` values
// (key=value as helm --set, lists as {a,b}), but those join sets
// itself.
func (s *State) JoinSetFlags(cluster string) []string {
	c, _ := s.Topology.Cluster(cluster)
	var out []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := prefix + k
			switch v := v.(type) {
			case map[string]any:
				walk(key+".", v)
			case []any:
				if len(v) == 0 {
					continue
				}
				items := make([]string, len(v))
				for i, x := range v {
					items[i] = fmt.Sprint(x)
				}
				out = append(out, key+"={"+strings.Join(items, ",")+"}")
			default:
				out = append(out, fmt.Sprintf("%s=%v", key, v))
			}
		}
	}
	values := s.ChartValues(c)
	for _, k := range joinValues {
		delete(values, k)
	}
	walk("", values)
	slices.Sort(out)
	return out
}

// JoinCommands are the command lines that install Causeway into a
// --no-install lab as a user does: deploy-broker once, then join per
// cluster in order (c1 first: of overlapping clusters the older wins),
// self being the causewayctl to run; and the line that uninstalls it
// from c1.
func (s *State) JoinCommands(self string) (join []string, uninstall string, err error) {
	args, err := s.DeployBrokerArgs()
	if err != nil {
		return nil, "", err
	}
	join = []string{shellLine(self, args)}
	for _, c := range s.Members() {
		if args, err = s.JoinArgs(c); err != nil {
			return nil, "", err
		}
		join = append(join, shellLine(self, args))
	}
	if args, err = s.UninstallArgs(s.Members()[0]); err != nil {
		return nil, "", err
	}
	return join, shellLine(self, args), nil
}

// shellLine quotes what a POSIX shell would change.
func shellLine(self string, args []string) string {
	words := []string{self}
	for _, a := range args {
		if strings.ContainsAny(a, " $(){},'\"*?[]&;|<>`\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}
