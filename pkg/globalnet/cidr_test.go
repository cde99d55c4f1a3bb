package globalnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/causeway-net/causeway/internal/kubetest"
)

func TestCIDRObjectName(t *testing.T) {
	p := netip.MustParsePrefix("242.0.1.0/24")
	if got := CIDRObjectName(p); got != "242.0.1.0-24" {
		t.Fatalf("CIDRObjectName = %q", got)
	}
	back, err := ParseCIDRObjectName("242.0.1.0-24")
	if err != nil || back != p {
		t.Fatalf("ParseCIDRObjectName = %v, %v", back, err)
	}
	for _, bad := range []string{"242.0.1.1-24", "242.0.1.0", "x-24", "242.0.1.0-24-1", "242.0.1.0-33"} {
		if _, err := ParseCIDRObjectName(bad); err == nil {
			t.Errorf("ParseCIDRObjectName(%q) accepted", bad)
		}
	}
}

func TestParsePlan(t *testing.T) {
	vip := netip.MustParsePrefix("243.0.0.0/12")
	if _, err := ParsePlan(DefaultSupernet, DefaultCIDRBits, vip, netip.MustParsePrefix("10.244.0.0/16")); err != nil {
		t.Fatalf("default plan refused: %v", err)
	}
	for _, c := range []struct {
		supernet string
		bits     int
	}{
		{"243.0.0.0/8", 24},  // overlaps the VIP range
		{"242.0.0.1/8", 24},  // host bits
		{"242.0.0.0/8", 7},   // larger than the supernet
		{"242.0.0.0/8", 31},  // too small to hold a layout
		{"fd00::/8", 64},     // IPv6
		{"10.0.0.0/8", 24},   // overlaps the local pod CIDR
		{"not-a-cidr", 24},   // garbage
		{"242.0.0.0/4", 28},  // 2^24 ranges
		{"242.0.0.0/16", 15}, // bits < supernet
	} {
		if _, err := ParsePlan(c.supernet, c.bits, vip, netip.MustParsePrefix("10.244.0.0/16")); err == nil {
			t.Errorf("ParsePlan(%s, /%d) accepted", c.supernet, c.bits)
		}
	}
}

func TestPlanBlocks(t *testing.T) {
	pl, err := ParsePlan("242.0.0.0/22", 24)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range pl.size() {
		got = append(got, pl.block(i).String())
	}
	if fmt.Sprint(got) != "[242.0.0.0/24 242.0.1.0/24 242.0.2.0/24 242.0.3.0/24]" {
		t.Fatalf("blocks = %v", got)
	}
}

// TestClaimRace claims global CIDRs for more clusters than the supernet
// holds, all at the same moment, against a real API server: every range
// goes to exactly one cluster, the rest get ErrSupernetExhausted, a second
// Claim returns the same range (stable), and Release frees it.
func TestClaimRace(t *testing.T) {
	broker := kubetest.Start(t, "broker")
	ctx := context.Background()
	pl, err := ParsePlan("242.1.0.0/22", 24) // four ranges
	if err != nil {
		t.Fatal(err)
	}
	const clusters = 6
	got := make([]netip.Prefix, clusters)
	errs := make([]error, clusters)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clusters {
		wg.Go(func() {
			<-start
			// Six clusters, four ranges: several start their
			// search at the same range.
			got[i], errs[i] = Claim(ctx, broker.Client, broker.Client, pl, fmt.Sprintf("c%d", i))
		})
	}
	close(start)
	wg.Wait()
	owner := map[netip.Prefix]int{}
	exhausted := 0
	for i := range clusters {
		switch {
		case errors.Is(errs[i], ErrSupernetExhausted):
			exhausted++
		case errs[i] != nil:
			t.Fatalf("c%d: %v", i, errs[i])
		default:
			if j, dup := owner[got[i]]; dup {
				t.Fatalf("c%d and c%d both got %s", j, i, got[i])
			}
			owner[got[i]] = i
		}
	}
	if len(owner) != 4 || exhausted != 2 {
		t.Fatalf("%d ranges claimed, %d exhausted; want 4 and 2", len(owner), exhausted)
	}
	claims, err := Claims(ctx, broker.Client)
	if err != nil {
		t.Fatal(err)
	}
	for p, i := range owner {
		id := fmt.Sprintf("c%d", i)
		if len(claims[id]) != 1 || claims[id][0] != p {
			t.Errorf("broker claims of %s = %v, want [%s]", id, claims[id], p)
		}
		again, err := Claim(ctx, broker.Client, broker.Client, pl, id)
		if err != nil || again != p {
			t.Errorf("second Claim for %s = %v, %v; want %s", id, again, err, p)
		}
	}
	// One cluster leaves; a waiting one gets its range.
	var leaving int
	var freed netip.Prefix
	for p, i := range owner {
		leaving, freed = i, p
		break
	}
	if err := Release(ctx, broker.Client, broker.Client, fmt.Sprintf("c%d", leaving)); err != nil {
		t.Fatal(err)
	}
	next, err := Claim(ctx, broker.Client, broker.Client, pl, "late")
	if err != nil || next != freed {
		t.Fatalf("Claim after release = %v, %v; want %s", next, err, freed)
	}
}
