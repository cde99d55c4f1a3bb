package globalnet

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
)

// PortRange is an inclusive range of global ports, 1 <= First <= Last.
type PortRange struct{ First, Last uint16 }

// Len is the number of ports in r.
func (r PortRange) Len() int { return int(r.Last) - int(r.First) + 1 }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Errors of the Allocator; the returned errors wrap them (errors.Is).
var (
	// ErrExhausted: no ingress IP has enough free ports (or no ingress IP
	// is entirely free, for AllocateIP).
	ErrExhausted = errors.New("global addresses exhausted")
	// ErrConflict: a reservation collides with what another owner holds
	// (returned as *ConflictError).
	ErrConflict = errors.New("global address conflict")
	// ErrInvalid: an argument is outside the allocator's ranges or
	// malformed.
	ErrInvalid = errors.New("invalid allocation request")
)

// ConflictError is a reservation refused because Holder already holds
// IP (as a whole) or IP:Port, or because Owner already holds something
// else that the request cannot coexist with.
type ConflictError struct {
	Owner  string
	Holder string
	IP     netip.Addr
	Port   uint16 // 0 when the conflict is about the whole IP
	Reason string
}

func (e *ConflictError) Error() string {
	at := e.IP.String()
	if e.Port != 0 {
		at = netip.AddrPortFrom(e.IP, e.Port).String()
	}
	return fmt.Sprintf("%s for %q: %s held by %q: %s", ErrConflict, e.Owner, at, e.Holder, e.Reason)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Allocation is what one owner holds: Ports on IP (a Service), or the
// whole IP 1:1 (Whole, Ports empty: a headless Service's backing pod).
type Allocation struct {
	IP    netip.Addr
	Ports []uint16
	Whole bool
}

// Allocator hands out global addresses of one cluster's ingress range. It
// is pure (no I/O) and not safe for concurrent use. Callers persist what
// they are given (in API objects) and replay it with Reserve/ReserveIP
// after a restart or failover before allocating anything new.
//
// Port pairs: every owner (a Service, "ns/name") holds its ports on ONE
// ingress IP, all distinct — the invariant that makes the stateless
// reply rules unambiguous (ClusterIP . global port names one pair). New
// owners fill the lowest ingress IP that has enough free ports before the
// next one, lowest free ports first, so allocation is deterministic:
// replaying the same reservations and then allocating gives the same
// answers in any replay order.
//
// Whole IPs (AllocateIP, for headless backing pods "ns/name/podIP") are
// taken from the top of the ingress range down, and only IPs that carry
// no port pair; port pairs never land on an IP held whole.
//
// Every operation costs O(1) amortised in the number of allocations
// (a bitmap per IP with a lowest-free hint; IPs are scanned from the
// lowest one that is not full).
type Allocator struct {
	ips    AddrRange
	ports  PortRange
	words  int       // bitmap words per IP
	slots  []*ipSlot // by index in ips; nil = untouched (all free)
	owners map[string]*Allocation
	// lowOpen: every IP below it is full or held whole.
	lowOpen int
	// highWhole: every IP above it is used (by ports or whole).
	highWhole int
	inUse     int
}

type ipSlot struct {
	used   []uint64 // bit i = port ports.First+i taken
	free   int
	hint   int    // no free port in words before hint
	whole  string // owner holding the whole IP, "" if none
	owners int    // owners holding ports here
}

// NewAllocator returns an allocator of ingress (Layout.Ingress) and
// ports (DefaultPortRange unless the deployment says otherwise).
func NewAllocator(ingress AddrRange, ports PortRange) (*Allocator, error) {
	if !ingress.First.Is4() || !ingress.Last.Is4() || ingress.Last.Less(ingress.First) {
		return nil, fmt.Errorf("%w: ingress range %s", ErrInvalid, ingress)
	}
	if ports.First == 0 || ports.Last < ports.First {
		return nil, fmt.Errorf("%w: port range %s", ErrInvalid, ports)
	}
	n := ingress.Len()
	return &Allocator{
		ips:       ingress,
		ports:     ports,
		words:     (ports.Len() + 63) / 64,
		slots:     make([]*ipSlot, n),
		owners:    map[string]*Allocation{},
		highWhole: n - 1,
	}, nil
}

func (a *Allocator) slot(i int) *ipSlot {
	s := a.slots[i]
	if s == nil {
		s = &ipSlot{used: make([]uint64, a.words), free: a.ports.Len()}
		a.slots[i] = s
	}
	return s
}

func (s *ipSlot) idle() bool { return s == nil || (s.whole == "" && s.owners == 0) }

// Get returns what owner holds.
func (a *Allocator) Get(owner string) (Allocation, bool) {
	al, ok := a.owners[owner]
	if !ok {
		return Allocation{}, false
	}
	return Allocation{IP: al.IP, Ports: slices.Clone(al.Ports), Whole: al.Whole}, true
}

// Owners is the number of owners holding something.
func (a *Allocator) Owners() int { return len(a.owners) }

// IPsInUse is the number of ingress IPs carrying a port pair or held whole.
func (a *Allocator) IPsInUse() int { return a.inUse }

// Usage is how much of an Allocator's range is held.
type Usage struct {
	// IPs is the size of the ingress range; PairIPs of them carry port
	// pairs, WholeIPs are held whole.
	IPs, PairIPs, WholeIPs int
	// Pairs is how many IP:port pairs the range has (IPs × ports per
	// IP: what it holds when no IP is held whole); PairsInUse are held.
	Pairs, PairsInUse int
}

// Usage counts what the allocator holds (O(ingress IPs)).
func (a *Allocator) Usage() Usage {
	u := Usage{IPs: a.ips.Len(), Pairs: a.ips.Len() * a.ports.Len()}
	for _, s := range a.slots {
		switch {
		case s == nil:
		case s.whole != "":
			u.WholeIPs++
		case s.owners > 0:
			u.PairIPs++
			u.PairsInUse += a.ports.Len() - s.free
		}
	}
	return u
}

// Allocate makes owner hold n distinct ports on one ingress IP and returns
// them. An owner that holds k ports already keeps them: k == n returns
// them unchanged, k < n adds n-k ports on the same IP (the held ports
// first, in the order they were given), k > n is refused (release first).
func (a *Allocator) Allocate(owner string, n int) (netip.Addr, []uint16, error) {
	if owner == "" || n < 1 || n > a.ports.Len() {
		return netip.Addr{}, nil, fmt.Errorf("%w: %d ports for %q (range %s)", ErrInvalid, n, owner, a.ports)
	}
	if al, ok := a.owners[owner]; ok {
		switch {
		case al.Whole:
			return netip.Addr{}, nil, &ConflictError{Owner: owner, Holder: owner, IP: al.IP, Reason: "owner holds the whole IP"}
		case len(al.Ports) == n:
			return al.IP, slices.Clone(al.Ports), nil
		case len(al.Ports) > n:
			return netip.Addr{}, nil, fmt.Errorf("%w: %q holds %d ports, asked for %d: release first", ErrInvalid, owner, len(al.Ports), n)
		}
		s := a.slots[a.ips.Index(al.IP)]
		if s.free < n-len(al.Ports) {
			return netip.Addr{}, nil, fmt.Errorf("%w: %s has %d free ports, %q needs %d more", ErrExhausted, al.IP, s.free, owner, n-len(al.Ports))
		}
		for len(al.Ports) < n {
			al.Ports = append(al.Ports, a.takeLowest(s))
		}
		return al.IP, slices.Clone(al.Ports), nil
	}
	for i := a.lowOpen; i < len(a.slots); i++ {
		s := a.slots[i]
		if s != nil && (s.whole != "" || s.free < n) {
			if i == a.lowOpen && (s.whole != "" || s.free == 0) {
				a.lowOpen++
			}
			continue
		}
		s = a.slot(i)
		if s.owners == 0 {
			a.inUse++
		}
		s.owners++
		al := &Allocation{IP: a.ips.At(i), Ports: make([]uint16, 0, n)}
		for range n {
			al.Ports = append(al.Ports, a.takeLowest(s))
		}
		a.owners[owner] = al
		return al.IP, slices.Clone(al.Ports), nil
	}
	return netip.Addr{}, nil, fmt.Errorf("%w: no ingress IP of %s has %d free ports for %q", ErrExhausted, a.ips, n, owner)
}

// takeLowest marks the lowest free port of s used and returns it; s must
// have one.
func (a *Allocator) takeLowest(s *ipSlot) uint16 {
	for w := s.hint; w < len(s.used); w++ {
		if s.used[w] == ^uint64(0) {
			continue
		}
		b := bits.TrailingZeros64(^s.used[w])
		s.used[w] |= 1 << b
		s.free--
		s.hint = w
		return a.ports.First + uint16(w*64+b)
	}
	panic("nat: takeLowest on a full IP") // callers check free first
}

func (a *Allocator) portBit(p uint16) (word int, mask uint64) {
	i := int(p - a.ports.First)
	return i / 64, 1 << (i % 64)
}

// Reserve re-registers ports on ip for owner (replay of persisted
// allocations). Reserving what owner already holds is a no-op; ports
// owner does not hold yet are added, on the same IP only. Conflicts with
// other owners are refused with a *ConflictError and change nothing.
func (a *Allocator) Reserve(owner string, ip netip.Addr, ports []uint16) error {
	if owner == "" || len(ports) == 0 {
		return fmt.Errorf("%w: reserve %v on %s for %q", ErrInvalid, ports, ip, owner)
	}
	if !a.ips.Contains(ip) {
		return fmt.Errorf("%w: %s is not in the ingress range %s", ErrInvalid, ip, a.ips)
	}
	i := a.ips.Index(ip)
	s := a.slots[i]
	al := a.owners[owner]
	if al != nil && (al.Whole || al.IP != ip) {
		return &ConflictError{Owner: owner, Holder: owner, IP: al.IP, Reason: fmt.Sprintf("owner already holds %s, all its ports must share one IP", al.IP)}
	}
	if s != nil && s.whole != "" {
		return &ConflictError{Owner: owner, Holder: s.whole, IP: ip, Reason: "IP held whole"}
	}
	var add []uint16
	for j, p := range ports {
		if p < a.ports.First || p > a.ports.Last {
			return fmt.Errorf("%w: port %d outside %s", ErrInvalid, p, a.ports)
		}
		if slices.Contains(ports[:j], p) {
			return fmt.Errorf("%w: port %d twice for %q", ErrInvalid, p, owner)
		}
		if al != nil && slices.Contains(al.Ports, p) {
			continue
		}
		if w, m := a.portBit(p); s != nil && s.used[w]&m != 0 {
			return &ConflictError{Owner: owner, Holder: a.portHolder(ip, p), IP: ip, Port: p, Reason: "port taken"}
		}
		add = append(add, p)
	}
	if len(add) == 0 {
		return nil
	}
	s = a.slot(i)
	if al == nil {
		al = &Allocation{IP: ip}
		a.owners[owner] = al
		if s.owners == 0 {
			a.inUse++
		}
		s.owners++
	}
	for _, p := range add {
		w, m := a.portBit(p)
		s.used[w] |= m
		s.free--
	}
	al.Ports = append(al.Ports, add...)
	return nil
}

// portHolder finds who holds ip:p (only on the error path: O(owners)).
func (a *Allocator) portHolder(ip netip.Addr, p uint16) string {
	for o, al := range a.owners {
		if al.IP == ip && slices.Contains(al.Ports, p) {
			return o
		}
	}
	return ""
}

// AllocateIP makes owner hold one whole ingress IP that carries no port
// pair and returns it (the highest such IP). An owner holding an IP
// already gets it back.
func (a *Allocator) AllocateIP(owner string) (netip.Addr, error) {
	if owner == "" {
		return netip.Addr{}, fmt.Errorf("%w: empty owner", ErrInvalid)
	}
	if al, ok := a.owners[owner]; ok {
		if !al.Whole {
			return netip.Addr{}, &ConflictError{Owner: owner, Holder: owner, IP: al.IP, Reason: "owner holds ports"}
		}
		return al.IP, nil
	}
	for i := a.highWhole; i >= 0; i-- {
		if !a.slots[i].idle() {
			if i == a.highWhole {
				a.highWhole--
			}
			continue
		}
		a.takeWhole(owner, i)
		return a.ips.At(i), nil
	}
	return netip.Addr{}, fmt.Errorf("%w: no free whole ingress IP in %s for %q", ErrExhausted, a.ips, owner)
}

// ReserveIP re-registers ip as held whole by owner.
func (a *Allocator) ReserveIP(owner string, ip netip.Addr) error {
	if owner == "" || !a.ips.Contains(ip) {
		return fmt.Errorf("%w: reserve whole %s for %q (range %s)", ErrInvalid, ip, owner, a.ips)
	}
	if al, ok := a.owners[owner]; ok {
		if al.Whole && al.IP == ip {
			return nil
		}
		return &ConflictError{Owner: owner, Holder: owner, IP: al.IP, Reason: "owner already holds another allocation"}
	}
	i := a.ips.Index(ip)
	switch s := a.slots[i]; {
	case s == nil || s.idle():
	case s.whole != "":
		return &ConflictError{Owner: owner, Holder: s.whole, IP: ip, Reason: "IP held whole"}
	default:
		return &ConflictError{Owner: owner, Holder: a.anyPortHolder(ip), IP: ip, Reason: "IP carries port pairs"}
	}
	a.takeWhole(owner, i)
	return nil
}

func (a *Allocator) anyPortHolder(ip netip.Addr) string {
	for o, al := range a.owners {
		if al.IP == ip && !al.Whole {
			return o
		}
	}
	return ""
}

func (a *Allocator) takeWhole(owner string, i int) {
	a.slot(i).whole = owner
	a.inUse++
	a.owners[owner] = &Allocation{IP: a.ips.At(i), Whole: true}
}

// Release frees everything owner holds; releasing an unknown owner is a
// no-op. Callers that reuse freed pairs quickly for other Services rely
// on the rules being keyed by the ClusterIP (see README: conntrack).
func (a *Allocator) Release(owner string) {
	al, ok := a.owners[owner]
	if !ok {
		return
	}
	delete(a.owners, owner)
	i := a.ips.Index(al.IP)
	s := a.slots[i]
	if al.Whole {
		s.whole = ""
	} else {
		for _, p := range al.Ports {
			a.freePort(s, p)
		}
		s.owners--
	}
	if s.idle() {
		a.inUse--
	}
	a.lowOpen = min(a.lowOpen, i)
	a.highWhole = max(a.highWhole, i)
}

// ReleasePort frees one port owner holds (a Service lost a port); the
// owner's other ports stay. Freeing its last port releases the owner.
func (a *Allocator) ReleasePort(owner string, port uint16) {
	al, ok := a.owners[owner]
	if !ok || al.Whole {
		return
	}
	j := slices.Index(al.Ports, port)
	if j < 0 {
		return
	}
	if len(al.Ports) == 1 {
		a.Release(owner)
		return
	}
	al.Ports = slices.Delete(al.Ports, j, j+1)
	i := a.ips.Index(al.IP)
	a.freePort(a.slots[i], port)
	a.lowOpen = min(a.lowOpen, i)
}

func (a *Allocator) freePort(s *ipSlot, p uint16) {
	w, m := a.portBit(p)
	s.used[w] &^= m
	s.free++
	s.hint = min(s.hint, w)
}
