package wireguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/nodenet"
)

const (
	// Name is the registry name of this driver.
	Name = "wireguard"
	// DefaultPort is used when the LocalEndpoint has no port.
	DefaultPort = 51820
	// DefaultMTU fits WireGuard's 80-byte IPv6 overhead into 1500.
	DefaultMTU = 1420
	// Keepalive is the persistent keepalive towards every peer: it keeps
	// NAT mappings open and the handshake time fresh for health status.
	Keepalive = 25 * time.Second
	// connectedWindow: a peer with a handshake younger than this is
	// connected (WireGuard rekeys every 2 minutes under traffic or
	// keepalive).
	connectedWindow = 3 * time.Minute
)

// Mode selects the WireGuard implementation.
type Mode int

const (
	// ModeAuto uses the kernel if it supports WireGuard, else embedded.
	ModeAuto Mode = iota
	// ModeKernel requires the kernel implementation.
	ModeKernel
	// ModeEmbedded always uses wireguard-go in this process.
	ModeEmbedded
)

func (m Mode) String() string {
	switch m {
	case ModeKernel:
		return "kernel"
	case ModeEmbedded:
		return "embedded"
	}
	return "auto"
}

// Driver is the WireGuard cable driver.
type Driver struct {
	local cable.LocalEndpoint
	log   *slog.Logger
	mode  Mode // resolved: ModeKernel or ModeEmbedded

	mu     sync.Mutex
	closed bool
	key    wgtypes.Key
	h      *netlink.Handle
	wg     *wgctrl.Client
	link   netlink.Link
	emb    *embedded // nil in kernel mode
	conns  []cable.Connection
}

var (
	_ cable.Driver          = (*Driver)(nil)
	_ cable.KeyRotator      = (*Driver)(nil)
	_ cable.SessionResetter = (*Driver)(nil)
)

// New creates the driver in ModeAuto.
func New(ctx context.Context, local cable.LocalEndpoint) (cable.Driver, error) {
	return NewWithMode(ctx, local, ModeAuto)
}

