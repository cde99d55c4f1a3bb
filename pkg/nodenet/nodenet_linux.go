package nodenet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func (o Owner) table() int {
	if o.Table == 0 {
		return unix.RT_TABLE_MAIN
	}
	return o.Table
}

// ipv6DefaultMetric is the metric the kernel gives an IPv6 route added
// with none.
const ipv6DefaultMetric = 1024

// canonical is r with the metric as Route documents it: the kernel's
// default metric of an IPv6 route written as 0, so a desired route and
// the kernel's copy of it compare equal.
func canonical(r Route) Route {
	if r.Dst.Addr().Is6() && r.Metric == ipv6DefaultMetric {
		r.Metric = 0
	}
	return r
}

// routeKey is what tells two routes of one owner apart (the kernel's key
// within a table, less TOS, which nobody here sets).
type routeKey struct {
	dst    netip.Prefix
	metric int
}

func keyOf(r Route) routeKey { return routeKey{dst: r.Dst, metric: r.Metric} }

// kernel is r as o installs it.
func (o Owner) kernel(r Route) *netlink.Route {
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Table:    o.table(),
		Protocol: netlink.RouteProtocol(o.Protocol),
		Priority: r.Metric,
		Type:     unix.RTN_UNICAST,
		Scope:    netlink.SCOPE_UNIVERSE,
	}
	switch {
	case r.Link == 0:
		nr.Type = unix.RTN_UNREACHABLE
		return nr
	case r.Via.IsValid():
		nr.Gw = r.Via.AsSlice()
		nr.Flags = int(netlink.FLAG_ONLINK)
	default:
		nr.Scope = netlink.SCOPE_LINK
	}
	nr.LinkIndex = r.Link
	if r.Src.IsValid() {
		nr.Src = r.Src.AsSlice()
	}
	return nr
}

// desired reads an owned kernel route back as a canonical Route; ok is
// false for routes no Route describes (multipath, other types).
func desired(r netlink.Route) (Route, bool) {
	dst, ok := prefixOf(r.Dst)
	if !ok {
		return Route{}, false
	}
	out := canonical(Route{Dst: dst, Metric: r.Priority})
	switch {
	case r.Type == unix.RTN_UNREACHABLE:
		return out, true
	case r.Type != unix.RTN_UNICAST || r.LinkIndex == 0:
		return Route{}, false
	}
	out.Link = r.LinkIndex
	out.Via = addrOf(r.Gw)
	out.Src = addrOf(r.Src)
	return out, true
}

// owned lists the routes of o in both address families.
func owned(h *netlink.Handle, o Owner) ([]netlink.Route, error) {
	filter := &netlink.Route{Table: o.table(), Protocol: netlink.RouteProtocol(o.Protocol), LinkIndex: o.Link}
	mask := netlink.RT_FILTER_TABLE | netlink.RT_FILTER_PROTOCOL
	if o.Link != 0 {
		mask |= netlink.RT_FILTER_OIF
	}
	rs, err := h.RouteListFiltered(netlink.FAMILY_ALL, filter, mask)
	if err != nil {
		return nil, fmt.Errorf("list routes of protocol %d: %w", o.Protocol, err)
	}
	return rs, nil
}

