package globalnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
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

func TestBlocks(t *testing.T) {
	pol := policy(t, "242.0.0.0/22", 24)
	var got []string
	for i := range blocks(pol) {
		got = append(got, block(pol, i).String())
	}
	if fmt.Sprint(got) != "[242.0.0.0/24 242.0.1.0/24 242.0.2.0/24 242.0.3.0/24]" {
		t.Fatalf("blocks = %v", got)
	}
}

func policy(t *testing.T, supernet string, bits int32) addrpolicy.Policy {
	t.Helper()
	p, err := addrpolicy.ParsePolicy(v1alpha1.ClusterSetPolicySpec{Globalnet: v1alpha1.GlobalnetPolicy{Supernet: supernet, CIDRBits: bits}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestClaimsCount: only claims of the policy's size inside its supernet
// count, and of each member only its oldest Quotas.GlobalCIDRs ones; a
// supernet overlapping the cluster's own CIDRs is refused.
func TestClaimsCount(t *testing.T) {
	broker := kubetest.Start(t, "broker")
	ctx := context.Background()
	pol := policy(t, "242.0.0.0/16", 24)
	mk := func(name, owner string) {
		t.Helper()
		obj := &v1alpha1.GlobalCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.GlobalCIDRSpec{ClusterID: owner}}
		if err := broker.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // creation timestamps have whole seconds
	}
	mk("242.0.5.0-24", "c1")
	mk("242.0.1.0-24", "c1") // c1's second: over its quota of one
	mk("0.0.0.0-1", "c2")    // not a block of the supernet
	mk("242.0.0.0-16", "c2") // the whole supernet
	mk("242.0.2.0-25", "c2") // the wrong size
	mk("243.0.0.0-24", "c2") // outside the supernet
	mk("242.0.3.0-24", "c3")
	claims, err := ClaimedCIDRs(ctx, broker.Client, pol)
	if err != nil {
		t.Fatal(err)
	}
	if want := "map[c1:[242.0.5.0/24] c3:[242.0.3.0/24]]"; fmt.Sprint(claims) != want {
		t.Fatalf("Claims = %v, want %s", claims, want)
	}
	// c1's Claim keeps the claim that counts and releases the other.
	got, err := ClaimCIDR(ctx, broker.Client, broker.Client, pol, nil, "c1")
	if err != nil || got != netip.MustParsePrefix("242.0.5.0/24") {
		t.Fatalf("ClaimCIDR(c1) = %v, %v", got, err)
	}
	if err := broker.Client.Get(ctx, client.ObjectKey{Name: "242.0.1.0-24"}, &v1alpha1.GlobalCIDR{}); !apierrors.IsNotFound(err) {
		t.Fatalf("c1's extra claim not released: %v", err)
	}
	// A new member skips every taken name, counting or not.
	got, err = ClaimCIDR(ctx, broker.Client, broker.Client, pol, nil, "c4")
	if err != nil || got != netip.MustParsePrefix("242.0.0.0/24") {
		t.Fatalf("ClaimCIDR(c4) = %v, %v", got, err)
	}
	if _, err := ClaimCIDR(ctx, broker.Client, broker.Client, pol, []netip.Prefix{netip.MustParsePrefix("242.0.128.0/17")}, "c5"); err == nil {
		t.Fatal("a supernet overlapping the cluster's own CIDRs was accepted")
	}
}

// TestClaimRace claims global CIDRs for more clusters than the supernet
// holds, all at the same moment, against a real API server: every range
// goes to exactly one cluster, the rest get ErrSupernetExhausted, a second
// ClaimCIDR returns the same range (stable), and ReleaseCIDR frees it.
func TestClaimRace(t *testing.T) {
	broker := kubetest.Start(t, "broker")
	ctx := context.Background()
	pl := policy(t, "242.1.0.0/22", 24) // four ranges
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
			got[i], errs[i] = ClaimCIDR(ctx, broker.Client, broker.Client, pl, nil, fmt.Sprintf("c%d", i))
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
	claims, err := ClaimedCIDRs(ctx, broker.Client, pl)
	if err != nil {
		t.Fatal(err)
	}
	for p, i := range owner {
		id := fmt.Sprintf("c%d", i)
		if len(claims[id]) != 1 || claims[id][0] != p {
			t.Errorf("broker claims of %s = %v, want [%s]", id, claims[id], p)
		}
		again, err := ClaimCIDR(ctx, broker.Client, broker.Client, pl, nil, id)
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
	if err := ReleaseCIDR(ctx, broker.Client, broker.Client, fmt.Sprintf("c%d", leaving)); err != nil {
		t.Fatal(err)
	}
	next, err := ClaimCIDR(ctx, broker.Client, broker.Client, pl, nil, "late")
	if err != nil || next != freed {
		t.Fatalf("Claim after release = %v, %v; want %s", next, err, freed)
	}
}