// NewWithMode creates the WireGuard device local.Interface in local.Netns
// (adopting an existing kernel WireGuard device of that name) and applies
// the persisted private key and listen port. Peers come with Set.
func NewWithMode(ctx context.Context, local cable.LocalEndpoint, mode Mode) (*Driver, error) {
	if local.Interface == "" || len(local.Interface) > 15 {
		return nil, fmt.Errorf("wireguard: invalid interface name %q", local.Interface)
	}
	if local.StateDir == "" {
		return nil, errors.New("wireguard: state dir required")
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
	key, err := loadOrCreateKey(local.StateDir)
	if err != nil {
		return nil, fmt.Errorf("wireguard: %w", err)
	}
	h, err := netnsx.Handle(local.Netns)
	if err != nil {
		return nil, fmt.Errorf("wireguard: %w", err)
	}
	d := &Driver{local: local, log: log, key: key, h: h}
	if err := d.createDevice(mode); err != nil {
		d.release()
		return nil, fmt.Errorf("wireguard %s: %w", local.Interface, err)
	}
	// wgctrl's netlink socket (kernel mode) must live in the namespace.
	if err := netnsx.Do(local.Netns, func() error {
		var err error
		d.wg, err = wgctrl.New()
		return err
	}); err != nil {
		d.release()
		return nil, fmt.Errorf("wireguard: open wgctrl: %w", err)
	}
	port := int(local.Port)
	if err := d.wg.ConfigureDevice(local.Interface, wgtypes.Config{PrivateKey: &key, ListenPort: &port}); err != nil {
		d.release()
		return nil, fmt.Errorf("wireguard %s: set key and port: %w", local.Interface, err)
	}
	if err := d.h.LinkSetUp(d.link); err != nil {
		d.release()
		return nil, fmt.Errorf("wireguard %s: set up: %w", local.Interface, err)
	}
	if d.emb != nil {
		// The TUN status listener would also bring it up; do not wait.
		if err := d.emb.dev.Up(); err != nil {
			d.release()
			return nil, fmt.Errorf("wireguard %s: device up: %w", local.Interface, err)
		}
		log.Info("embedded wireguard-go device up", "offloads", fmt.Sprintf("%+v", d.emb.offloads))
	}
	return d, nil
}

// createDevice picks the implementation: an existing kernel device is
// adopted; otherwise `ip link add type wireguard` is the feature probe.
func (d *Driver) createDevice(mode Mode) error {
	name := d.local.Interface
	existing, err := d.h.LinkByName(name)
	switch {
	case err == nil && existing.Type() == "wireguard" && mode != ModeEmbedded:
		d.log.Info("adopting kernel wireguard device", "ifindex", existing.Attrs().Index)
		d.mode, d.link = ModeKernel, existing
		return d.ensureMTU()
	case err == nil:
		// A stale TUN of a dead embedded instance cannot exist (TUNs die
		// with their fd); anything else of that name is in the way.
		if err := d.h.LinkDel(existing); err != nil {
			return fmt.Errorf("delete stale %s link: %w", existing.Type(), err)
		}
	case !errors.As(err, new(netlink.LinkNotFoundError)):
		return fmt.Errorf("look up link: %w", err)
	}
	if mode != ModeEmbedded {
		err := d.h.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: d.local.MTU}})
		switch {
		case err == nil:
			link, err := d.h.LinkByName(name)
			if err != nil {
				return fmt.Errorf("look up link: %w", err)
			}
			d.mode, d.link = ModeKernel, link
			d.log.Info("created kernel wireguard device", "ifindex", link.Attrs().Index)
			return nil
		case mode == ModeKernel:
			return fmt.Errorf("create kernel wireguard device: %w", err)
		case !errors.Is(err, unix.EOPNOTSUPP):
			return fmt.Errorf("create kernel wireguard device: %w", err)
		}
		d.log.Info("kernel has no wireguard, using embedded wireguard-go")
	}
	emb, err := startEmbedded(d.local.Netns, name, d.local.MTU, d.log)
	if err != nil {
		return err
	}
	d.emb = emb
	link, err := d.h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("look up tun: %w", err)
	}
	d.mode, d.link = ModeEmbedded, link
	return nil
}

func (d *Driver) ensureMTU() error {
	if d.link.Attrs().MTU == d.local.MTU {
		return nil
	}
	if err := d.h.LinkSetMTU(d.link, d.local.MTU); err != nil {
		return fmt.Errorf("set mtu: %w", err)
	}
	return nil
}

// Mode reports the implementation in use (ModeKernel or ModeEmbedded).
func (d *Driver) Mode() Mode { return d.mode }

// Offloads reports the offloads of the embedded device (zero in kernel
// mode, where the kernel does its own).
func (d *Driver) Offloads() Offloads {
	if d.emb == nil {
		return Offloads{}
	}
	return d.emb.offloads
}

// Name implements cable.Driver.
func (d *Driver) Name() string { return Name }

// PublicKey implements cable.Driver.
func (d *Driver) PublicKey() cable.Key {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cable.Key(d.key.PublicKey())
}

// RotateKey implements cable.KeyRotator: the new key is persisted first,
// then applied to the device; peers stay configured.
func (d *Driver) RotateKey(ctx context.Context) (cable.Key, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return cable.Key{}, errors.New("wireguard: driver closed")
	}
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return cable.Key{}, fmt.Errorf("wireguard: generate key: %w", err)
	}
	if err := storeKey(d.local.StateDir, k); err != nil {
		return cable.Key{}, fmt.Errorf("wireguard: %w", err)
	}
	if err := d.wg.ConfigureDevice(d.local.Interface, wgtypes.Config{PrivateKey: &k}); err != nil {
		return cable.Key{}, fmt.Errorf("wireguard %s: apply new key: %w", d.local.Interface, err)
	}
	d.key = k
	d.log.Info("rotated private key", "publicKey", k.PublicKey().String())
	return cable.Key(k.PublicKey()), nil
}