// ListRoutes returns the routes of o as they are in the kernel.
func ListRoutes(h *netlink.Handle, o Owner) ([]Route, error) {
	have, err := owned(h, o)
	if err != nil {
		return nil, err
	}
	var out []Route
	for _, r := range have {
		if d, ok := desired(r); ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// SyncRoutes makes the routes of o exactly want. Missing or different
// routes are replaced first (in want's order), then the rest of o's are
// deleted, so a re-pointed destination always has a route. Errors of
// single routes do not stop the others; they are returned joined.
func SyncRoutes(h *netlink.Handle, o Owner, want []Route) ([]string, error) {
	have, err := owned(h, o)
	if err != nil {
		return nil, err
	}
	wantBy := map[routeKey]Route{}
	var order []routeKey
	for _, r := range want {
		r = canonical(r)
		k := keyOf(r)
		if _, dup := wantBy[k]; !dup {
			order = append(order, k)
		}
		wantBy[k] = r
	}
	good := map[routeKey]bool{}
	var stale []netlink.Route
	for _, r := range have {
		d, ok := desired(r)
		// IPv6 routes have no scope (the kernel reports universe).
		if ok && !good[keyOf(d)] && wantBy[keyOf(d)] == d && (d.Dst.Addr().Is6() || r.Scope == o.kernel(d).Scope) {
			good[keyOf(d)] = true
			continue
		}
		stale = append(stale, r)
	}
	var changes []string
	var errs []error
	replaced := map[routeKey]bool{}
	for _, k := range order {
		r := wantBy[k]
		if good[k] {
			continue
		}
		if r.Link == 0 && (r.Via.IsValid() || r.Src.IsValid()) {
			errs = append(errs, fmt.Errorf("route %s: next hop or source without a device", r))
			continue
		}
		if err := h.RouteReplace(o.kernel(r)); err != nil {
			errs = append(errs, fmt.Errorf("replace route %s: %w", r, err))
			continue
		}
		replaced[k] = true
		changes = append(changes, fmt.Sprintf("route %s set", r))
	}
	for _, r := range stale {
		// A route replaced above under the same key (destination,
		// table, metric) is already gone from the kernel.
		if d, ok := desired(r); ok && replaced[keyOf(d)] {
			continue
		}
		err := h.RouteDel(&r)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete route %s metric %d: %w", r.Dst, r.Priority, err))
			continue
		}
		changes = append(changes, fmt.Sprintf("route %s metric %d deleted", r.Dst, r.Priority))
	}
	return changes, errors.Join(errs...)
}

// EnsureVXLAN makes v.Name the VXLAN device v, up, and returns it. A
// device of that name with the same VNI, port and local address is
// adopted with its addresses, FDB, neighbours and routes (MTU and MAC
// are changed in place); any other link of that name is replaced.
func EnsureVXLAN(h *netlink.Handle, v VXLAN) (netlink.Link, []string, error) {
	var changes []string
	existing, err := h.LinkByName(v.Name)
	if err == nil {
		vx, ok := existing.(*netlink.Vxlan)
		if ok && vx.VxlanId == v.VNI && vx.Port == v.Port && !vx.Learning && net.IP(v.Local.AsSlice()).Equal(vx.SrcAddr) {
			if vx.MTU != v.MTU {
				if err := h.LinkSetMTU(vx, v.MTU); err != nil {
					return nil, changes, fmt.Errorf("set mtu of %s: %w", v.Name, err)
				}
				changes = append(changes, fmt.Sprintf("device %s mtu %d", v.Name, v.MTU))
			}
			if !bytes.Equal(vx.HardwareAddr, v.MAC) {
				if err := h.LinkSetHardwareAddr(vx, v.MAC); err != nil {
					return nil, changes, fmt.Errorf("set mac of %s: %w", v.Name, err)
				}
				changes = append(changes, fmt.Sprintf("device %s mac %s", v.Name, v.MAC))
			}
			if vx.Flags&net.FlagUp == 0 {
				if err := h.LinkSetUp(vx); err != nil {
					return nil, changes, fmt.Errorf("set %s up: %w", v.Name, err)
				}
				changes = append(changes, fmt.Sprintf("device %s up", v.Name))
			}
			return vx, changes, nil
		}
		if err := h.LinkDel(existing); err != nil {
			return nil, changes, fmt.Errorf("delete incompatible link %s: %w", v.Name, err)
		}
		changes = append(changes, fmt.Sprintf("device %s (%s) replaced", v.Name, existing.Type()))
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, changes, fmt.Errorf("look up %s: %w", v.Name, err)
	}
	vx := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: v.Name, MTU: v.MTU, HardwareAddr: v.MAC},
		VxlanId:   v.VNI,
		SrcAddr:   v.Local.AsSlice(),
		Port:      v.Port,
	}
	if err := h.LinkAdd(vx); err != nil {
		return nil, changes, fmt.Errorf("create vxlan device %s: %w", v.Name, err)
	}
	link, err := h.LinkByName(v.Name)
	if err != nil {
		return nil, changes, fmt.Errorf("look up %s: %w", v.Name, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		return nil, changes, fmt.Errorf("set %s up: %w", v.Name, err)
	}
	changes = append(changes, fmt.Sprintf("device %s created (vni %d port %d)", v.Name, v.VNI, v.Port))
	return link, changes, nil
}

