// Package cable is the tunnel layer between gateways: a Driver interface,
// a registry of drivers by name, and pure validation of the desired set of
// connections. The drivers live in subpackages (wireguard, vxlan); package
// drivers builds the default registry. A driver is created for one local
// endpoint and is handed the complete desired set of connections with
// Set; it converges the node to exactly that set.
package cable

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/causeway-net/causeway/pkg/nodenet"
)

// RouteProtocol marks every route a driver installs ("proto 157" in `ip
// route`).
const RouteProtocol = 157

// RouteOwner identifies the routes a driver owns: RouteProtocol, in
// RouteTable, on the driver's device (index link), metric 0. Drivers sync
// them with pkg/nodenet, so routes of other protocols, tables or devices
// are never touched.
func (l LocalEndpoint) RouteOwner(link int) nodenet.Owner {
	return nodenet.Owner{Protocol: RouteProtocol, Table: l.RouteTable, Link: link}
}

// Key is a 32-byte key (a WireGuard public key or pre-shared key).
type Key [32]byte

// ParseKey decodes a base64 key as published in an Endpoint.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return k, fmt.Errorf("parse key: %w", err)
	}
	if len(b) != len(k) {
		return k, fmt.Errorf("parse key: length %d, want %d", len(b), len(k))
	}
	copy(k[:], b)
	return k, nil
}

// String returns the base64 form of k.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// IsZero reports whether k is all zeroes.
func (k Key) IsZero() bool { return k == Key{} }

// LocalEndpoint describes the gateway's own end of every cable. A driver is
// created for exactly one LocalEndpoint.
type LocalEndpoint struct {
	// ClusterID is the local cluster's ID (for logs and status).
	ClusterID string
	// Interface is the tunnel device name. It must be unique on the whole
	// machine (wireguard-go's UAPI sockets are not per network namespace).
	Interface string
	// Address is the local WAN address the tunnel is sourced from (the
	// VXLAN local address; informational for WireGuard, which listens on
	// all addresses of the namespace).
	Address netip.Addr
	// Port is the UDP port the tunnel listens on.
	Port uint16
	// MTU of the tunnel device; 0 picks the driver's default.
	MTU int
	// StateDir keeps state that must survive restarts (the WireGuard
	// private key, mode 0600). The private key never leaves it.
	StateDir string
	// Netns is the path of the network namespace the tunnel lives in
	// (e.g. /run/netns/gw1); empty means the caller's current namespace.
	Netns string
	// RouteTable is the routing table that receives the routes for remote
	// subnets; 0 means the main table.
	RouteTable int
	// Subnets are the local cluster's subnets. The ipsec driver uses them
	// as its local traffic selectors (empty: any, narrowed by the peer);
	// other drivers ignore them.
	Subnets []netip.Prefix
	// Logger is used for driver logs; nil discards.
	Logger *slog.Logger
}

// Connection is one desired cable to a remote gateway.
type Connection struct {
	// ClusterID identifies the remote cluster; unique within a Set.
	ClusterID string
	// Endpoint is the remote gateway's public address and port.
	Endpoint netip.AddrPort
	// PublicKey is the remote's public key: WireGuard's, or the ipsec
	// driver's X25519 key the pair's pre-shared key is derived from
	// (ipsec.DerivePSK); zero for drivers without keys.
	PublicKey Key
	// PresharedKey is an optional additional symmetric key (WireGuard);
	// other drivers ignore it.
	PresharedKey *Key
	// Subnets are the remote cluster's validated subnets. Only these are
	// routed into the tunnel and accepted from it.
	Subnets []netip.Prefix
}

// Status is the observed state of one connection.
type Status struct {
	ClusterID string
	Endpoint  netip.AddrPort
	Subnets   []netip.Prefix
	// Connected is true when the driver believes traffic can flow: a
	// handshake within the last 3 minutes for WireGuard; programmed for
	// drivers without a handshake.
	Connected bool
	// LastHandshake is the time of the latest handshake; zero if none or
	// if the driver has no handshake.
	LastHandshake time.Time
	// RxBytes and TxBytes count tunnel payload, RxPackets and TxPackets
	// its packets; -1 where the driver cannot count per connection. They
	// may restart from zero (a peer re-added, an SA rekeyed).
	RxBytes, TxBytes     int64
	RxPackets, TxPackets int64
}