// ResetSession implements cable.SessionResetter: the peer of clusterID's
// connection is removed and configured again, which drops its keys (and
// what was queued for it); the re-added peer starts a new handshake
// (its persistent keepalive sends one at once).
func (d *Driver) ResetSession(ctx context.Context, clusterID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("wireguard: driver closed")
	}
	i := slices.IndexFunc(d.conns, func(c cable.Connection) bool { return c.ClusterID == clusterID })
	if i < 0 {
		return fmt.Errorf("wireguard %s: no connection to %s", d.local.Interface, clusterID)
	}
	remove := wgtypes.PeerConfig{PublicKey: wgtypes.Key(d.conns[i].PublicKey), Remove: true}
	if err := d.wg.ConfigureDevice(d.local.Interface, wgtypes.Config{Peers: []wgtypes.PeerConfig{remove}}); err != nil {
		return fmt.Errorf("wireguard %s: remove the peer of %s: %w", d.local.Interface, clusterID, err)
	}
	if err := d.apply(d.conns); err != nil {
		return fmt.Errorf("wireguard %s: %w", d.local.Interface, err)
	}
	return nil
}

// Set implements cable.Driver.
func (d *Driver) Set(ctx context.Context, conns []cable.Connection) error {
	valid, verr := cable.Validate(conns, cable.Requirements{PublicKey: true})
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("wireguard: driver closed")
	}
	valid, errs := uniqueKeys(valid, cable.Key(d.key.PublicKey()))
	if err := d.apply(valid); err != nil {
		return fmt.Errorf("wireguard %s: %w", d.local.Interface, err)
	}
	d.conns = valid
	return errors.Join(append(errs, verr)...)
}

// uniqueKeys drops the connections WireGuard cannot tell apart: a peer
// is its public key, so connections sharing one are all refused (which
// cluster holds the key is the caller's policy to decide before Set —
// pkg/addrpolicy's key rule — never the driver's to guess), as is one
// announcing own, the local key.
func uniqueKeys(conns []cable.Connection, own cable.Key) ([]cable.Connection, []error) {
	users := map[cable.Key][]string{}
	for _, c := range conns {
		users[c.PublicKey] = append(users[c.PublicKey], c.ClusterID)
	}
	var errs []error
	out := slices.DeleteFunc(slices.Clone(conns), func(c cable.Connection) bool {
		switch {
		case c.PublicKey == own:
			errs = append(errs, &cable.ValidationError{ClusterID: c.ClusterID, Reason: "public key is the local key"})
			return true
		case len(users[c.PublicKey]) > 1:
			others := slices.DeleteFunc(slices.Clone(users[c.PublicKey]), func(id string) bool { return id == c.ClusterID })
			errs = append(errs, &cable.ValidationError{ClusterID: c.ClusterID, Reason: fmt.Sprintf("public key also announced by %v", others)})
			return true
		}
		return false
	})
	return out, errs
}

func (d *Driver) apply(conns []cable.Connection) error {
	dev, err := d.wg.Device(d.local.Interface)
	if err != nil {
		return fmt.Errorf("read device: %w", err)
	}
	if changes := peerChanges(dev.Peers, conns); len(changes) > 0 {
		if err := d.wg.ConfigureDevice(d.local.Interface, wgtypes.Config{Peers: changes}); err != nil {
			return fmt.Errorf("configure peers: %w", err)
		}
		d.log.Info("configured peers", "changes", len(changes), "peers", len(conns))
	}
	idx := d.link.Attrs().Index
	var want []nodenet.Route
	for _, c := range conns {
		for _, p := range c.Subnets {
			want = append(want, nodenet.Route{Dst: p, Link: idx})
		}
	}
	_, err = nodenet.SyncRoutes(d.h, d.local.RouteOwner(idx), want)
	return err
}

