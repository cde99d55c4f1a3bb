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
	"github.com/causeway-net/causeway/pkg/cable/internal/routes"
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

// NextHopFor is the on-link next hop used for the gateway with WAN address
// a: 240.b.c.d from a.b.c.d. It exists only as a static neighbour entry
// on the local device (never assigned to any interface).
func NextHopFor(a netip.Addr) netip.Addr {
	b := a.As4()
	return netip.AddrFrom4([4]byte{240, b[1], b[2], b[3]})
}

func (d *Driver) ensureLink() error {
	name := d.local.Interface
	mac := MACFor(d.local.Address)
	existing, err := d.h.LinkByName(name)
	if err == nil {
		if vx, ok := existing.(*netlink.Vxlan); ok && vx.VxlanId == VNI && vx.Port == int(d.local.Port) &&
			net.IP(d.local.Address.AsSlice()).Equal(vx.SrcAddr) && !vx.Learning {
			d.log.Info("adopting existing vxlan device", "ifindex", vx.Index)
			if vx.MTU != d.local.MTU {
				if err := d.h.LinkSetMTU(vx, d.local.MTU); err != nil {
					return fmt.Errorf("set mtu of %s: %w", name, err)
				}
			}
			if vx.HardwareAddr.String() != mac.String() {
				if err := d.h.LinkSetHardwareAddr(vx, mac); err != nil {
					return fmt.Errorf("set mac of %s: %w", name, err)
				}
			}
			if err := d.h.LinkSetUp(vx); err != nil {
				return fmt.Errorf("set %s up: %w", name, err)
			}
			d.link = vx
			return nil
		}
		d.log.Info("replacing incompatible link", "type", existing.Type())
		if err := d.h.LinkDel(existing); err != nil {
			return fmt.Errorf("delete incompatible link %s: %w", name, err)
		}
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	vx := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: name, MTU: d.local.MTU, HardwareAddr: mac},
		VxlanId:   VNI,
		SrcAddr:   net.IP(d.local.Address.AsSlice()),
		Port:      int(d.local.Port),
		Learning:  false,
	}
	if err := d.h.LinkAdd(vx); err != nil {
		return fmt.Errorf("create vxlan device %s: %w", name, err)
	}
	link, err := d.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if err := d.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	d.log.Info("created vxlan device", "ifindex", link.Attrs().Index, "vni", VNI, "port", d.local.Port)
	d.link = link
	return nil
}

// Name implements cable.Driver.
func (d *Driver) Name() string { return Name }

// PublicKey implements cable.Driver; VXLAN has no keys.
func (d *Driver) PublicKey() cable.Key { return cable.Key{} }

// Set implements cable.Driver.
func (d *Driver) Set(ctx context.Context, conns []cable.Connection) error {
	valid, verr := cable.Validate(conns, cable.Requirements{IPv4Only: true})
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
	wantFDB := map[string]netip.Addr{}   // mac -> remote VTEP
	wantNeigh := map[netip.Addr]string{} // next hop -> mac
	var want []routes.Route
	for _, c := range conns {
		remote := c.Endpoint.Addr()
		mac := MACFor(remote).String()
		nh := NextHopFor(remote)
		wantFDB[mac] = remote
		wantNeigh[nh] = mac
		for _, p := range c.Subnets {
			want = append(want, routes.Route{Dst: p, Via: nh})
		}
	}
	// Routes first on removal paths would leave packets without a next
	// hop for an instant; order: add FDB+neigh, sync routes, then prune.
	for mac, remote := range wantFDB {
		hw, _ := net.ParseMAC(mac)
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, HardwareAddr: hw, IP: net.IP(remote.AsSlice())}
		if err := d.h.NeighSet(n); err != nil {
			return fmt.Errorf("set fdb %s -> %s: %w", mac, remote, err)
		}
	}
	for nh, mac := range wantNeigh {
		hw, _ := net.ParseMAC(mac)
		n := &netlink.Neigh{LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
			HardwareAddr: hw, IP: net.IP(nh.AsSlice())}
		if err := d.h.NeighSet(n); err != nil {
			return fmt.Errorf("set neighbour %s: %w", nh, err)
		}
	}
	if err := routes.Sync(d.h, d.link, d.local.RouteTable, want); err != nil {
		return err
	}
	// Prune FDB entries and neighbours we own (our MAC scheme) that are
	// not wanted.
	fdb, err := d.h.NeighList(idx, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list fdb: %w", err)
	}
	for _, n := range fdb {
		if !owned(n.HardwareAddr) || n.IP == nil {
			continue
		}
		remote, _ := netip.AddrFromSlice(n.IP)
		if w, ok := wantFDB[n.HardwareAddr.String()]; ok && w == remote.Unmap() {
			continue
		}
		n.Flags = netlink.NTF_SELF
		if err := d.h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete fdb %s -> %s: %w", n.HardwareAddr, n.IP, err)
		}
	}
	neighs, err := d.h.NeighList(idx, unix.AF_INET)
	if err != nil {
		return fmt.Errorf("list neighbours: %w", err)
	}
	for _, n := range neighs {
		nh, ok := netip.AddrFromSlice(n.IP)
		if !ok || !owned(n.HardwareAddr) {
			continue
		}
		if mac, ok := wantNeigh[nh.Unmap()]; ok && mac == n.HardwareAddr.String() {
			continue
		}
		if err := d.h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete neighbour %s: %w", n.IP, err)
		}
	}
	return nil
}

func owned(mac net.HardwareAddr) bool {
	return len(mac) == 6 && mac[0] == 0x02 && mac[1] == 0xca
}

// Connections implements cable.Driver. VXLAN has no handshake: a
// connection is reported connected when its FDB entry, neighbour and
// routes are all programmed. Byte counters are not kept per remote (-1).
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
	rs, err := routes.List(d.h, d.link, d.local.RouteTable)
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
			ok = ok && haveRoute[p] == NextHopFor(c.Endpoint.Addr())
		}
		out = append(out, cable.Status{ClusterID: c.ClusterID, Endpoint: c.Endpoint, Subnets: c.Subnets,
			Connected: ok, RxBytes: -1, TxBytes: -1})
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
	err := d.h.LinkDel(d.link)
	if err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) && !errors.Is(err, unix.ENODEV) {
		err = fmt.Errorf("delete %s: %w", d.local.Interface, err)
	} else {
		err = nil
	}
	d.h.Close()
	d.h = nil
	d.conns = nil
	return err
}