// Driver is a tunnel driver bound to one LocalEndpoint.
type Driver interface {
	// Name is the driver's registry name ("wireguard", "vxlan", ...).
	Name() string
	// PublicKey is the local public key to publish in the Endpoint; zero
	// for drivers without keys.
	PublicKey() Key
	// Set converges the tunnel to exactly conns: adds, updates and removes
	// peers and their routes. Invalid connections are not programmed and
	// are reported in the returned error (see ValidationError); valid ones
	// are programmed regardless.
	Set(ctx context.Context, conns []Connection) error
	// Connections reports the state of the programmed connections, sorted
	// by ClusterID.
	Connections(ctx context.Context) ([]Status, error)
	// Close releases the driver's process resources. Kernel state (a
	// kernel tunnel device, its peers and routes) is left in place so that
	// a restarted driver adopts it without interrupting traffic; state that
	// lives in this process (an embedded wireguard-go device) goes away.
	Close() error
	// Cleanup removes everything the driver created (device, peers,
	// routes) and closes it. The key in StateDir is kept.
	Cleanup(ctx context.Context) error
}

// KeyRotator is implemented by drivers with keys.
type KeyRotator interface {
	// RotateKey replaces the local private key (persisting it) and
	// returns the new public key. Peers are kept; remote gateways must be
	// handed the new public key to reconnect.
	RotateKey(ctx context.Context) (Key, error)
}

// SessionResetter is implemented by drivers whose connections carry a
// session apart from their configuration (WireGuard: the keys of the
// last handshake), which can go bad while the configuration stays right.
type SessionResetter interface {
	// ResetSession drops the session of clusterID's connection and keeps
	// its configuration: the next packet either way starts a new one.
	ResetSession(ctx context.Context, clusterID string) error
}

// Constructor creates a driver for a local endpoint.
type Constructor func(ctx context.Context, local LocalEndpoint) (Driver, error)

// Kind is a driver as the gateway knows it before creating one: its
// constructor and what it needs of the node around the driver's own
// state. Adding a driver touches package cable (a subpackage and the
// drivers registry) only.
type Kind struct {
	// New creates the driver.
	New Constructor
	// Device, when set, names the tunnel device the driver creates
	// whatever LocalEndpoint.Interface asks (ipsec: the one TUN
	// kernel-libipsec creates per namespace); nil: Interface itself.
	Device func(requested string) string
	// Port, when non-zero, is the UDP port the driver listens on whatever
	// LocalEndpoint.Port asks (ipsec: charon's IKE port); the gateway
	// publishes it.
	Port uint16
	// RemoveStale, when set, removes what a killed driver process left
	// outside the kernel for device (the embedded WireGuard's UAPI
	// socket) and reports whether it removed anything.
	RemoveStale func(device string) (bool, error)
	// Keyed: peers are authenticated by the public key the driver
	// publishes (WireGuard's, ipsec's X25519 key), so the gateway claims
	// it in the broker and requires every remote's key to be claimed in
	// its own name.
	Keyed bool
}

// DeviceName is the tunnel device k creates when asked for requested.
func (k Kind) DeviceName(requested string) string {
	if k.Device == nil {
		return requested
	}
	return k.Device(requested)
}

// Registry maps driver names to their kinds.
type Registry map[string]Kind

// ErrUnknownDriver is returned for names missing from a Registry.
var ErrUnknownDriver = errors.New("unknown cable driver")

// New creates the named driver.
func (r Registry) New(ctx context.Context, name string, local LocalEndpoint) (Driver, error) {
	k, ok := r[name]
	if !ok || k.New == nil {
		return nil, fmt.Errorf("create driver %q: %w", name, ErrUnknownDriver)
	}
	d, err := k.New(ctx, local)
	if err != nil {
		return nil, fmt.Errorf("create driver %q: %w", name, err)
	}
	return d, nil
}
