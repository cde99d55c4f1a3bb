package broker_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/globalnet"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// celPolicy is a ValidatingAdmissionPolicy compiled with the API server's
// CEL environment (the libraries of environment.MustBaseEnvSet), to
// evaluate it in-process: variables lazily, in order, as the API server
// does. The apiserver tests (TestMemberBounds) are the proof; this runs
// the same expressions fast enough to fuzz.
type celPolicy struct {
	vars  []string
	progs map[string]cel.Program // variable name or "validation <i>"
	n     int
}

func compilePolicy(t testing.TB, pol *admissionregistrationv1.ValidatingAdmissionPolicy) *celPolicy {
	t.Helper()
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.StoredExpressions)
	if err != nil {
		t.Fatal(err)
	}
	decls := []cel.EnvOption{cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.Variable("params", cel.DynType), cel.Variable("request", cel.DynType)}
	for _, v := range pol.Spec.Variables {
		decls = append(decls, cel.Variable("variables."+v.Name, cel.DynType))
	}
	if env, err = env.Extend(decls...); err != nil {
		t.Fatal(err)
	}
	p := &celPolicy{progs: map[string]cel.Program{}, n: len(pol.Spec.Validations)}
	compile := func(key, expr string) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", key, iss.Err())
		}
		prog, err := env.Program(ast)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		p.progs[key] = prog
	}
	for _, v := range pol.Spec.Variables {
		p.vars = append(p.vars, v.Name)
		compile(v.Name, v.Expression)
	}
	for i, v := range pol.Spec.Validations {
		compile(fmt.Sprint("validation ", i), v.Expression)
		if v.MessageExpression != "" {
			compile(fmt.Sprint("message ", i), v.MessageExpression)
		}
	}
	return p
}

// refused evaluates the policy's validations for a member's request and
// returns the index of the first that refuses it (false or an error: the
// policy fails closed), -1 when none does.
func (p *celPolicy) refused(member, operation, resource string, object, params runtime.Object) int {
	toMap := func(o runtime.Object) map[string]any {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			panic(err)
		}
		return m
	}
	act := map[string]any{
		"object": toMap(object), "oldObject": nil, "params": toMap(params),
		"request": map[string]any{"operation": operation, "resource": map[string]any{"resource": resource},
			"kind":     map[string]any{"kind": fmt.Sprintf("%T", object)},
			"userInfo": map[string]any{"username": "system:serviceaccount:" + broker.Namespace(member) + ":" + broker.ServiceAccountName}},
	}
	for _, name := range p.vars {
		prog := p.progs[name]
		act["variables."+name] = func() any {
			v, _, err := prog.Eval(act)
			if err != nil {
				return err
			}
			return v
		}
	}
	for i := range p.n {
		v, _, err := p.progs[fmt.Sprint("validation ", i)].Eval(act)
		if err != nil || v.Value() != true {
			return i
		}
	}
	return -1
}

// FuzzClaimNames checks the parsers of claim names (GlobalCIDR:
// globalnet.ParseCIDRObjectName, VIPAllocation: mcs.ParseVIPObjectName)
// round-trip, and that the broker's admission (BoundsPolicy) accepts
// exactly the names the Go code takes for a claim of the ClusterSet's
// policy: a global CIDR of the supernet (addrpolicy.Policy.IsGlobalCIDR),
// a VIP of its family's range. Seeds: testdata/fuzz/FuzzClaimNames, under
// testPolicy.
func FuzzClaimNames(f *testing.F) {
	pol, err := addrpolicy.ParsePolicy(testPolicy(f).Spec())
	if err != nil {
		f.Fatal(err)
	}
	params := clusterset.Object(pol)
	bounds := compilePolicy(f, broker.BoundsPolicy())
	f.Fuzz(func(t *testing.T, name string) {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return // the API server refuses the name before admission
		}
		p, err := globalnet.ParseCIDRObjectName(name)
		if err == nil && globalnet.CIDRObjectName(p) != name {
			t.Fatalf("ParseCIDRObjectName(%q) = %s, whose name is %q", name, p, globalnet.CIDRObjectName(p))
		}
		want := err == nil && pol.IsGlobalCIDR(p)
		if got := bounds.refused("a", "CREATE", "globalcidrs", globalCIDR(name, "a"), params) < 0; got != want {
			t.Fatalf("global CIDR claim %q: admission accepts %v, the Go parser and policy %v (%v)", name, got, want, err)
		}

		a, err := mcs.ParseVIPObjectName(name)
		if err == nil && mcs.VIPObjectName(a) != name {
			t.Fatalf("ParseVIPObjectName(%q) = %s, whose name is %q", name, a, mcs.VIPObjectName(a))
		}
		want = err == nil && pol.VIPRangeOf(a).Contains(a)
		if got := bounds.refused("a", "CREATE", "vipallocations", vipAllocation(name, "a"), params) < 0; got != want {
			t.Fatalf("VIP allocation %q: admission accepts %v, the Go parser and policy %v (%v)", name, got, want, err)
		}

		// A CIDRClaim of the CIDR its name stands for (else of the
		// name with "/" for the first "-"): accepted exactly when the
		// name parses and importers accept the CIDR as a pod CIDR.
		cidr := strings.Replace(name, "-", "/", 1)
		p, err = addrpolicy.ParseCIDRClaimName(name)
		if err == nil {
			if addrpolicy.CIDRClaimName(p) != name {
				t.Fatalf("ParseCIDRClaimName(%q) = %s, whose name is %q", name, p, addrpolicy.CIDRClaimName(p))
			}
			cidr = p.String()
		}
		want = err == nil && directAccepted(pol, cidr)
		if got := bounds.refused("a", "CREATE", "cidrclaims", cidrClaimObj("a", name, "a", cidr), params) < 0; got != want {
			t.Fatalf("CIDR claim %q of %s: admission accepts %v, the Go parser and policy %v (%v)", name, cidr, got, want, err)
		}
	})
}

