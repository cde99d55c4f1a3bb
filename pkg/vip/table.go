package vip

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path/filepath"
)

// Proto is the IP protocol number of a service port.
type Proto uint8

// Protocols a service port may use.
const (
	TCP Proto = 6
	UDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// ServiceKey names one service port: a ClusterSet VIP, a port and a protocol.
type ServiceKey struct {
	VIP   netip.Addr
	Port  uint16
	Proto Proto
}

func (k ServiceKey) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.VIP, k.Port), k.Proto)
}

// Backend is an address a VIP connection is sent to instead: a local service
// or pod IP, a remote service address, or a global IP:port under globalnet.
// Its port may differ from the VIP's.
type Backend struct {
	Addr netip.Addr
	Port uint16
	// Weight is the backend's share of the service's connections relative
	// to its other backends (the route agent: the exporting cluster's ready
	// endpoints). 0 counts as 1.
	Weight uint32
}

// AddrPort is where the backend is reached.
func (b Backend) AddrPort() netip.AddrPort { return netip.AddrPortFrom(b.Addr, b.Port) }

func (b Backend) String() string {
	if b.Weight > 1 {
		return fmt.Sprintf("%s*%d", b.AddrPort(), b.Weight)
	}
	return b.AddrPort().String()
}

// Service is what a ServiceKey is translated to.
type Service struct {
	// Backends share the connections in proportion to their weights.
	Backends []Backend
	// AffinitySeconds is the ClientIP session affinity timeout: while a
	// client (a network namespace) connects again within this many
	// seconds of its last connection, it gets the same backend, as long
	// as that is still one of Backends. 0: no affinity.
	AffinitySeconds uint32
}

// Table is the VIP datapath as the route agent sees it.
type Table interface {
	// Set makes the datapath translate exactly the services in desired.
	// A service with no backends stays in the table and makes
	// connect()/sendmsg() to it fail with EHOSTUNREACH; a VIP:port not in
	// desired is left alone by the programs. Set validates all of desired
	// before changing anything; on an error from the kernel the next Set
	// re-reads the maps and converges.
	Set(ctx context.Context, desired map[ServiceKey]Service) error
	// Limits are the most entries the table holds: Set refuses a desired
	// state beyond them (ErrInvalid), so callers fit theirs within.
	Limits() Limits
	// Usage is how many of them it holds: services, and backend slots
	// (one per distinct backend of each service).
	Usage() Limits
	// Close releases the Table's resources. The kernel implementation leaves
	// the programs attached and the maps pinned, so the datapath keeps
	// working until a new Table adopts them or Cleanup removes them.
	Close() error
}

// ErrInvalid is wrapped by Set's errors for desired states it refuses.
var ErrInvalid = errors.New("invalid VIP table")

// Limits bound the number of entries of the maps. Zero means no limit (in
// Validate) or the default (Open).
type Limits struct {
	Services uint32 // entries of vip_services
	Backends uint32 // entries of vip_backends, summed over all services
}

// Validate checks desired against what the programs can express and lim:
// a Table whose Limits are lim refuses desired in Set exactly when
// Validate returns an error (wrapping ErrInvalid), before changing
// anything.
func Validate(desired map[ServiceKey]Service, lim Limits) error {
	if lim.Services != 0 && len(desired) > int(lim.Services) {
		return fmt.Errorf("%w: %d services, the map holds %d", ErrInvalid, len(desired), lim.Services)
	}
	total := 0
	for k, svc := range desired {
		if !k.VIP.IsValid() || k.VIP.Is4In6() || k.VIP.Zone() != "" {
			return fmt.Errorf("%w: service %s: VIP must be an IPv4 or (not IPv4-mapped, zoneless) IPv6 address", ErrInvalid, k)
		}
		if k.Port == 0 {
			return fmt.Errorf("%w: service %s: port 0", ErrInvalid, k)
		}
		if k.Proto != TCP && k.Proto != UDP {
			return fmt.Errorf("%w: service %s: protocol must be TCP or UDP", ErrInvalid, k)
		}
		var weights uint64
		for _, b := range svc.Backends {
			weights += uint64(max(b.Weight, 1))
			if !b.Addr.IsValid() || b.Addr.Is4In6() || b.Addr.Zone() != "" || b.Addr.Is4() != k.VIP.Is4() {
				return fmt.Errorf("%w: service %s: backend %s is not of the VIP's family (IPv4-mapped and zoned addresses are refused)", ErrInvalid, k, b)
			}
			if b.Port == 0 {
				return fmt.Errorf("%w: service %s: backend %s has port 0", ErrInvalid, k, b)
			}
		}
		if weights > math.MaxUint32 {
			return fmt.Errorf("%w: service %s: weights sum to %d, more than 2^32-1", ErrInvalid, k, weights)
		}
		total += len(svc.Backends)
	}
	if lim.Backends != 0 && total > int(lim.Backends) {
		return fmt.Errorf("%w: %d backends, the map holds %d", ErrInvalid, total, lim.Backends)
	}
	return nil
}

// PinDir is where the VIP datapath pins its maps and links under a bpffs
// mount (the route agent's default, and what `inspect` reads).
func PinDir(bpffs string) string { return filepath.Join(bpffs, "causeway", "vip") }