// DeleteVXLAN deletes the VXLAN device name (with its FDB, neighbours and
// the routes through it). A missing device, or one of another kind (not
// ours), is left alone.
func DeleteVXLAN(h *netlink.Handle, name string) ([]string, error) {
	link, err := h.LinkByName(name)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", name, err)
	}
	if _, ok := link.(*netlink.Vxlan); !ok {
		return nil, nil
	}
	if err := h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return nil, fmt.Errorf("delete %s: %w", name, err)
	}
	return []string{fmt.Sprintf("device %s deleted", name)}, nil
}

// SyncAddrs makes the addresses of link exactly want. IPv6 link-local
// addresses, which the kernel manages, stay. IPv6 addresses are added
// without duplicate address detection (IFA_F_NODAD): the caller owns
// them, and a tentative address could be no route's source.
func SyncAddrs(h *netlink.Handle, link netlink.Link, want []netip.Prefix) ([]string, error) {
	name := link.Attrs().Name
	have, err := h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %s: %w", name, err)
	}
	var changes []string
	for _, a := range have {
		p, ok := prefixOf(a.IPNet)
		if ok && (slices.Contains(want, p) || p.Addr().Is6() && p.Addr().IsLinkLocalUnicast()) {
			continue
		}
		if err := h.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return changes, fmt.Errorf("delete address %s from %s: %w", a.IPNet, name, err)
		}
		changes = append(changes, fmt.Sprintf("address %s deleted from %s", a.IPNet, name))
	}
	if len(changes) > 0 {
		// Deleting a primary address deletes its secondaries (unless
		// promote_secondaries): look again.
		if have, err = h.AddrList(link, netlink.FAMILY_ALL); err != nil {
			return changes, fmt.Errorf("list addresses of %s: %w", name, err)
		}
	}
	present := map[netip.Prefix]bool{}
	for _, a := range have {
		if p, ok := prefixOf(a.IPNet); ok {
			present[p] = true
		}
	}
	for _, p := range want {
		if present[p] {
			continue
		}
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, a); err != nil {
			return changes, fmt.Errorf("add address %s to %s: %w", p, name, err)
		}
		present[p] = true
		changes = append(changes, fmt.Sprintf("address %s added to %s", p, name))
	}
	return changes, nil
}

func (f FDB) kernel(link int) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: link, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
		Flags: netlink.NTF_SELF, HardwareAddr: f.MAC, IP: f.Dst.AsSlice()}
}

func (n Neigh) kernel(link int) *netlink.Neigh {
	fam := netlink.FAMILY_V4
	if n.IP.Is6() {
		fam = netlink.FAMILY_V6
	}
	return &netlink.Neigh{LinkIndex: link, Family: fam, State: netlink.NUD_PERMANENT,
		HardwareAddr: n.MAC, IP: n.IP.AsSlice()}
}

