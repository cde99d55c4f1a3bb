package mcs_test

import (
	"testing"

	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// The subnet policy's default VIP range (refused as a remote subnet) is the
// one VIPs are allocated from: a drift would let a remote subnet shadow
// VIPs. The check lives here so that pkg/addrpolicy's tests (and its
// fuzzing) stay free of this package's Kubernetes dependencies.
func TestDefaultVIPRangeIsMCS(t *testing.T) {
	if addrpolicy.DefaultVIPRange != mcs.DefaultVIPRange {
		t.Fatalf("addrpolicy.DefaultVIPRange %s, mcs.DefaultVIPRange %s", addrpolicy.DefaultVIPRange, mcs.DefaultVIPRange)
	}
}
