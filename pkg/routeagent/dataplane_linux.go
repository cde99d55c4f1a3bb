package routeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/pkg/nat"
	"github.com/causeway-net/causeway/pkg/nodenet"
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
	// binaries found on PATH. IP6Tables is the same for ip6tables (the
	// IPv6 remote subnets' chains); nil: ip6tables-save/-restore.
	IPTables  IPTables
	IP6Tables IPTables
	Logger    *slog.Logger
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
	cfg       LinuxConfig
	log       *slog.Logger
	ipt, ipt6 IPTables

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
	ipt, ipt6 := cfg.IPTables, cfg.IP6Tables
	if ipt == nil {
		ipt = ExecIPTables{Netns: cfg.Netns}
	}
	if ipt6 == nil {
		ipt6 = ExecIPTables{SaveBin: "ip6tables-save", RestoreBin: "ip6tables-restore", Netns: cfg.Netns}
	}
	h, err := netnsx.Handle(cfg.Netns)
	if err != nil {
		return nil, err
	}
	return &Linux{cfg: cfg, log: log, ipt: ipt, ipt6: ipt6, h: h}, nil
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

// ForgetFlows implements Dataplane (over netlink in cfg.Netns).
func (l *Linux) ForgetFlows(_ context.Context, prefixes []netip.Prefix) (uint, error) {
	return nat.DeleteConntrack(l.cfg.Netns, prefixes)
}

