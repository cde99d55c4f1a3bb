package vxlan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/nodenet"
)

const (
	// Name is the registry name of this driver.
	Name = "vxlan"
	// VNI is the VXLAN network identifier of every cable device.
	VNI = 4242
	// DefaultPort is used when the LocalEndpoint has no port.
	DefaultPort = 4789
	// DefaultMTU leaves room for the 50-byte VXLAN/UDP/IPv4 header on a
	// 1500-byte WAN.
	DefaultMTU = 1450
)

// Driver is the VXLAN cable driver.
type Driver struct {
	local cable.LocalEndpoint
	log   *slog.Logger

	mu    sync.Mutex
	h     *netlink.Handle
	link  netlink.Link
	conns []cable.Connection
}

var _ cable.Driver = (*Driver)(nil)

// New creates or adopts the VXLAN device local.Interface in local.Netns.
// An existing device with the same VNI, port and local address is adopted
// as is (with its FDB, neighbours and routes), so a restarted gateway does
// not interrupt traffic; any other link of that name is replaced.
func New(ctx context.Context, local cable.LocalEndpoint) (cable.Driver, error) {
	return newDriver(local)
}

func newDriver(local cable.LocalEndpoint) (*Driver, error) {
	if local.Interface == "" {
		return nil, errors.New("vxlan: interface name required")
	}
	if !local.Address.Is4() {
		return nil, fmt.Errorf("vxlan: local address %s: IPv4 required", local.Address)
	}
	if local.Port == 0 {
		local.Port = DefaultPort
	}
	if local.MTU == 0 {
		local.MTU = DefaultMTU
	}
	log := local.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "cable", "driver", Name, "interface", local.Interface)
	h, err := netnsx.Handle(local.Netns)
	if err != nil {
		return nil, err
	}
	d := &Driver{local: local, log: log, h: h}
	if err := d.ensureLink(); err != nil {
		h.Close()
		return nil, err
	}
	return d, nil
}

// MACFor is the MAC address of the VXLAN device of the gateway with WAN
// address a: locally administered 02:ca followed by the IPv4 address.
func MACFor(a netip.Addr) net.HardwareAddr {
	b := a.As4()
	return net.HardwareAddr{0x02, 0xca, b[0], b[1], b[2], b[3]}
}

// NextHopFor is the on-link IPv4 next hop used for the gateway with WAN
// address a: 240.b.c.d from a.b.c.d. It exists only as a static neighbour
// entry on the local device (never assigned to any interface).
func NextHopFor(a netip.Addr) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte{240, b[1], b[2], b[3]})
}

// NextHop6For is the on-link IPv6 next hop used for the gateway with WAN
// address a: the link-local address the kernel derives from MACFor(a)
// (nodenet.LinkLocal: fe80::ca:<a>ff:fe<b>:<c><d> in hex for a.b.c.d),
// which that gateway's device holds. Like NextHopFor it is reached
// through a static neighbour entry (no neighbour discovery across the
// tunnel); unlike it, it is unique for every IPv4 address.
func NextHop6For(a netip.Addr) netip.Addr { return nodenet.LinkLocal(MACFor(a)) }

// nextHop is the next hop towards subnet p of the gateway with WAN
// address a: of p's family.
func nextHop(a netip.Addr, p netip.Prefix) netip.Addr {
	if p.Addr().Is6() {
		return NextHop6For(a)
	}
	return NextHopFor(a)
}

func (d *Driver) ensureLink() error {
	link, changes, err := nodenet.EnsureVXLAN(d.h, nodenet.VXLAN{Name: d.local.Interface, VNI: VNI,
		Port: int(d.local.Port), Local: d.local.Address, MTU: d.local.MTU, MAC: MACFor(d.local.Address)})
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		d.log.Info("adopting existing vxlan device", "ifindex", link.Attrs().Index)
	} else {
		d.log.Info("vxlan device", "ifindex", link.Attrs().Index, "changes", changes)
	}
	d.link = link
	return nil
}

// Name implements cable.Driver.
func (d *Driver) Name() string { return Name }

// PublicKey implements cable.Driver; VXLAN has no keys.
func (d *Driver) PublicKey() cable.Key { return cable.Key{} }

