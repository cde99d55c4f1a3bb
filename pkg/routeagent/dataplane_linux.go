package routeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// LinuxConfig configures the Linux dataplane.
type LinuxConfig struct {
	// Netns is the path of the network namespace to program (e.g.
	// /run/netns/x); empty means the caller's namespace (hostNetwork).
	Netns string
	// Device is the overlay device name (Cleanup removes it even when the
	// desired state has no overlay).
	Device string
	// Table is the route table of the owned routes (0 = main).
	Table int
	// IPTables runs iptables-save/-restore; nil uses ExecIPTables with the
	// binaries found on PATH.
	IPTables IPTables
	Logger   *slog.Logger
}

// IPTables reads and writes the owned tables.
type IPTables interface {
	// Save returns `iptables-save` output for the given tables.
	Save(ctx context.Context, tables []string) (string, error)
	// Restore applies payload with `iptables-restore --noflush`.
	Restore(ctx context.Context, payload string) error
}

// ExecIPTables runs the iptables binaries (in Netns when set).
type ExecIPTables struct {
	// SaveBin and RestoreBin default to iptables-save and iptables-restore.
	SaveBin, RestoreBin string
	Netns               string
}

// Save implements IPTables.
func (e ExecIPTables) Save(ctx context.Context, tables []string) (string, error) {
	bin := cmp(e.SaveBin, "iptables-save")
	var out bytes.Buffer
	for _, t := range tables {
		var stdout, stderr bytes.Buffer
		err := netnsx.Do(e.Netns, func() error {
			cmd := exec.CommandContext(ctx, bin, "-t", t)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			return cmd.Run()
		})
		if err != nil {
			return "", fmt.Errorf("%s -t %s: %w: %s", bin, t, err, strings.TrimSpace(stderr.String()))
		}
		out.Write(stdout.Bytes())
	}
	return out.String(), nil
}

// Restore implements IPTables.
func (e ExecIPTables) Restore(ctx context.Context, payload string) error {
	bin := cmp(e.RestoreBin, "iptables-restore")
	var stderr bytes.Buffer
	err := netnsx.Do(e.Netns, func() error {
		cmd := exec.CommandContext(ctx, bin, "-w", "5", "--noflush")
		cmd.Stdin = strings.NewReader(payload)
		cmd.Stderr = &stderr
		return cmd.Run()
	})
	if err != nil {
		return fmt.Errorf("%s --noflush: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Linux is the netlink + iptables Dataplane.
type Linux struct {
	cfg LinuxConfig
	log *slog.Logger
	ipt IPTables

	mu sync.Mutex
	h  *netlink.Handle
}

var _ Dataplane = (*Linux)(nil)

// NewLinux opens netlink in cfg.Netns.
func NewLinux(cfg LinuxConfig) (*Linux, error) {
	if cfg.Device == "" {
		cfg.Device = DefaultDevice
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ipt := cfg.IPTables
	if ipt == nil {
		ipt = ExecIPTables{Netns: cfg.Netns}
	}
	h, err := netnsx.Handle(cfg.Netns)
	if err != nil {
		return nil, err
	}
	return &Linux{cfg: cfg, log: log, ipt: ipt, h: h}, nil
}

// Close releases the netlink handle; the node state stays.
func (l *Linux) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h != nil {
		l.h.Close()
		l.h = nil
	}
}

func (l *Linux) table() int {
	if l.cfg.Table == 0 {
		return unix.RT_TABLE_MAIN
	}
	return l.cfg.Table
}

// Set implements Dataplane. Order keeps traffic flowing on failover: the
// new gateway's FDB and neighbour entries first, then routes, then the
// old entries are pruned.
func (l *Linux) Set(ctx context.Context, d DesiredState) (Report, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return Report{}, errors.New("dataplane closed")
	}
	var rep Report
	var link netlink.Link
	if d.Overlay != nil {
		var err error
		if link, err = l.ensureDevice(d.Overlay, &rep); err != nil {
			return rep, err
		}
		if err := l.syncAddress(link, d.Overlay.Address, &rep); err != nil {
			return rep, err
		}
		if err := l.addPeer(link, d.Overlay.Peer, &rep); err != nil {
			return rep, err
		}
	}
	if err := l.syncRoutes(link, d.Routes, &rep); err != nil {
		return rep, err
	}
	if d.Overlay != nil {
		if err := l.prunePeers(link, d.Overlay.Peer, &rep); err != nil {
			return rep, err
		}
	} else if err := l.deleteDevice(&rep); err != nil {
		return rep, err
	}
	if err := l.syncSysctls(d, &rep); err != nil {
		return rep, err
	}
	if err := l.syncIptables(ctx, d.Rules, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

func (l *Linux) ensureDevice(o *Overlay, rep *Report) (netlink.Link, error) {
	existing, err := l.h.LinkByName(o.Device)
	if err == nil {
		vx, ok := existing.(*netlink.Vxlan)
		if ok && vx.VxlanId == o.VNI && vx.Port == o.Port && !vx.Learning &&
			net.IP(o.LocalIP.AsSlice()).Equal(vx.SrcAddr) {
			if vx.MTU != o.MTU {
				if err := l.h.LinkSetMTU(vx, o.MTU); err != nil {
					return nil, fmt.Errorf("set mtu of %s: %w", o.Device, err)
				}
				rep.Changes = append(rep.Changes, fmt.Sprintf("device %s mtu %d", o.Device, o.MTU))
			}
			if !bytes.Equal(vx.HardwareAddr, o.MAC) {
				if err := l.h.LinkSetHardwareAddr(vx, o.MAC); err != nil {
					return nil, fmt.Errorf("set mac of %s: %w", o.Device, err)
				}
				rep.Changes = append(rep.Changes, fmt.Sprintf("device %s mac %s", o.Device, o.MAC))
			}
			if vx.OperState != netlink.OperUp && vx.Flags&net.FlagUp == 0 {
				if err := l.h.LinkSetUp(vx); err != nil {
					return nil, fmt.Errorf("set %s up: %w", o.Device, err)
				}
				rep.Changes = append(rep.Changes, fmt.Sprintf("device %s up", o.Device))
			}
			return vx, nil
		}
		if err := l.h.LinkDel(existing); err != nil {
			return nil, fmt.Errorf("delete incompatible link %s: %w", o.Device, err)
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("device %s (%s) replaced", o.Device, existing.Type()))
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil, fmt.Errorf("look up %s: %w", o.Device, err)
	}
	vx := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: o.Device, MTU: o.MTU, HardwareAddr: o.MAC},
		VxlanId:   o.VNI,
		SrcAddr:   net.IP(o.LocalIP.AsSlice()),
		Port:      o.Port,
		Learning:  false,
	}
	if err := l.h.LinkAdd(vx); err != nil {
		return nil, fmt.Errorf("create vxlan device %s: %w", o.Device, err)
	}
	link, err := l.h.LinkByName(o.Device)
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", o.Device, err)
	}
	if err := l.h.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("set %s up: %w", o.Device, err)
	}
	rep.Changes = append(rep.Changes, fmt.Sprintf("device %s created (vni %d port %d)", o.Device, o.VNI, o.Port))
	return link, nil
}

