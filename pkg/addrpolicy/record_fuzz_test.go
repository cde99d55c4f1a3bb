package addrpolicy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// FuzzCheckRecord feeds CheckRecord any record (JSON of the broker
// object's spec, as a member could write it) with any claim (CIDRs
// separated by spaces; tunnel on or off) and checks that it does not
// panic, decides the same twice, refuses with a typed reason, and that
// whatever it accepts is safe to program: every address an importer
// sends traffic to lies inside the claim (with a tunnel; per family, and
// only for the families the claim carries), no address of
// the record is reserved or in the VIP range, every port is in 1–65535,
// and the sizes are bounded. The seed corpus is
// testdata/fuzz/FuzzCheckRecord (run by every go test).
func FuzzCheckRecord(f *testing.F) {
	for _, r := range []*v1alpha1.ServiceExportRecordSpec{goodRecord(), globalRecord()} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "10.2.0.0/16 10.92.0.0/16", true)
		f.Add(b, "242.0.2.0/24", true)
		f.Add(b, "0.0.0.0/1 128.0.0.0/1", false)
	}
	cfg := Config{LocalCIDRs: prefixes("10.244.0.0/16", "10.96.0.0/16"), NodeCIDRs: prefixes("172.20.1.0/24")}.WithDefaults()
	f.Fuzz(func(t *testing.T, raw []byte, subnets string, tunnel bool) {
		var r v1alpha1.ServiceExportRecordSpec
		if json.Unmarshal(raw, &r) != nil {
			return
		}
		claim := Claim{ClusterID: "c2", Tunnel: tunnel}
		for _, s := range strings.Fields(subnets) {
			if p, err := netip.ParsePrefix(s); err == nil {
				claim.Subnets = append(claim.Subnets, p)
			}
		}
		err := CheckRecord(cfg, &r, claim)
		if again := CheckRecord(cfg, &r, claim); (err == nil) != (again == nil) || err != nil && err.Error() != again.Error() {
			t.Fatalf("two verdicts: %v, then %v", err, again)
		}
		if err != nil {
			var re *RecordError
			if !errors.As(err, &re) || re.Reason == "" || re.Message == "" {
				t.Fatalf("untyped refusal %v", err)
			}
			return
		}
		checkAccepted(t, cfg, &r, claim)
	})
}

// checkAccepted re-derives, independently of CheckRecord, what an
// accepted record may hold.
func checkAccepted(t *testing.T, cfg Config, r *v1alpha1.ServiceExportRecordSpec, claim Claim) {
	t.Helper()
	backends := 0
	for _, g := range r.Endpoints {
		backends += len(g.Backends)
	}
	if len(r.Ports) > MaxRecordPorts || backends > MaxRecordBackends || len(r.Endpoints) > MaxRecordEndpointGroups || r.ClusterID != claim.ClusterID {
		t.Fatalf("accepted an oversized record or another cluster's: %d ports, %d backends", len(r.Ports), backends)
	}
	var all, reached []string
	// global: the families (IPv4 = true) the record carries global
	// addresses of; those of its own addresses are reached through them.
	global := map[bool]bool{}
	family := func(s string) bool { a, _ := netip.ParseAddr(s); return a.Is4() }
	for _, p := range r.Ports {
		if p.Port < 1 || p.Port > 65535 {
			t.Fatalf("accepted port %d", p.Port)
		}
		if p.Global != nil {
			global[family(p.Global.IP)] = true
			if p.Global.Port < 1 || p.Global.Port > 65535 {
				t.Fatalf("accepted global port %d", p.Global.Port)
			}
			all = append(all, p.Global.IP)
		}
	}
	for _, g := range r.Endpoints {
		for _, b := range g.Backends {
			all = append(all, b.Address)
			if b.GlobalIP != "" {
				global[family(b.GlobalIP)] = true
				all = append(all, b.GlobalIP)
			}
		}
	}
	all = append(all, r.ClusterIPs...)
	if r.Type == mcsv1beta1.Headless {
		for _, g := range r.Endpoints {
			for _, b := range g.Backends {
				switch {
				case !global[family(b.Address)]:
					reached = append(reached, b.Address)
				case b.GlobalIP != "":
					reached = append(reached, b.GlobalIP)
				}
			}
		}
	} else {
		for _, p := range r.Ports {
			if p.Global != nil {
				reached = append(reached, p.Global.IP)
			}
		}
		for _, s := range r.ClusterIPs {
			if !global[family(s)] {
				reached = append(reached, s)
			}
		}
	}
	for _, s := range all {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() || cfg.Policy.VIPRange.Contains(a) || cfg.Policy.VIPRangeIPv6.Contains(a) {
			t.Fatalf("accepted address %q", s)
		}
	}
	if !claim.Tunnel {
		return
	}
	carried := map[bool]bool{}
	for _, p := range claim.Subnets {
		carried[p.Addr().Is4()] = true
	}
	for _, s := range reached {
		a := netip.MustParseAddr(s)
		if !carried[a.Is4()] {
			continue // a family the tunnel does not carry: importers drop it
		}
		if !Contains(claim.Subnets, a) {
			t.Fatalf("accepted %s outside the claim %v", a, claim.Subnets)
		}
		for _, p := range append(cfg.LocalCIDRs, cfg.NodeCIDRs...) {
			if p.Contains(a) {
				t.Fatalf("accepted %s inside local %s", a, p)
			}
		}
	}
}
