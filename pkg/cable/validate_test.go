package cable

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestValidate(t *testing.T) {
	key := Key{1}
	ep := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	good := func(id, e string, subnets ...string) Connection {
		return Connection{ClusterID: id, Endpoint: ep(e), PublicKey: key, Subnets: pfx(subnets...)}
	}
	tests := []struct {
		name     string
		in       []Connection
		req      Requirements
		wantIDs  []string
		rejected []string
	}{
		{"empty", nil, Requirements{}, nil, nil},
		{"two good, sorted", []Connection{good("c3", "198.18.0.3:1", "10.3.0.0/16"), good("c2", "198.18.0.2:1", "10.2.0.0/16")}, Requirements{PublicKey: true}, []string{"c2", "c3"}, nil},
		{"default route", []Connection{good("c2", "198.18.0.2:1", "0.0.0.0/0"), good("c3", "198.18.0.3:1", "10.3.0.0/16")}, Requirements{}, []string{"c3"}, []string{"c2"}},
		{"non-canonical", []Connection{good("c2", "198.18.0.2:1", "10.2.0.1/16")}, Requirements{}, nil, []string{"c2"}},
		// Overlaps are the policy's (pkg/addrpolicy): partial ones are
		// programmed, only the same subnet twice is unprogrammable.
		{"partial overlap is not arbitrated", []Connection{good("c2", "198.18.0.2:1", "10.2.0.0/16"), good("c3", "198.18.0.3:1", "10.2.128.0/24")}, Requirements{}, []string{"c2", "c3"}, nil},
		{"same subnet twice rejects both", []Connection{good("c2", "198.18.0.2:1", "10.2.0.0/16", "10.9.0.0/16"), good("c3", "198.18.0.3:1", "10.2.0.0/16"), good("c4", "198.18.0.4:1", "10.4.0.0/16")}, Requirements{}, []string{"c4"}, []string{"c2", "c3"}},
		{"missing key", []Connection{{ClusterID: "c2", Endpoint: ep("198.18.0.2:1"), Subnets: pfx("10.2.0.0/16")}}, Requirements{PublicKey: true}, nil, []string{"c2"}},
		{"port 0", []Connection{good("c2", "198.18.0.2:0", "10.2.0.0/16")}, Requirements{}, nil, []string{"c2"}},
		{"unspecified endpoint", []Connection{good("c2", "0.0.0.0:1", "10.2.0.0/16")}, Requirements{}, nil, []string{"c2"}},
		{"duplicate id", []Connection{good("c2", "198.18.0.2:1", "10.2.0.0/16"), good("c2", "198.18.0.3:1", "10.3.0.0/16")}, Requirements{}, nil, []string{"c2", "c2"}},
		// An IPv4 endpoint carries subnets of both families.
		{"ipv6 endpoint when ipv4 endpoint required", []Connection{good("c2", "[2001:db8::1]:1", "10.2.0.0/16"), good("c3", "198.18.0.3:1", "10.3.0.0/16", "fd00::/64")}, Requirements{IPv4Endpoint: true}, []string{"c3"}, []string{"c2"}},
		{"ipv6 endpoint allowed", []Connection{good("c2", "[2001:db8::1]:1", "10.2.0.0/16", "fd00:2::/64")}, Requirements{}, []string{"c2"}, nil},
		{"no subnets", []Connection{good("c2", "198.18.0.2:1")}, Requirements{}, nil, []string{"c2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Validate(tt.in, tt.req)
			var ids []string
			for _, c := range got {
				ids = append(ids, c.ClusterID)
			}
			if !slices.Equal(ids, tt.wantIDs) {
				t.Errorf("valid = %v, want %v", ids, tt.wantIDs)
			}
			var rejected []string
			if err != nil {
				for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
					var ve *ValidationError
					if !errors.As(e, &ve) {
						t.Fatalf("error %v is not a ValidationError", e)
					}
					rejected = append(rejected, ve.ClusterID)
				}
			}
			slices.Sort(rejected)
			if !slices.Equal(rejected, tt.rejected) {
				t.Errorf("rejected = %v (%v), want %v", rejected, err, tt.rejected)
			}
		})
	}
}

func TestValidateDedupsSubnets(t *testing.T) {
	in := []Connection{{ClusterID: "c", Endpoint: netip.MustParseAddrPort("198.18.0.2:1"),
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.9.0.0/16")}}}
	got, err := Validate(in, Requirements{})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.9.0.0/16")}
	if !slices.Equal(got[0].Subnets, want) {
		t.Fatalf("subnets %v, want %v", got[0].Subnets, want)
	}
	if !SamePrefixes(want, []netip.Prefix{want[1], want[0]}) {
		t.Fatal("SamePrefixes ignores order")
	}
}

func TestParseKey(t *testing.T) {
	k := Key{1, 2, 3}
	got, err := ParseKey(k.String())
	if err != nil || got != k {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if _, err := ParseKey("AAAA"); err == nil {
		t.Fatal("short key accepted")
	}
	if _, err := ParseKey("not base64!"); err == nil {
		t.Fatal("garbage accepted")
	}
}
