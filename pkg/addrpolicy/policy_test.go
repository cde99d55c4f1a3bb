package addrpolicy

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	want := Policy{
		Allowed:  DefaultAllowed(),
		VIPRange: netip.MustParsePrefix(DefaultVIPRange), VIPRangeIPv6: netip.MustParsePrefix(DefaultVIPRangeIPv6),
		Supernet: netip.MustParsePrefix(DefaultSupernet), GlobalCIDRBits: 24,
		Quotas: Quotas{Records: DefaultQuotaRecords, Backends: DefaultQuotaBackends, GlobalCIDRs: 1, Objects: DefaultQuotaObjects},
	}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("DefaultPolicy() = %+v, want %+v", p, want)
	}
	// Spec writes every field, and reads back as the same policy.
	back, err := ParsePolicy(p.Spec())
	if err != nil || !reflect.DeepEqual(back, p) {
		t.Fatalf("ParsePolicy(Spec()) = %+v, %v", back, err)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec v1alpha1.ClusterSetPolicySpec
		err  string // "" = accepted
	}{
		{name: "empty", spec: v1alpha1.ClusterSetPolicySpec{}},
		{name: "custom", spec: v1alpha1.ClusterSetPolicySpec{AllowedCIDRs: []string{"10.0.0.0/8", "10.0.0.0/8"}, VIPRange: "100.64.0.0/16",
			Globalnet: v1alpha1.GlobalnetPolicy{Supernet: "241.0.0.0/16", CIDRBits: 26}}},
		{name: "allowed not canonical", spec: v1alpha1.ClusterSetPolicySpec{AllowedCIDRs: []string{"10.0.0.1/8"}}, err: "canonical"},
		{name: "allowed reserved", spec: v1alpha1.ClusterSetPolicySpec{AllowedCIDRs: []string{"127.0.0.0/8"}}, err: "reserved"},
		{name: "allowed default route", spec: v1alpha1.ClusterSetPolicySpec{AllowedCIDRs: []string{"0.0.0.0/0"}}, err: "default route"},
		{name: "VIP range IPv6", spec: v1alpha1.ClusterSetPolicySpec{VIPRange: "fd00::/108"}, err: "not IPv4"},
		{name: "IPv6 VIP range IPv4", spec: v1alpha1.ClusterSetPolicySpec{VIPRangeIPv6: "10.0.0.0/16"}, err: "not IPv6"},
		{name: "VIP range reserved", spec: v1alpha1.ClusterSetPolicySpec{VIPRange: "127.0.0.0/16"}, err: "reserved"},
		{name: "VIP range in the supernet", spec: v1alpha1.ClusterSetPolicySpec{VIPRange: "242.1.0.0/16"}, err: "overlaps the globalnet supernet"},
		{name: "supernet IPv6", spec: v1alpha1.ClusterSetPolicySpec{Globalnet: v1alpha1.GlobalnetPolicy{Supernet: "fd00::/64"}}, err: "not IPv4"},
		{name: "block larger than the supernet", spec: v1alpha1.ClusterSetPolicySpec{Globalnet: v1alpha1.GlobalnetPolicy{CIDRBits: 7}}, err: "between"},
		{name: "block too small", spec: v1alpha1.ClusterSetPolicySpec{Globalnet: v1alpha1.GlobalnetPolicy{CIDRBits: 30}}, err: "between"},
		{name: "too many blocks", spec: v1alpha1.ClusterSetPolicySpec{Globalnet: v1alpha1.GlobalnetPolicy{CIDRBits: 29}}, err: "2^20"},
		{name: "negative quota", spec: v1alpha1.ClusterSetPolicySpec{Quotas: v1alpha1.MemberQuotas{Backends: -1}}, err: "at least 1"},
		{name: "global CIDR quota beyond the schema's", spec: v1alpha1.ClusterSetPolicySpec{Quotas: v1alpha1.MemberQuotas{GlobalCIDRs: MaxQuotaGlobalCIDRs + 1}}, err: "at most 16"},
		{name: "allowed CIDRs beyond the schema's", spec: v1alpha1.ClusterSetPolicySpec{AllowedCIDRs: slices.Repeat([]string{"10.0.0.0/8"}, MaxAllowedCIDRs+1)}, err: "at most 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy(tc.spec)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one with %q", err, tc.err)
			}
		})
	}
}

func TestIsGlobalCIDR(t *testing.T) {
	p := DefaultPolicy()
	for s, want := range map[string]bool{
		"242.0.1.0/24": true, "242.255.255.0/24": true, "242.0.1.0/25": false, "242.0.0.0/16": false,
		"243.0.1.0/24": false, "10.0.1.0/24": false, "fd00::/24": false,
	} {
		if got := p.IsGlobalCIDR(netip.MustParsePrefix(s)); got != want {
			t.Errorf("IsGlobalCIDR(%s) = %v, want %v", s, got, want)
		}
	}
}
