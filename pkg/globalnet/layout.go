package globalnet

import (
	"errors"
	"fmt"
	"net/netip"
)

// DefaultPortRange is the range global ports are allocated from: every
// non-privileged port, so a global IP carries 64 512 service ports.
var DefaultPortRange = PortRange{First: 1024, Last: 65535}

// DefaultEgressIPs is the number of addresses at the top of a global CIDR
// reserved as SNAT sources for egress.
const DefaultEgressIPs = 2

// ErrLayout is wrapped by every error of NewLayout.
var ErrLayout = errors.New("invalid global CIDR layout")

// AddrRange is an inclusive range of IPv4 addresses, First <= Last.
type AddrRange struct{ First, Last netip.Addr }

// Len is the number of addresses in r.
func (r AddrRange) Len() int { return int(addrIndex(r.Last)-addrIndex(r.First)) + 1 }

// Contains reports whether a is in r.
func (r AddrRange) Contains(a netip.Addr) bool {
	return a.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// At returns the i-th address of r (0 = First); i must be < r.Len().
func (r AddrRange) At(i int) netip.Addr { return addrFromIndex(addrIndex(r.First) + uint32(i)) }

// Index returns a's position in r; a must be in r.
func (r AddrRange) Index(a netip.Addr) int { return int(addrIndex(a) - addrIndex(r.First)) }

func (r AddrRange) String() string { return r.First.String() + "-" + r.Last.String() }

// Layout is how one cluster's global CIDR is used:
//
//	network address   unused
//	HealthCheck       first host: the active gateway's health-check
//	                  address on the tunnel device
//	Ingress           every host between: handed out by the Allocator
//	Egress            the last egress hosts before the broadcast address:
//	                  SNAT sources of traffic leaving for remote clusters
//	broadcast address unused
//
// For 242.0.1.0/24 with DefaultEgressIPs: health check 242.0.1.1, ingress
// 242.0.1.2-242.0.1.252, egress 242.0.1.253 and 242.0.1.254.
type Layout struct {
	CIDR        netip.Prefix
	HealthCheck netip.Addr
	Ingress     AddrRange
	// Egress is ascending and contiguous; empty when egressIPs was 0
	// (then nothing is SNATed).
	Egress []netip.Addr
}

// NewLayout splits an IPv4 global CIDR (canonical, i.e. no host bits set)
// into its parts, keeping egressIPs addresses for egress. The CIDR must
// leave at least one ingress address.
func NewLayout(cidr netip.Prefix, egressIPs int) (Layout, error) {
	switch {
	case !cidr.IsValid():
		return Layout{}, fmt.Errorf("%w: invalid prefix", ErrLayout)
	case !cidr.Addr().Is4():
		return Layout{}, fmt.Errorf("%w: %s is not IPv4", ErrLayout, cidr)
	case cidr.Masked() != cidr:
		return Layout{}, fmt.Errorf("%w: %s has host bits set (want %s)", ErrLayout, cidr, cidr.Masked())
	case egressIPs < 0:
		return Layout{}, fmt.Errorf("%w: negative egress IP count %d", ErrLayout, egressIPs)
	}
	size := uint64(1) << (32 - cidr.Bits())
	// network + health check + egress + at least one ingress + broadcast.
	if need := uint64(egressIPs) + 4; size < need {
		return Layout{}, fmt.Errorf("%w: %s has %d addresses, %d egress IPs need at least %d", ErrLayout, cidr, size, egressIPs, need)
	}
	base := addrIndex(cidr.Addr())
	broadcast := base + uint32(size-1)
	l := Layout{
		CIDR:        cidr,
		HealthCheck: addrFromIndex(base + 1),
		Ingress:     AddrRange{First: addrFromIndex(base + 2), Last: addrFromIndex(broadcast - 1 - uint32(egressIPs))},
	}
	for i := egressIPs; i >= 1; i-- {
		l.Egress = append(l.Egress, addrFromIndex(broadcast-uint32(i)))
	}
	return l, nil
}

// ClusterLayout is the layout of a member cluster's global CIDR, with
// DefaultEgressIPs: the globalnet controller allocates from its Ingress range and
// the active gateway health-checks, translates and SNATs with it. Both
// call this one function so the two can never split the CIDR differently.
func ClusterLayout(cidr netip.Prefix) (Layout, error) { return NewLayout(cidr, DefaultEgressIPs) }

func addrIndex(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addrFromIndex(i uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
}
