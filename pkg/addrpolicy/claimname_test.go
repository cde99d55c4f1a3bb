package addrpolicy

import (
	"net/netip"
	"testing"
)

func TestCIDRClaimName(t *testing.T) {
	for p, want := range map[string]string{
		"10.244.0.0/16":      "10.244.0.0-16",
		"fd00:10:244:1::/64": "v6-fd00-0010-0244-0001-0000-0000-0000-0000-64",
		"fd00::/16":          "v6-fd00-0000-0000-0000-0000-0000-0000-0000-16",
	} {
		got := CIDRClaimName(netip.MustParsePrefix(p))
		if got != want {
			t.Errorf("CIDRClaimName(%s) = %s, want %s", p, got, want)
		}
		back, err := ParseCIDRClaimName(got)
		if err != nil || back.String() != p {
			t.Errorf("ParseCIDRClaimName(%s) = %v, %v; want %s", got, back, err, p)
		}
	}
	for _, bad := range []string{"10.244.0.1-16", "10.244.0.0-016", "10.244.0.0", "v6-fd00-10-244-1-0-0-0-0-64", "v6-FD00-0000-0000-0000-0000-0000-0000-0000-16",
		"v6-0000-0000-0000-0000-0000-ffff-0a00-0000-104", "fd00::-16", "v6-", "v6-fd00"} {
		if p, err := ParseCIDRClaimName(bad); err == nil {
			t.Errorf("ParseCIDRClaimName(%q) = %s, want an error", bad, p)
		}
	}
}

func TestDirectCIDRs(t *testing.T) {
	subnets := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/64"), netip.MustParsePrefix("10.96.0.0/16")}
	if got := DirectCIDRs(subnets, false); len(got) != 3 {
		t.Errorf("without globalnet: %v, want all of %v", got, subnets)
	}
	if got := DirectCIDRs(subnets, true); len(got) != 1 || got[0] != subnets[1] {
		t.Errorf("under globalnet: %v, want the IPv6 one only", got)
	}
}
