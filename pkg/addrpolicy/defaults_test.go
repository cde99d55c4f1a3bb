package addrpolicy_test

import (
	"testing"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// The policy's default VIP range is the one the MCS controller allocates
// from: a drift would let a remote subnet shadow VIPs.
func TestDefaultVIPRangeIsMCS(t *testing.T) {
	if addrpolicy.DefaultVIPRange != mcs.DefaultVIPRange {
		t.Fatalf("addrpolicy.DefaultVIPRange %s, mcs.DefaultVIPRange %s", addrpolicy.DefaultVIPRange, mcs.DefaultVIPRange)
	}
}