// Set implements Dataplane. Order keeps traffic flowing on failover: the
// new gateway's FDB and neighbour entries first, then routes, then the
// old entries are pruned. pkg/nodenet does the diffing against the kernel.
func (l *Linux) Set(ctx context.Context, d DesiredState) (Report, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return Report{}, errors.New("dataplane closed")
	}
	var rep Report
	var link netlink.Link
	var peers nodenet.Neighbours
	if o := d.Overlay; o != nil {
		var changes []string
		var err error
		link, changes, err = nodenet.EnsureVXLAN(l.h, nodenet.VXLAN{Name: o.Device, VNI: o.VNI, Port: o.Port,
			Local: o.LocalIP, MTU: o.MTU, MAC: o.MAC})
		if err := rep.add(changes, err); err != nil {
			return rep, err
		}
		if err := rep.add(nodenet.SyncAddrs(l.h, link, []netip.Prefix{netip.PrefixFrom(o.Address, 32)})); err != nil {
			return rep, err
		}
		if p := o.Peer; p != nil {
			peers.FDB = []nodenet.FDB{{MAC: p.MAC, Dst: p.NodeIP}}
			peers.Neigh = []nodenet.Neigh{{IP: p.Address, MAC: p.MAC}}
			if p.Address6.IsValid() {
				peers.Neigh = append(peers.Neigh, nodenet.Neigh{IP: p.Address6, MAC: p.MAC})
			}
		}
		if err := rep.add(nodenet.AddNeighbours(l.h, link, peers)); err != nil {
			return rep, err
		}
	}
	if err := l.syncRoutes(link, d.Routes, &rep); err != nil {
		return rep, err
	}
	if d.Overlay != nil {
		if err := rep.add(nodenet.PruneNeighbours(l.h, link, peers)); err != nil {
			return rep, err
		}
	} else if err := rep.add(nodenet.DeleteVXLAN(l.h, l.cfg.Device)); err != nil {
		return rep, err
	}
	if err := l.syncSysctls(d, &rep); err != nil {
		return rep, err
	}
	if err := l.syncIptables(ctx, d.Rules, &rep); err != nil {
		return rep, err
	}
	if err := l.syncIp6tables(ctx, d.Rules6, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// add records changes and passes err on.
func (r *Report) add(changes []string, err error) error {
	r.Changes = append(r.Changes, changes...)
	return err
}

// syncRoutes makes the routes with RouteProtocol in the table exactly
// want: via the overlay device, or unreachable, each at its metric.
func (l *Linux) syncRoutes(link netlink.Link, want []Route, rep *Report) error {
	var errs []error
	routes := make([]nodenet.Route, 0, len(want))
	for _, r := range want {
		nr := nodenet.Route{Dst: r.Dst, Metric: r.Metric}
		if r.Via.IsValid() {
			if link == nil {
				errs = append(errs, fmt.Errorf("route %s: no overlay device", r))
				continue
			}
			nr.Via, nr.Link = r.Via, link.Attrs().Index
		}
		routes = append(routes, nr)
	}
	owner := nodenet.Owner{Protocol: RouteProtocol, Table: l.cfg.Table}
	return errors.Join(append(errs, rep.add(nodenet.SyncRoutes(l.h, owner, routes)))...)
}

func (l *Linux) syncSysctls(d DesiredState, rep *Report) error {
	return netnsx.Do(l.cfg.Netns, func() error {
		want := make([]nodenet.Sysctl, 0, len(d.Sysctls))
		for _, s := range d.Sysctls {
			want = append(want, nodenet.Sysctl(s))
		}
		if err := rep.add(nodenet.SyncSysctls(want)); err != nil {
			return err
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
		all, err := nodenet.ReadSysctl("net/ipv4/conf/all/rp_filter")
		if err != nil {
			return err
		}
		path := "net/ipv4/conf/" + up.Attrs().Name + "/rp_filter"
		dev, err := nodenet.ReadSysctl(path)
		if err != nil {
			return err
		}
		if max(all, dev) != "1" { // "0" off or "2" loose already
			return nil
		}
		changes, err := nodenet.SyncSysctls([]nodenet.Sysctl{{Path: path, Value: "2"}})
		for _, c := range changes {
			rep.Changes = append(rep.Changes, c+" (was strict)")
		}
		return err
	})
}

func (l *Linux) syncIptables(ctx context.Context, want Rules, rep *Report) error {
	plan, err := syncTables(ctx, l.ipt, "iptables", want, rep)
	rep.OutsideFlush = plan.CanaryMissing
	return err
}

// syncIp6tables is syncIptables for the IPv6 remote subnets. Its canary
// is not watched (the chains exist only while IPv6 subnets are routed, so
// a missing canary says nothing): an outside flush of ip6tables is
// repaired by the next full sync. With no IPv6 subnets (want has no
// chains) a node whose ip6tables cannot run (no IPv6 in the kernel, no
// binary) is left alone: it cannot hold chains of ours either.
func (l *Linux) syncIp6tables(ctx context.Context, want Rules, rep *Report) error {
	_, err := syncTables(ctx, l.ipt6, "ip6tables", want, rep)
	if err != nil && len(want.Chains) == 0 {
		l.log.Debug("ip6tables not usable, no IPv6 rules wanted", "err", err)
		return nil
	}
	return err
}

func syncTables(ctx context.Context, ipt IPTables, name string, want Rules, rep *Report) (iptablesPlan, error) {
	saved, err := ipt.Save(ctx, ownedTables)
	if err != nil {
		return iptablesPlan{}, err
	}
	plan := planIptables(saved, want)
	if plan.Payload == "" {
		return plan, nil
	}
	if err := ipt.Restore(ctx, plan.Payload); err != nil {
		return plan, err
	}
	n := strings.Count(plan.Payload, "\n")
	rep.Changes = append(rep.Changes, name+": "+strconv.Itoa(n)+" lines restored")
	return plan, nil
}

// Cleanup implements Dataplane: deletes the overlay device (with its FDB,
// neighbours and the routes through it), every remaining route with
// RouteProtocol in the table (the unreachable ones, fallbacks included),
// and the owned chains with the jumps into them. ip_forward and a loosened uplink rp_filter are left as they are.
func (l *Linux) Cleanup(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h == nil {
		return errors.New("dataplane closed")
	}
	var rep Report
	var errs []error
	if err := rep.add(nodenet.DeleteVXLAN(l.h, l.cfg.Device)); err != nil {
		errs = append(errs, err)
	}
	if err := l.syncRoutes(nil, nil, &rep); err != nil {
		errs = append(errs, err)
	}
	if err := l.syncIptables(ctx, Rules{}, &rep); err != nil {
		errs = append(errs, err)
	}
	if err := l.syncIp6tables(ctx, Rules{}, &rep); err != nil {
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
