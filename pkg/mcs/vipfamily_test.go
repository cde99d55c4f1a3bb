package mcs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestDefaultVIPRangeIPv6(t *testing.T) {
	r, err := ParseVIPRange(DefaultVIPRangeIPv6)
	if err != nil {
		t.Fatal(err)
	}
	if !r.IsIPv6() || r.Size() != 1<<20-2 {
		t.Errorf("IPv6 default: IPv6 %v, size %d, want an IPv6 range of 2^20-2", r.IsIPv6(), r.Size())
	}
	if !netip.MustParsePrefix("fd00::/8").Contains(r.Prefix().Addr()) {
		t.Errorf("IPv6 default %s is not a locally assigned unique local address range (fd00::/8)", r.Prefix())
	}
	if v4 := MustParseVIPRange(DefaultVIPRange); v4.IsIPv6() {
		t.Error("the IPv4 default is IPv6")
	}
}

var (
	v4Only   []corev1.IPFamily
	dual46   = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	dual64   = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	ipv6Only = []corev1.IPFamily{corev1.IPv6Protocol}
)

// familiesOf returns the IP family of each address.
func familiesOf(vips []netip.Addr) []corev1.IPFamily {
	out := []corev1.IPFamily{}
	for _, v := range vips {
		if v.Is6() {
			out = append(out, corev1.IPv6Protocol)
		} else {
			out = append(out, corev1.IPv4Protocol)
		}
	}
	return out
}

