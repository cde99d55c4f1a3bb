package gateway

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/broker"
)

// TestClaimCIDRs runs claimCIDRs against a real broker with the member's
// own identity: it claims what is announced, a claim held keeps its
// creation time (its age), a CIDR no longer announced is released, and
// readCIDRClaims reads the result.
func TestClaimCIDRs(t *testing.T) {
	ctrllog.SetLogger(logr.Discard())
	api := kubetest.Start(t, "broker")
	ctx := context.Background()
	if err := broker.EnsureClusterSet(ctx, api.Config, addrpolicy.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	kc, err := broker.EnsureClusterIdentity(ctx, api.Config, "c1")
	if err != nil {
		t.Fatal(err)
	}
	e := &Engine{cfg: Config{ClusterID: "c1"}, broker: kubetest.KubeconfigClient(t, kc), log: slog.New(slog.DiscardHandler)}
	pods, svcs, pods6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:10:244:1::/64")

	claims := func() map[netip.Prefix]time.Time {
		t.Helper()
		all, err := e.readCIDRClaims(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return all["c1"]
	}
	if err := e.claimCIDRs(ctx, []netip.Prefix{pods, svcs}); err != nil {
		t.Fatal(err)
	}
	first := claims()
	if len(first) != 2 || first[pods].IsZero() || first[svcs].IsZero() {
		t.Fatalf("claims %v, want %s and %s", first, pods, svcs)
	}
	time.Sleep(1100 * time.Millisecond) // creation times count in seconds
	if err := e.claimCIDRs(ctx, []netip.Prefix{pods, pods6}); err != nil {
		t.Fatal(err)
	}
	second := claims()
	if !second[pods].Equal(first[pods]) {
		t.Errorf("the claim held on %s was renewed: created %s, then %s", pods, first[pods], second[pods])
	}
	if _, ok := second[svcs]; ok || !second[pods6].After(first[pods]) || len(second) != 2 {
		t.Errorf("claims %v, want %s as before, %s new, %s released", second, pods, pods6, svcs)
	}
	var list v1alpha1.CIDRClaimList
	if err := api.Client.List(ctx, &list, client.InNamespace(broker.Namespace("c1"))); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	if want := []string{"10.244.0.0-16", "v6-fd00-0010-0244-0001-0000-0000-0000-0000-64"}; !slices.Equal(names, want) {
		t.Errorf("claim objects %v, want %v", names, want)
	}
}
