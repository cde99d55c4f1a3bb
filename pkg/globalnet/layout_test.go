package globalnet

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
)

func TestNewLayout(t *testing.T) {
	for _, tc := range []struct {
		cidr    string
		egress  int
		want    string // health ingress egress
		wantErr bool
	}{
		{"242.0.1.0/24", 2, "242.0.1.1 242.0.1.2-242.0.1.252 [242.0.1.253 242.0.1.254]", false},
		{"242.0.1.0/24", 0, "242.0.1.1 242.0.1.2-242.0.1.254 []", false},
		{"242.0.0.0/16", 1, "242.0.0.1 242.0.0.2-242.0.255.253 [242.0.255.254]", false},
		{"242.0.1.0/29", 2, "242.0.1.1 242.0.1.2-242.0.1.4 [242.0.1.5 242.0.1.6]", false},
		{"242.0.1.0/30", 0, "242.0.1.1 242.0.1.2-242.0.1.2 []", false},
		{"242.0.1.0/30", 1, "", true}, // no ingress address left
		{"242.0.1.0/31", 0, "", true},
		{"242.0.1.0/32", 0, "", true},
		{"242.0.1.5/24", 2, "", true}, // not canonical
		{"fd00::/64", 2, "", true},
		{"242.0.1.0/24", -1, "", true},
		{"242.0.1.0/24", 253, "", true},
		{"242.0.1.0/24", 252, "242.0.1.1 242.0.1.2-242.0.1.2 [", false},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.cidr, tc.egress), func(t *testing.T) {
			l, err := NewLayout(netip.MustParsePrefix(tc.cidr), tc.egress)
			if tc.wantErr {
				if !errors.Is(err, ErrLayout) {
					t.Fatalf("err = %v, want ErrLayout", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("%s %s %v", l.HealthCheck, l.Ingress, l.Egress)
			if len(got) > len(tc.want) && tc.want[len(tc.want)-1] == '[' {
				got = got[:len(tc.want)] // long egress list: prefix check
			}
			if got != tc.want {
				t.Errorf("layout %q, want %q", got, tc.want)
			}
			if len(l.Egress) != tc.egress {
				t.Errorf("%d egress IPs, want %d", len(l.Egress), tc.egress)
			}
		})
	}
	var empty netip.Prefix
	if _, err := NewLayout(empty, 2); !errors.Is(err, ErrLayout) {
		t.Errorf("zero prefix: %v", err)
	}
}

func TestAddrRange(t *testing.T) {
	r := AddrRange{First: netip.MustParseAddr("242.0.0.254"), Last: netip.MustParseAddr("242.0.1.3")}
	if r.Len() != 6 || r.At(2) != netip.MustParseAddr("242.0.1.0") || r.Index(netip.MustParseAddr("242.0.1.3")) != 5 {
		t.Errorf("range arithmetic: len %d at(2) %s", r.Len(), r.At(2))
	}
	if r.Contains(netip.MustParseAddr("242.0.1.4")) || !r.Contains(r.First) || r.Contains(netip.MustParseAddr("::1")) {
		t.Error("Contains")
	}
}