func TestVIPFamilies(t *testing.T) {
	for _, tc := range []struct {
		in, want []corev1.IPFamily
	}{
		{nil, []corev1.IPFamily{corev1.IPv4Protocol}},
		{dual46, dual46},
		{dual64, dual64},
		{ipv6Only, ipv6Only},
		{[]corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv6Protocol, "IPv5"}, ipv6Only},
		{[]corev1.IPFamily{"IPv5"}, []corev1.IPFamily{corev1.IPv4Protocol}},
	} {
		if got := VIPFamilies(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("VIPFamilies(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestFamilyVIPAllocator: one VIP per family of the import, in its
// order, from the family's range; a transition between stacks releases
// exactly the family that went; without an IPv6 range a dual-stack import
// gets its IPv4 VIP alone and an IPv6-only one an error; an exhausted
// IPv6 range leaves the IPv6 VIP out with its error and keeps the IPv4
// one.
func TestFamilyVIPAllocator(t *testing.T) {
	ctx := context.Background()
	v4 := MustParseVIPRange("243.0.0.0/24")
	v6 := MustParseVIPRange("fd63:6175:7365::/120")
	tiny6 := MustParseVIPRange("fd63:6175:7365::/126") // 2 usable addresses
	type step struct {
		svc      string
		families []corev1.IPFamily
		want     []corev1.IPFamily // families of the VIPs returned
		err      error             // errors.Is target, nil: no error
	}
	for _, tc := range []struct {
		name  string
		v6    VIPRange
		steps []step
	}{
		{name: "single-stack IPv4", v6: v6, steps: []step{{svc: "web", families: v4Only, want: []corev1.IPFamily{corev1.IPv4Protocol}}}},
		{name: "dual-stack, IPv4 first", v6: v6, steps: []step{{svc: "web", families: dual46, want: dual46}}},
		{name: "dual-stack, IPv6 first", v6: v6, steps: []step{{svc: "web", families: dual64, want: dual64}}},
		{name: "single-stack IPv6", v6: v6, steps: []step{{svc: "web", families: ipv6Only, want: ipv6Only}}},
		{name: "dual to IPv4 to dual to IPv6", v6: v6, steps: []step{
			{svc: "web", families: dual46, want: dual46},
			{svc: "web", families: v4Only, want: []corev1.IPFamily{corev1.IPv4Protocol}},
			{svc: "web", families: dual46, want: dual46},
			{svc: "web", families: ipv6Only, want: ipv6Only},
		}},
		{name: "no IPv6 range", steps: []step{
			{svc: "web", families: dual46, want: []corev1.IPFamily{corev1.IPv4Protocol}},
			{svc: "db", families: ipv6Only, want: []corev1.IPFamily{}, err: ErrNoVIPRange},
		}},
		{name: "IPv6 range exhausted", v6: tiny6, steps: []step{
			{svc: "a", families: dual46, want: dual46},
			{svc: "b", families: dual46, want: dual46},
			{svc: "c", families: dual46, want: []corev1.IPFamily{corev1.IPv4Protocol}, err: ErrVIPRangeExhausted},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemVIPs()
			store := m.store("c1")
			a, err := NewFamilyVIPAllocator(v4, tc.v6, store, "c1")
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				got, err := a.Allocate(ctx, nn(s.svc), s.families, exporting("c1"), nil)
				if s.err == nil && err != nil || s.err != nil && !errors.Is(err, s.err) {
					t.Fatalf("step %d: Allocate(%s, %v): %v, want error %v", i, s.svc, s.families, err, s.err)
				}
				if f := familiesOf(got); !slices.Equal(f, s.want) {
					t.Fatalf("step %d: Allocate(%s, %v) = %v, want families %v", i, s.svc, s.families, got, s.want)
				}
				for _, v := range got {
					if r := map[bool]VIPRange{false: v4, true: tc.v6}[v.Is6()]; !r.Contains(v) {
						t.Errorf("step %d: %s outside its family's range %s", i, v, r.Prefix())
					}
				}
				// The store holds exactly what was returned, and asking
				// again gives the same addresses without a new claim.
				holds, _ := store.AllocatedTo(ctx, nn(s.svc))
				var held []netip.Addr
				for _, h := range holds {
					held = append(held, h.Addr)
				}
				if !slices.Equal(held, slices.SortedFunc(slices.Values(got), netip.Addr.Compare)) {
					t.Errorf("step %d: store holds %v for %s, Allocate returned %v", i, held, s.svc, got)
				}
				claims := m.Claims()
				again, _ := a.Allocate(ctx, nn(s.svc), s.families, exporting("c1"), got)
				if !slices.Equal(again, got) || m.Claims() != claims {
					t.Errorf("step %d: again %v (%d new claims), want %v and none", i, again, m.Claims()-claims, got)
				}
			}
			for _, s := range tc.steps {
				if err := a.Release(ctx, nn(s.svc)); err != nil {
					t.Fatal(err)
				}
			}
			if m.Len() != 0 {
				t.Errorf("%d allocations left after Release", m.Len())
			}
		})
	}
}

func TestNewFamilyVIPAllocatorRefusesSwappedRanges(t *testing.T) {
	v4, v6 := MustParseVIPRange("243.0.0.0/24"), MustParseVIPRange("fd63:6175:7365::/120")
	if _, err := NewFamilyVIPAllocator(v6, v6, newMemVIPs().store("c1"), "c1"); err == nil {
		t.Error("an IPv6 range as the IPv4 one was accepted")
	}
	if _, err := NewFamilyVIPAllocator(v4, v4, newMemVIPs().store("c1"), "c1"); err == nil {
		t.Error("an IPv4 range as the IPv6 one was accepted")
	}
}

// TestFamilyVIPAllocatorConcurrent: allocators of six clusters allocating
// dual-stack VIPs for the same Services at once, in different orders,
// through one store, agree on every Service's two addresses, and no
// address is given twice.
func TestFamilyVIPAllocatorConcurrent(t *testing.T) {
	ctx := context.Background()
	v4, v6 := MustParseVIPRange("243.0.0.0/23"), MustParseVIPRange("fd63:6175:7365::/119")
	m := newMemVIPs()
	const services = 80
	allocateConcurrently(t, 6, services, func(id string, all VIPExporters) (func(s int) ([]netip.Addr, error), error) {
		a, err := NewFamilyVIPAllocator(v4, v6, m.store(id), id)
		return func(s int) ([]netip.Addr, error) {
			fams := dual46
			if s%3 == 0 {
				fams = dual64
			}
			return a.Allocate(ctx, nn(fmt.Sprintf("svc-%d", s)), fams, all, nil)
		}, err
	})
	if m.Len() != 2*services {
		t.Errorf("%d allocations, want %d", m.Len(), 2*services)
	}
}
