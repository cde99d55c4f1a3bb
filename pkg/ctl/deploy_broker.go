package ctl

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
)

// policyFlags are deploy-broker's flags for the fields of the ClusterSet
// policy (v1alpha1.ClusterSetPolicySpec).
type policyFlags struct {
	allowed                                    []string
	vipRange, vipRangeIPv6, supernet           string
	cidrBits, records, backends, claims, other int32
}

func (f *policyFlags) register(fs *pflag.FlagSet) {
	def := addrpolicy.DefaultPolicy()
	var allowed []string
	for _, a := range def.Allowed {
		allowed = append(allowed, a.String())
	}
	fs.StringSliceVar(&f.allowed, "allowed-cidrs", nil, "the address space members may announce pod and service CIDRs in, replacing the whole list (default of a new policy: "+strings.Join(allowed, ",")+"; the globalnet supernet is allowed besides)")
	fs.StringVar(&f.vipRange, "vip-range", "", "the IPv4 clusterset VIP range (default of a new policy: "+def.VIPRange.String()+")")
	fs.StringVar(&f.vipRangeIPv6, "vip-range-ipv6", "", "the IPv6 clusterset VIP range (default of a new policy: "+def.VIPRangeIPv6.String()+")")
	fs.StringVar(&f.supernet, "global-supernet", "", "the globalnet supernet members' global CIDRs are claimed in (default of a new policy: "+def.Supernet.String()+")")
	fs.Int32Var(&f.cidrBits, "global-cidr-bits", 0, fmt.Sprintf("the prefix length of one member's global CIDR, between the supernet's and 29 (default of a new policy: %d)", def.GlobalCIDRBits))
	fs.Int32Var(&f.records, "quota-service-export-records", 0, fmt.Sprintf("per member: ServiceExportRecords in its broker namespace (default of a new policy: %d)", def.Quotas.Records))
	fs.Int32Var(&f.backends, "quota-backends", 0, fmt.Sprintf("per member: backends an importer takes from it over all its records (default of a new policy: %d)", def.Quotas.Backends))
	fs.Int32Var(&f.claims, "quota-global-cidrs", 0, fmt.Sprintf("per member: global CIDR claims that count, its oldest, 1 to 16 (default of a new policy: %d)", def.Quotas.GlobalCIDRs))
	fs.Int32Var(&f.other, "quota-objects", 0, fmt.Sprintf("per member: objects of each other kind (Clusters, Endpoints, Leases, …) in its broker namespace (default of a new policy: %d)", def.Quotas.Objects))
}

// update sets the fields whose flags were given (fs.Changed), nothing
// else.
func (f *policyFlags) update(fs *pflag.FlagSet) broker.PolicyUpdate {
	return func(s *v1alpha1.ClusterSetPolicySpec) {
		for flag, set := range map[string]func(){
			"allowed-cidrs":                func() { s.AllowedCIDRs = f.allowed },
			"vip-range":                    func() { s.VIPRange = f.vipRange },
			"vip-range-ipv6":               func() { s.VIPRangeIPv6 = f.vipRangeIPv6 },
			"global-supernet":              func() { s.Globalnet.Supernet = f.supernet },
			"global-cidr-bits":             func() { s.Globalnet.CIDRBits = f.cidrBits },
			"quota-service-export-records": func() { s.Quotas.ServiceExportRecords = f.records },
			"quota-backends":               func() { s.Quotas.Backends = f.backends },
			"quota-global-cidrs":           func() { s.Quotas.GlobalCIDRs = f.claims },
			"quota-objects":                func() { s.Quotas.Objects = f.other },
		} {
			if fs.Changed(flag) {
				set()
			}
		}
	}
}

