package mcs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrNoVIPRange is matched (errors.Is) when an import's only IP family
// has no clusterset VIP range configured (an IPv6-only Service with IPv6
// VIPs off).
var ErrNoVIPRange = errors.New("no clusterset VIP range for the IP family")

// FamilyVIPAllocator gives each multi-cluster Service one clusterset VIP
// per IP family of its ServiceImport: an IPv4 VIP from the IPv4 range, an
// IPv6 VIP from the IPv6 range, each with VIPAllocator's race-free scheme
// (one broker object per address, created atomically; allocators of one
// Service converge on the first address of its candidate order). Both
// families share one VIPStore; a Service's addresses of one family never
// affect the other's.
type FamilyVIPAllocator struct {
	byFamily map[corev1.IPFamily]*VIPAllocator
}

// NewFamilyVIPAllocator returns cluster clusterID's allocator of v4's
// addresses and, when v6 holds addresses (Size > 0), v6's. v4 must be an
// IPv4 range and v6 an IPv6 range; without v6, imports get no IPv6 VIP.
func NewFamilyVIPAllocator(v4, v6 VIPRange, store VIPStore, clusterID string) (*FamilyVIPAllocator, error) {
	if v4.Size() == 0 || v4.IsIPv6() {
		return nil, fmt.Errorf("clusterset VIP range %s is not an IPv4 range", v4.Prefix())
	}
	a := &FamilyVIPAllocator{byFamily: map[corev1.IPFamily]*VIPAllocator{corev1.IPv4Protocol: NewVIPAllocator(v4, store, clusterID)}}
	if v6.Size() > 0 {
		if !v6.IsIPv6() {
			return nil, fmt.Errorf("IPv6 clusterset VIP range %s is not an IPv6 range", v6.Prefix())
		}
		a.byFamily[corev1.IPv6Protocol] = NewVIPAllocator(v6, store, clusterID)
	}
	return a, nil
}

// VIPFamilies returns the IP families an import gets VIPs for, in order:
// its ipFamilies (the oldest export's, see Merge), each once; IPv4 when
// it names none (a record from before ipFamilies, or a Service without
// them).
func VIPFamilies(ipFamilies []corev1.IPFamily) []corev1.IPFamily {
	var out []corev1.IPFamily
	for _, f := range ipFamilies {
		if (f == corev1.IPv4Protocol || f == corev1.IPv6Protocol) && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return []corev1.IPFamily{corev1.IPv4Protocol}
	}
	return out
}

// Allocate returns svc's VIPs, one per family of VIPFamilies(ipFamilies)
// in that order (the order of the import's spec.ips), each by
// VIPAllocator.Allocate (exporters: the clusters exporting svc; last: the
// VIPs it was imported with), and releases this cluster's addresses of
// svc of the configured families it no longer has (a dual-stack Service
// become single-stack). A family without a configured range is left out
// (IPv6 VIPs turned off: a dual-stack import gets its IPv4 VIP alone);
// only when that leaves no family at all is it an error (ErrNoVIPRange).
// A family whose allocation fails (*VIPExhaustedError, ErrVIPPending) is
// left out too and its error returned with the addresses of the other
// families, so a dual-stack import keeps its IPv4 VIP when the IPv6 range
// is full.
func (a *FamilyVIPAllocator) Allocate(ctx context.Context, svc types.NamespacedName, ipFamilies []corev1.IPFamily, exporters VIPExporters, last []netip.Addr) ([]netip.Addr, error) {
	want := VIPFamilies(ipFamilies)
	if !slices.ContainsFunc(want, func(f corev1.IPFamily) bool { return a.byFamily[f] != nil }) {
		return nil, fmt.Errorf("allocate clusterset VIP for %s: %w %v", svc, ErrNoVIPRange, want)
	}
	var vips []netip.Addr
	var errs []error
	for _, f := range want {
		alloc, ok := a.byFamily[f]
		if !ok {
			continue
		}
		var prev netip.Addr
		if i := slices.IndexFunc(last, func(v netip.Addr) bool { return v.Is6() == (f == corev1.IPv6Protocol) }); i >= 0 {
			prev = last[i]
		}
		vip, err := alloc.Allocate(ctx, svc, exporters, prev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vips = append(vips, vip)
	}
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		if alloc, ok := a.byFamily[f]; ok && !slices.Contains(want, f) {
			if err := alloc.Release(ctx, svc); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return vips, errors.Join(errs...)
}

// Release frees this cluster's allocations of svc, of every configured
// family.
func (a *FamilyVIPAllocator) Release(ctx context.Context, svc types.NamespacedName) error {
	var errs []error
	for _, f := range []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol} {
		if alloc, ok := a.byFamily[f]; ok {
			errs = append(errs, alloc.Release(ctx, svc))
		}
	}
	return errors.Join(errs...)
}