func (l *Linux) syncAddress(link netlink.Link, want netip.Addr, rep *Report) error {
	addrs, err := l.h.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", link.Attrs().Name, err)
	}
	found := false
	for _, a := range addrs {
		ones, _ := a.Mask.Size()
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == want && ones == 32 {
			found = true
			continue
		}
		if a.IP.IsLinkLocalUnicast() {
			continue
		}
		if err := l.h.AddrDel(link, &a); err != nil {
			return fmt.Errorf("delete address %s: %w", a.IPNet, err)
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("address %s deleted", a.IPNet))
	}
	if found {
		return nil
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(want.AsSlice()), Mask: net.CIDRMask(32, 32)}}
	if err := l.h.AddrAdd(link, a); err != nil {
		return fmt.Errorf("add address %s to %s: %w", want, link.Attrs().Name, err)
	}
	rep.Changes = append(rep.Changes, fmt.Sprintf("address %s/32 added", want))
	return nil
}

// addPeer makes sure the FDB and neighbour entries of the peer exist.
func (l *Linux) addPeer(link netlink.Link, p *Peer, rep *Report) error {
	if p == nil {
		return nil
	}
	idx := link.Attrs().Index
	fdb, err := l.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb: %w", err)
	}
	if !slices.ContainsFunc(fdb, func(n netlink.Neigh) bool {
		return bytes.Equal(n.HardwareAddr, p.MAC) && n.IP.Equal(net.IP(p.NodeIP.AsSlice())) && n.State&netlink.NUD_PERMANENT != 0
	}) {
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, HardwareAddr: p.MAC, IP: net.IP(p.NodeIP.AsSlice())}
		if err := l.h.NeighSet(n); err != nil {
			return fmt.Errorf("set fdb %s -> %s: %w", p.MAC, p.NodeIP, err)
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("fdb %s dst %s added", p.MAC, p.NodeIP))
	}
	neighs, err := l.h.NeighList(idx, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("list neighbours: %w", err)
	}
	if !slices.ContainsFunc(neighs, func(n netlink.Neigh) bool {
		return bytes.Equal(n.HardwareAddr, p.MAC) && n.IP.Equal(net.IP(p.Address.AsSlice())) && n.State&netlink.NUD_PERMANENT != 0
	}) {
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			HardwareAddr: p.MAC, IP: net.IP(p.Address.AsSlice())}
		if err := l.h.NeighSet(n); err != nil {
			return fmt.Errorf("set neighbour %s: %w", p.Address, err)
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("neighbour %s lladdr %s added", p.Address, p.MAC))
	}
	return nil
}