// Set implements cable.Driver.
func (d *Driver) Set(ctx context.Context, conns []cable.Connection) error {
	valid, verr := cable.Validate(conns, cable.Requirements{IPv4Endpoint: true})
	var portErrs []error
	valid = slices.DeleteFunc(valid, func(c cable.Connection) bool {
		if c.Endpoint.Port() != d.local.Port {
			portErrs = append(portErrs, &cable.ValidationError{ClusterID: c.ClusterID,
				Reason: fmt.Sprintf("vxlan port %d differs from local port %d", c.Endpoint.Port(), d.local.Port)})
			return true
		}
		return false
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return errors.New("vxlan: driver closed")
	}
	if err := d.apply(valid); err != nil {
		return fmt.Errorf("vxlan %s: %w", d.local.Interface, err)
	}
	d.conns = valid
	return errors.Join(append(portErrs, verr)...)
}

func (d *Driver) apply(conns []cable.Connection) error {
	idx := d.link.Attrs().Index
	var peers nodenet.Neighbours
	var want []nodenet.Route
	for _, c := range conns {
		remote := c.Endpoint.Addr()
		mac := MACFor(remote)
		peers.FDB = append(peers.FDB, nodenet.FDB{MAC: mac, Dst: remote})
		peers.Neigh = append(peers.Neigh, nodenet.Neigh{IP: NextHopFor(remote), MAC: mac})
		if slices.ContainsFunc(c.Subnets, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
			peers.Neigh = append(peers.Neigh, nodenet.Neigh{IP: NextHop6For(remote), MAC: mac})
		}
		for _, p := range c.Subnets {
			want = append(want, nodenet.Route{Dst: p, Via: nextHop(remote, p), Link: idx})
		}
	}
	// Routes first on removal paths would leave packets without a next
	// hop for an instant; order: add FDB+neigh, sync routes, then prune.
	if _, err := nodenet.AddNeighbours(d.h, d.link, peers); err != nil {
		return err
	}
	if _, err := nodenet.SyncRoutes(d.h, d.local.RouteOwner(idx), want); err != nil {
		return err
	}
	_, err := nodenet.PruneNeighbours(d.h, d.link, peers)
	return err
}

func owned(mac net.HardwareAddr) bool {
	return len(mac) == 6 && mac[0] == 0x02 && mac[1] == 0xca
}

// Connections implements cable.Driver. VXLAN has no handshake: a
// connection is reported connected when its FDB entry and its routes
// (via the next hop of each subnet's family) are all programmed. Byte
// and packet counters are not kept per remote (-1): the device counts
// all remotes together.
func (d *Driver) Connections(ctx context.Context) ([]cable.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return nil, errors.New("vxlan: driver closed")
	}
	idx := d.link.Attrs().Index
	fdb, err := d.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return nil, fmt.Errorf("list fdb: %w", err)
	}
	haveFDB := map[string]bool{}
	for _, n := range fdb {
		if owned(n.HardwareAddr) && n.IP != nil {
			a, _ := netip.AddrFromSlice(n.IP)
			haveFDB[a.Unmap().String()] = true
		}
	}
	rs, err := nodenet.ListRoutes(d.h, d.local.RouteOwner(idx))
	if err != nil {
		return nil, err
	}
	haveRoute := map[netip.Prefix]netip.Addr{}
	for _, r := range rs {
		haveRoute[r.Dst] = r.Via
	}
	var out []cable.Status
	for _, c := range d.conns {
		ok := haveFDB[c.Endpoint.Addr().String()]
		for _, p := range c.Subnets {
			ok = ok && haveRoute[p] == nextHop(c.Endpoint.Addr(), p)
		}
		out = append(out, cable.Status{ClusterID: c.ClusterID, Endpoint: c.Endpoint, Subnets: c.Subnets,
			Connected: ok, RxBytes: -1, TxBytes: -1, RxPackets: -1, TxPackets: -1})
	}
	return out, nil
}

// Close implements cable.Driver: the device, its FDB and routes stay.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h != nil {
		d.h.Close()
		d.h = nil
	}
	return nil
}

// Cleanup implements cable.Driver: deleting the device removes its FDB,
// neighbours and routes with it.
func (d *Driver) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return errors.New("vxlan: driver closed")
	}
	_, err := nodenet.DeleteVXLAN(d.h, d.local.Interface)
	d.h.Close()
	d.h = nil
	d.conns = nil
	return err
}