func newDeployBrokerCommand() *cobra.Command {
	var kubeconfig, server, dir string
	var clusterIDs []string
	var quotaTimeout time.Duration
	var pf policyFlags
	cmd := &cobra.Command{
		Use:   "deploy-broker",
		Short: "Set up the ClusterSet's broker and its policy, and write a join file per member cluster",
		Long: `Set up a broker API server for a ClusterSet: install Causeway's and the MCS
API's CRDs, store the ClusterSet policy, the broker's admission policies and
every member's quota, and for every --cluster-id the member's broker
namespace (cluster-<id>), ServiceAccount and RBAC (it may write only its own
namespace and read the others). For each it writes <output-dir>/<id>.join.yaml:
the broker's address and CA and a token of that member's own identity, valid
for 24 hours (join within them), so joining (causewayctl join --join-file)
needs no broker-admin credentials and the token can do nothing but what
that member may. Once joined, the member's MCS controller replaces it with
tokens valid for an hour, rotated every half hour.

The ClusterSet policy (ClusterSetPolicy "clusterset", cluster scoped) is
what every member's daemons read and no member may write: the address space
members may announce, the clusterset VIP ranges, the globalnet supernet and
block size, and the per-member quotas. The flags below set its fields: a
flag given sets that field, a flag not given keeps the field as the broker
holds it (its default when the broker holds no policy yet). Running
deploy-broker again without policy flags therefore keeps a policy an
administrator set before; to return a field to its default, give the
default. A policy that does not hold together (e.g. a VIP range overlapping
the supernet, a block size outside the supernet) is refused before anything
is written. The broker's admission refuses member writes outside the policy
(causeway-member-bounds) or in another member's name
(causeway-member-ownership), and a ResourceQuota "causeway-member" in every
member namespace (updated here whenever the policy changes) bounds the
member's objects; the broker's quota controller (kube-controller-manager's)
must run for it to be enforced: deploy-broker waits up to --quota-timeout
for that.

Idempotent: running it again adds new IDs, recreates the identity of a
member that left, and issues fresh tokens.`,
		Example: `  causewayctl deploy-broker --kubeconfig broker-admin.yaml --cluster-id c1 --cluster-id c2
  causewayctl deploy-broker --kubeconfig broker-admin.yaml --vip-range 243.16.0.0/16 --quota-service-export-records 2000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			admin, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return fmt.Errorf("broker kubeconfig: %w", err)
			}
			pol, err := broker.PlanPolicy(ctx, admin, pf.update(cmd.Flags()))
			if err != nil {
				return err
			}
			if err := broker.EnsureClusterSet(ctx, admin, pol); err != nil {
				return err
			}
			fmt.Fprintln(out, "broker: CRDs installed (causeway.dev, multicluster.x-k8s.io), admission policies "+broker.OwnershipPolicyName+" and "+broker.BoundsPolicyName)
			printPolicy(out, pol)
			for _, id := range clusterIDs {
				raw, err := broker.EnsureClusterIdentity(ctx, admin, id)
				if err != nil {
					return err
				}
				if server != "" {
					if raw, err = broker.WithServer(raw, server); err != nil {
						return err
					}
				}
				path := filepath.Join(dir, id+".join.yaml")
				if err := os.WriteFile(path, raw, 0o600); err != nil {
					return err
				}
				fmt.Fprintf(out, "broker: cluster %s: namespace %s, join file %s\n", id, broker.Namespace(id), path)
			}
			if quotaTimeout <= 0 || len(clusterIDs) == 0 {
				return nil
			}
			if err := broker.EnforceQuotas(ctx, admin, pol, clusterIDs, quotaTimeout); err != nil {
				return err
			}
			fmt.Fprintf(out, "broker: quotas enforced in %s\n", strings.Join(clusterIDs, ", "))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig with admin rights on the broker API server (required)")
	f.StringSliceVar(&clusterIDs, "cluster-id", nil, "a member cluster's ID, a DNS label (repeatable)")
	f.StringVar(&server, "server", "", "the broker API server's URL as the members reach it (default: the kubeconfig's)")
	f.StringVar(&dir, "output-dir", ".", "directory the join files are written to (mode 0600)")
	f.DurationVar(&quotaTimeout, "quota-timeout", time.Minute, "how long to wait for the broker to enforce the quotas of the --cluster-id members (an error after it); 0: do not wait")
	pf.register(f)
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}

// printPolicy writes the ClusterSet policy in effect.
func printPolicy(out io.Writer, p addrpolicy.Policy) {
	var allowed []string
	for _, a := range p.Allowed {
		allowed = append(allowed, a.String())
	}
	q := p.Quotas
	fmt.Fprintf(out, "broker: ClusterSet policy %s: allowed %s; VIP ranges %s, %s; globalnet supernet %s, /%d per claim; "+
		"per member %d export records, %d backends, %d global CIDRs, %d objects of each other kind\n",
		v1alpha1.ClusterSetPolicyName, strings.Join(allowed, ","), p.VIPRange, p.VIPRangeIPv6, p.Supernet, p.GlobalCIDRBits,
		q.Records, q.Backends, q.GlobalCIDRs, q.Objects)
}