// prunePeers deletes every FDB and permanent neighbour entry on the overlay
// device other than the peer's (all of them on the gateway node).
func (l *Linux) prunePeers(link netlink.Link, p *Peer, rep *Report) error {
	idx := link.Attrs().Index
	fdb, err := l.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb: %w", err)
	}
	for _, n := range fdb {
		if n.IP == nil || n.State&netlink.NUD_PERMANENT == 0 {
			continue
		}
		if p != nil && bytes.Equal(n.HardwareAddr, p.MAC) && n.IP.Equal(net.IP(p.NodeIP.AsSlice())) {
			continue
		}
		n.Flags = netlink.NTF_SELF
		if err := l.h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete fdb %s -> %s: %w", n.HardwareAddr, n.IP, err)
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("fdb %s dst %s deleted", n.HardwareAddr, n.IP))
	}
	neighs, err := l.h.NeighList(idx, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("list neighbours: %w", err)
	}
	for _, n := range neighs {
		if n.State&netlink.NUD_PERMANENT == 0 {
			continue
		}
		if p != nil && bytes.Equal(n.HardwareAddr, p.MAC) && n.IP.Equal(net.IP(p.Address.AsSlice())) {
			continue
		}
		if err := l.h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete neighbour %s: %w", n.IP, err)
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("neighbour %s deleted", n.IP))
	}
	return nil
}

// ownedRoutes lists the routes with RouteProtocol in the table.
func (l *Linux) ownedRoutes() ([]netlink.Route, error) {
	filter := &netlink.Route{Table: l.table(), Protocol: RouteProtocol}
	rs, err := l.h.RouteListFiltered(netlink.FAMILY_V4, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	return rs, nil
}

func routeKey(r netlink.Route) (Route, bool) {
	if r.Dst == nil {
		return Route{}, false
	}
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return Route{}, false
	}
	ones, _ := r.Dst.Mask.Size()
	out := Route{Dst: netip.PrefixFrom(a.Unmap(), ones)}
	if r.Gw != nil {
		out.Via, _ = netip.AddrFromSlice(r.Gw)
		out.Via = out.Via.Unmap()
	}
	return out, true
}

func (l *Linux) syncRoutes(link netlink.Link, want []Route, rep *Report) error {
	have, err := l.ownedRoutes()
	if err != nil {
		return err
	}
	wantSet := map[Route]bool{}
	for _, r := range want {
		wantSet[r] = true
	}
	var stale []netlink.Route
	for _, r := range have {
		k, ok := routeKey(r)
		good := ok && wantSet[k] && r.Priority == RouteMetric &&
			(k.Via.IsValid() == (r.Type == unix.RTN_UNICAST)) &&
			(!k.Via.IsValid() || (link != nil && r.LinkIndex == link.Attrs().Index))
		if good {
			delete(wantSet, k)
			continue
		}
		stale = append(stale, r)
	}
	var errs []error
	replaced := map[netip.Prefix]bool{}
	for _, r := range want {
		if !wantSet[r] {
			continue
		}
		replaced[r.Dst] = true
		nr := netlink.Route{
			Dst:      &net.IPNet{IP: net.IP(r.Dst.Addr().AsSlice()), Mask: net.CIDRMask(r.Dst.Bits(), 32)},
			Table:    l.table(),
			Protocol: RouteProtocol,
			Priority: RouteMetric,
		}
		if r.Via.IsValid() {
			if link == nil {
				errs = append(errs, fmt.Errorf("route %s: no overlay device", r))
				continue
			}
			nr.LinkIndex = link.Attrs().Index
			nr.Gw = net.IP(r.Via.AsSlice())
			nr.Flags = int(netlink.FLAG_ONLINK)
		} else {
			nr.Type = unix.RTN_UNREACHABLE
		}
		if err := l.h.RouteReplace(&nr); err != nil {
			errs = append(errs, fmt.Errorf("replace route %s: %w", r, err))
			continue
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("route %s set", r))
	}
	// Stale routes go last. One replaced above under the same key
	// (destination, table, metric) is already gone from the kernel.
	for _, r := range stale {
		if k, ok := routeKey(r); ok && replaced[k.Dst] && r.Priority == RouteMetric {
			continue
		}
		err := l.h.RouteDel(&r)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
			continue
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("route %s deleted", r.Dst))
	}
	return errors.Join(errs...)
}