// TestBoundsPolicyCIDRs evaluates BoundsPolicy's CIDR rules in-process
// against addrpolicy's for the announcements of a Cluster: admission
// refuses no CIDR the importers accept, under the default and a custom
// policy.
func TestBoundsPolicyCIDRs(t *testing.T) {
	bounds := compilePolicy(t, broker.BoundsPolicy())
	for _, pol := range []addrpolicy.Policy{addrpolicy.DefaultPolicy(), testPolicy(t)} {
		params := clusterset.Object(pol)
		for _, c := range []string{"10.244.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.1.0/24", "100.64.0.0/10", "fd00:10:244::/64",
			"8.8.8.0/24", "0.0.0.0/1", "10.0.0.0/7", "243.0.0.0/12", "243.16.0.0/20", "242.0.0.0/8", "242.1.0.0/24", "fd00::/16",
			"fd63:6175:7365::/64", "10.244.0.1/16", "::ffff:10.0.0.0/104", "127.0.0.0/8"} {
			importers := directAccepted(pol, c)
			admission := bounds.refused("a", "CREATE", "clusters", clusterObj("a", []string{c}, []string{c}, nil), params) < 0
			if importers != admission {
				t.Errorf("policy %s: pod CIDR %s: admission accepts %v, importers %v", pol.VIPRange, c, admission, importers)
			}
			claimed := bounds.refused("a", "CREATE", "cidrclaims", cidrClaimObj("a", claimName(c), "a", c), params) < 0
			if importers != claimed {
				t.Errorf("policy %s: CIDR claim of %s: admission accepts %v, importers %v", pol.VIPRange, c, claimed, importers)
			}
		}
	}
}

// directAccepted reports whether importers (addrpolicy rules 1 and 2)
// accept c as a pod and service CIDR under pol.
func directAccepted(pol addrpolicy.Policy, c string) bool {
	d := addrpolicy.Decide(addrpolicy.Config{Policy: pol}, []addrpolicy.Remote{{ClusterID: "a",
		Cluster: &addrpolicy.Cluster{PodCIDRs: []string{c}, ServiceCIDRs: []string{c}}}})
	return d[0].Cluster.Valid
}

// claimName is the CIDRClaim name of c, or c with "-" for "/" when c is
// no CIDR or not canonical.
func claimName(c string) string {
	if p, err := netip.ParsePrefix(c); err == nil && p == p.Masked() && !p.Addr().Is4In6() {
		return addrpolicy.CIDRClaimName(p)
	}
	return strings.Replace(c, "/", "-", 1)
}

// TestRecordBound: admission refuses a record object exactly where the
// MCS controller starts splitting one into parts.
func TestRecordBound(t *testing.T) {
	if broker.MaxRecordItems != mcs.MaxRecordItems {
		t.Fatalf("broker.MaxRecordItems = %d, mcs.MaxRecordItems = %d", broker.MaxRecordItems, mcs.MaxRecordItems)
	}
}

// TestOwnershipPolicyTunnelKeys evaluates OwnershipPolicy's rules for
// TunnelKey creations in-process: a member claims a key only labelled and
// spec'd in its own name (TestClusterIdentity proves it, with deletes, on
// an API server).
func TestOwnershipPolicyTunnelKeys(t *testing.T) {
	own := compilePolicy(t, broker.OwnershipPolicy())
	params := clusterset.Object(addrpolicy.DefaultPolicy())
	pub := "AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM="
	for _, tc := range []struct {
		label, spec string
		accepted    bool
	}{{"a", "a", true}, {"b", "b", false}, {"a", "b", false}, {"b", "a", false}, {"", "a", false}} {
		k := &v1alpha1.TunnelKey{ObjectMeta: metav1.ObjectMeta{Name: broker.TunnelKeyName(pub), Labels: map[string]string{}},
			Spec: v1alpha1.TunnelKeySpec{ClusterID: tc.spec, PublicKey: pub}}
		if tc.label != "" {
			k.Labels[broker.LabelClusterID] = tc.label
		}
		if got := own.refused("a", "CREATE", "tunnelkeys", k, params) < 0; got != tc.accepted {
			t.Errorf("a claims a tunnel key labelled %q for cluster %q: accepted %v, want %v", tc.label, tc.spec, got, tc.accepted)
		}
	}
}
