package wireguard

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/causeway-net/causeway/pkg/cable"
)

// TestUniqueKeys: connections sharing a public key are all refused —
// no cluster wins a shared key by the order of its ID — and the others
// are kept.
func TestUniqueKeys(t *testing.T) {
	conn := func(id string, key byte) cable.Connection {
		return cable.Connection{ClusterID: id, PublicKey: cable.Key{key}, Endpoint: netip.MustParseAddrPort("198.18.0.1:4500"),
			Subnets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}}
	}
	own := cable.Key{1}
	for _, tc := range []struct {
		name    string
		conns   []cable.Connection
		kept    []string
		refused []string
	}{
		{"distinct keys", []cable.Connection{conn("c2", 2), conn("c3", 3)}, []string{"c2", "c3"}, nil},
		{"shared key: both refused", []cable.Connection{conn("c0", 3), conn("c2", 2), conn("c3", 3)}, []string{"c2"}, []string{"c0", "c3"}},
		{"three share a key", []cable.Connection{conn("c0", 3), conn("c3", 3), conn("c4", 3)}, nil, []string{"c0", "c3", "c4"}},
		{"the local key", []cable.Connection{conn("c2", 1), conn("c3", 3)}, []string{"c3"}, []string{"c2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, errs := uniqueKeys(tc.conns, own)
			var ids []string
			for _, c := range kept {
				ids = append(ids, c.ClusterID)
			}
			if !slices.Equal(ids, tc.kept) {
				t.Errorf("kept %v, want %v", ids, tc.kept)
			}
			var refused []string
			for _, err := range errs {
				var verr *cable.ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("error %v is not a ValidationError", err)
				}
				refused = append(refused, verr.ClusterID)
			}
			if !slices.Equal(refused, tc.refused) {
				t.Errorf("refused %v, want %v (%v)", refused, tc.refused, errs)
			}
		})
	}
}