func (l *Linux) deleteDevice(rep *Report) error {
	link, err := l.h.LinkByName(l.cfg.Device)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up %s: %w", l.cfg.Device, err)
	}
	if _, ok := link.(*netlink.Vxlan); !ok {
		return nil // not ours
	}
	if err := l.h.LinkDel(link); err != nil {
		return fmt.Errorf("delete %s: %w", l.cfg.Device, err)
	}
	rep.Changes = append(rep.Changes, fmt.Sprintf("device %s deleted", l.cfg.Device))
	return nil
}

func (l *Linux) syncSysctls(d DesiredState, rep *Report) error {
	return netnsx.Do(l.cfg.Netns, func() error {
		for _, s := range d.Sysctls {
			changed, err := writeSysctl(s.Path, s.Value)
			if err != nil {
				return err
			}
			if changed {
				rep.Changes = append(rep.Changes, fmt.Sprintf("sysctl %s=%s", s.Path, s.Value))
			}
		}
		if !d.LooseUplinkRPFilter || d.Overlay == nil || d.Overlay.Peer == nil {
			return nil
		}
		// The interface the overlay's outer packets leave by is where
		// replies from remote clusters come back in.
		rs, err := l.h.RouteGet(net.IP(d.Overlay.Peer.NodeIP.AsSlice()))
		if err != nil || len(rs) == 0 {
			return fmt.Errorf("route to gateway %s: %w", d.Overlay.Peer.NodeIP, err)
		}
		up, err := l.h.LinkByIndex(rs[0].LinkIndex)
		if err != nil {
			return fmt.Errorf("uplink of gateway %s: %w", d.Overlay.Peer.NodeIP, err)
		}
		all, err := readSysctl("net/ipv4/conf/all/rp_filter")
		if err != nil {
			return err
		}
		dev, err := readSysctl("net/ipv4/conf/" + up.Attrs().Name + "/rp_filter")
		if err != nil {
			return err
		}
		if max(all, dev) != "1" { // "0" off or "2" loose already
			return nil
		}
		if _, err := writeSysctl("net/ipv4/conf/"+up.Attrs().Name+"/rp_filter", "2"); err != nil {
			return err
		}
		rep.Changes = append(rep.Changes, fmt.Sprintf("sysctl net/ipv4/conf/%s/rp_filter=2 (was strict)", up.Attrs().Name))
		return nil
	})
}

func readSysctl(path string) (string, error) {
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func writeSysctl(path, value string) (bool, error) {
	cur, err := readSysctl(path)
	if err != nil {
		return false, err
	}
	if cur == value {
		return false, nil
	}
	if err := os.WriteFile("/proc/sys/"+path, []byte(value), 0o644); err != nil {
		return false, fmt.Errorf("write sysctl %s=%s: %w", path, value, err)
	}
	return true, nil
}

func (l *Linux) syncIptables(ctx context.Context, want Rules, rep *Report) error {
	saved, err := l.ipt.Save(ctx, ownedTables)
	if err != nil {
		return err
	}
	plan := planIptables(saved, want)
	rep.OutsideFlush = plan.CanaryMissing
	if plan.Payload == "" {
		return nil
	}
	if err := l.ipt.Restore(ctx, plan.Payload); err != nil {
		return err
	}
	n := strings.Count(plan.Payload, "\n")
	rep.Changes = append(rep.Changes, "iptables: "+strconv.Itoa(n)+" lines restored")
	return nil
}

// Cleanup implements Dataplane: deletes the overlay device (with its FDB,
// neighbours and the routes through it), every remaining route with
// RouteProtocol in the table, and the owned chains with the jumps into
// them. ip_forward and a loosened uplink rp_filter are left as they are.
func (l *Linux) Cleanup(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return errors.New("dataplane closed")
	}
	var rep Report
	var errs []error
	if err := l.deleteDevice(&rep); err != nil {
		errs = append(errs, err)
	}
	if err := l.syncRoutes(nil, nil, &rep); err != nil {
		errs = append(errs, err)
	}
	if err := l.syncIptables(ctx, Rules{}, &rep); err != nil {
		errs = append(errs, err)
	}
	l.log.Info("cleanup", "changes", rep.Changes)
	return errors.Join(errs...)
}

// NodeLinkMTU returns the MTU of the interface holding ip in the current
// namespace (the node network the overlay runs over).
func NodeLinkMTU(ip netip.Addr) (int, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return 0, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip {
			l, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				return 0, fmt.Errorf("link of %s: %w", ip, err)
			}
			return l.Attrs().MTU, nil
		}
	}
	return 0, fmt.Errorf("no interface has address %s", ip)
}