// peerChanges is the pure diff between the device's peers and the desired
// connections: a full peer config for every new or changed peer, a
// removal for every peer not desired, nothing for equal peers.
func peerChanges(have []wgtypes.Peer, conns []cable.Connection) []wgtypes.PeerConfig {
	byKey := map[wgtypes.Key]wgtypes.Peer{}
	for _, p := range have {
		byKey[p.PublicKey] = p
	}
	var out []wgtypes.PeerConfig
	wanted := map[wgtypes.Key]bool{}
	for _, c := range conns {
		k := wgtypes.Key(c.PublicKey)
		wanted[k] = true
		if p, ok := byKey[k]; ok && peerEqual(p, c) {
			continue
		}
		pc := wgtypes.PeerConfig{
			PublicKey:                   k,
			Endpoint:                    net.UDPAddrFromAddrPort(c.Endpoint),
			ReplaceAllowedIPs:           true,
			PersistentKeepaliveInterval: ptr(Keepalive),
			PresharedKey:                &wgtypes.Key{}, // clears a previous PSK
		}
		if c.PresharedKey != nil {
			psk := wgtypes.Key(*c.PresharedKey)
			pc.PresharedKey = &psk
		}
		for _, p := range c.Subnets {
			pc.AllowedIPs = append(pc.AllowedIPs, net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
		}
		out = append(out, pc)
	}
	for _, p := range have {
		if !wanted[p.PublicKey] {
			out = append(out, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
		}
	}
	return out
}

func peerEqual(p wgtypes.Peer, c cable.Connection) bool {
	if p.Endpoint == nil {
		return false
	}
	ep := p.Endpoint.AddrPort()
	if netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port()) != c.Endpoint {
		return false
	}
	var psk cable.Key
	if c.PresharedKey != nil {
		psk = *c.PresharedKey
	}
	if cable.Key(p.PresharedKey) != psk || p.PersistentKeepaliveInterval != Keepalive {
		return false
	}
	var allowed []netip.Prefix
	for _, n := range p.AllowedIPs {
		a, _ := netip.AddrFromSlice(n.IP)
		ones, _ := n.Mask.Size()
		allowed = append(allowed, netip.PrefixFrom(a.Unmap(), ones))
	}
	return cable.SamePrefixes(allowed, c.Subnets)
}

func ptr[T any](v T) *T { return &v }

// Connections implements cable.Driver with handshake times and byte
// counters read from the device; WireGuard counts no packets per peer
// (-1).
func (d *Driver) Connections(ctx context.Context) ([]cable.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errors.New("wireguard: driver closed")
	}
	dev, err := d.wg.Device(d.local.Interface)
	if err != nil {
		return nil, fmt.Errorf("wireguard %s: read device: %w", d.local.Interface, err)
	}
	peers := map[wgtypes.Key]wgtypes.Peer{}
	for _, p := range dev.Peers {
		peers[p.PublicKey] = p
	}
	var out []cable.Status
	for _, c := range d.conns {
		st := cable.Status{ClusterID: c.ClusterID, Endpoint: c.Endpoint, Subnets: c.Subnets, RxPackets: -1, TxPackets: -1}
		if p, ok := peers[wgtypes.Key(c.PublicKey)]; ok {
			st.LastHandshake = p.LastHandshakeTime
			st.RxBytes, st.TxBytes = p.ReceiveBytes, p.TransmitBytes
			st.Connected = !p.LastHandshakeTime.IsZero() && time.Since(p.LastHandshakeTime) < connectedWindow
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b cable.Status) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	return out, nil
}

// Close implements cable.Driver. A kernel device stays with its peers and
// routes. The embedded device lives in this process and goes away with
// it: its TUN is removed (and with it the routes), and the UAPI socket is
// unlinked. A new driver with the same state dir comes back with the same
// key, so peers reconnect after its Set.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.release()
}

func (d *Driver) release() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	if d.emb != nil {
		errs = append(errs, d.emb.close())
	}
	if d.wg != nil {
		errs = append(errs, d.wg.Close())
	}
	d.h.Close()
	return errors.Join(errs...)
}

// Cleanup implements cable.Driver: removes the device (kernel) or stops
// it (embedded), with its routes and UAPI socket. The key file stays.
func (d *Driver) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("wireguard: driver closed")
	}
	var errs []error
	if d.mode == ModeKernel {
		if err := d.h.LinkDel(d.link); err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) {
			errs = append(errs, fmt.Errorf("delete %s: %w", d.local.Interface, err))
		}
	}
	d.conns = nil
	errs = append(errs, d.release())
	return errors.Join(errs...)
}
