// Package routes converges the routes a cable driver owns on its tunnel
// device. Owned routes are identified by device, table and the
// rtnetlink protocol Proto, so foreign routes are never touched.
package routes

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Proto is the rtnetlink protocol number on every route a cable driver
// installs ("proto 157" in `ip route`).
const Proto = 157

// Route is one desired route on the tunnel device.
type Route struct {
	Dst netip.Prefix
	// Via is an on-link next hop; invalid means a device route.
	Via netip.Addr
}

// Sync makes the routes of link in table (0 = main) with protocol Proto
// equal to want. It replaces routes that differ and deletes the rest.
func Sync(h *netlink.Handle, link netlink.Link, table int, want []Route) error {
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	have, err := list(h, link, table)
	if err != nil {
		return err
	}
	wantBy := map[netip.Prefix]Route{}
	for _, r := range want {
		wantBy[r.Dst] = r
	}
	var errs []error
	for _, r := range have {
		dst, via, ok := convert(r)
		if w, keep := wantBy[dst]; ok && keep && w.Via == via {
			delete(wantBy, dst)
			continue
		}
		if err := h.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
		}
	}
	for _, w := range wantBy {
		r := netlink.Route{
			LinkIndex: link.Attrs().Index,
			Dst:       prefixToIPNet(w.Dst),
			Table:     table,
			Protocol:  Proto,
			Scope:     netlink.SCOPE_LINK,
		}
		if w.Via.IsValid() {
			r.Gw = net.IP(w.Via.AsSlice())
			r.Flags = int(netlink.FLAG_ONLINK)
			r.Scope = netlink.SCOPE_UNIVERSE
		}
		if err := h.RouteReplace(&r); err != nil {
			errs = append(errs, fmt.Errorf("replace route %s: %w", w.Dst, err))
		}
	}
	return errors.Join(errs...)
}

// List returns the destinations of the owned routes of link.
func List(h *netlink.Handle, link netlink.Link, table int) ([]Route, error) {
	if table == 0 {
		table = unix.RT_TABLE_MAIN
	}
	have, err := list(h, link, table)
	if err != nil {
		return nil, err
	}
	var out []Route
	for _, r := range have {
		if dst, via, ok := convert(r); ok {
			out = append(out, Route{Dst: dst, Via: via})
		}
	}
	return out, nil
}

func list(h *netlink.Handle, link netlink.Link, table int) ([]netlink.Route, error) {
	filter := &netlink.Route{LinkIndex: link.Attrs().Index, Table: table, Protocol: Proto}
	mask := netlink.RT_FILTER_OIF | netlink.RT_FILTER_TABLE | netlink.RT_FILTER_PROTOCOL
	var out []netlink.Route
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := h.RouteListFiltered(fam, filter, mask)
		if err != nil {
			return nil, fmt.Errorf("list routes of %s: %w", link.Attrs().Name, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

func convert(r netlink.Route) (dst netip.Prefix, via netip.Addr, ok bool) {
	if r.Dst == nil {
		return dst, via, false
	}
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return dst, via, false
	}
	ones, _ := r.Dst.Mask.Size()
	dst = netip.PrefixFrom(a.Unmap(), ones)
	if r.Gw != nil {
		via, _ = netip.AddrFromSlice(r.Gw)
		via = via.Unmap()
	}
	return dst, via, true
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