// static lists the permanent entries of link of the families: FDB
// entries (AF_BRIDGE) only those with a remote address.
func static(h *netlink.Handle, link int, families ...int) ([]netlink.Neigh, error) {
	var out []netlink.Neigh
	for _, fam := range families {
		ns, err := h.NeighList(link, fam)
		if err != nil {
			return nil, fmt.Errorf("list neighbours (family %d): %w", fam, err)
		}
		for _, n := range ns {
			if n.IP != nil && n.State&netlink.NUD_PERMANENT != 0 {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func sameNeigh(a, b netlink.Neigh) bool {
	return bytes.Equal(a.HardwareAddr, b.HardwareAddr) && a.IP.Equal(b.IP)
}

// AddNeighbours makes sure every entry of want exists on link.
func AddNeighbours(h *netlink.Handle, link netlink.Link, want Neighbours) ([]string, error) {
	idx := link.Attrs().Index
	fdb, err := static(h, idx, unix.AF_BRIDGE)
	if err != nil {
		return nil, err
	}
	neighs, err := static(h, idx, netlink.FAMILY_V4, netlink.FAMILY_V6)
	if err != nil {
		return nil, err
	}
	var changes []string
	for _, f := range want.FDB {
		n := f.kernel(idx)
		if slices.ContainsFunc(fdb, func(have netlink.Neigh) bool { return sameNeigh(have, *n) }) {
			continue
		}
		if err := h.NeighSet(n); err != nil {
			return changes, fmt.Errorf("set fdb %s -> %s: %w", f.MAC, f.Dst, err)
		}
		changes = append(changes, fmt.Sprintf("fdb %s dst %s added", f.MAC, f.Dst))
	}
	for _, e := range want.Neigh {
		n := e.kernel(idx)
		if slices.ContainsFunc(neighs, func(have netlink.Neigh) bool { return sameNeigh(have, *n) }) {
			continue
		}
		if err := h.NeighSet(n); err != nil {
			return changes, fmt.Errorf("set neighbour %s: %w", e.IP, err)
		}
		changes = append(changes, fmt.Sprintf("neighbour %s lladdr %s added", e.IP, e.MAC))
	}
	return changes, nil
}

// PruneNeighbours deletes every permanent FDB entry with a remote
// address and every permanent neighbour entry of link that want lacks.
// It is separate from AddNeighbours so that callers can re-point routes
// in between (add new entries, sync routes, prune old entries: no packet
// is left without a next hop on a change of peer).
func PruneNeighbours(h *netlink.Handle, link netlink.Link, want Neighbours) ([]string, error) {
	idx := link.Attrs().Index
	have, err := static(h, idx, unix.AF_BRIDGE, netlink.FAMILY_V4, netlink.FAMILY_V6)
	if err != nil {
		return nil, err
	}
	var changes []string
	for _, n := range have {
		what := fmt.Sprintf("neighbour %s", n.IP)
		keep := slices.ContainsFunc(want.Neigh, func(e Neigh) bool { return sameNeigh(n, *e.kernel(idx)) })
		if n.Family == unix.AF_BRIDGE {
			what = fmt.Sprintf("fdb %s dst %s", n.HardwareAddr, n.IP)
			keep = slices.ContainsFunc(want.FDB, func(f FDB) bool { return sameNeigh(n, *f.kernel(idx)) })
			n.Flags = netlink.NTF_SELF
		}
		if keep {
			continue
		}
		if err := h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return changes, fmt.Errorf("delete %s: %w", what, err)
		}
		changes = append(changes, what+" deleted")
	}
	return changes, nil
}

// ReadSysctl returns the value of path below /proc/sys. The network
// sysctls are those of the calling thread's namespace (see netnsx.Do).
func ReadSysctl(path string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// SyncSysctls sets each sysctl of want that has another value, in the
// calling thread's namespace, and reports those it wrote.
func SyncSysctls(want []Sysctl) ([]string, error) {
	var changes []string
	for _, s := range want {
		cur, err := ReadSysctl(s.Path)
		if err != nil {
			return changes, err
		}
		if cur == s.Value {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+s.Path, []byte(s.Value), 0o644); err != nil {
			return changes, fmt.Errorf("write sysctl %s=%s: %w", s.Path, s.Value, err)
		}
		changes = append(changes, fmt.Sprintf("sysctl %s=%s", s.Path, s.Value))
	}
	return changes, nil
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 128 && a.Is4() {
		ones -= 96
	}
	return netip.PrefixFrom(a, ones), true
}

func addrOf(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}
