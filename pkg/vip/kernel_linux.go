package vip

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/bpf"
)

// Default map sizes.
const (
	DefaultMaxServices   = 65536
	DefaultMaxBackends   = 262144
	DefaultMaxReverseNAT = 262144
	DefaultMaxAffinity   = 262144
)

// Config says where the kernel datapath lives on the node.
type Config struct {
	// PinDir is a directory on a bpffs mount holding the pinned maps and
	// links, e.g. /sys/fs/bpf/causeway/vip (/sys/fs/bpf/<lab prefix>/vip in
	// the lab). It is created if missing; it must belong to one Table.
	PinDir string
	// CgroupPath is the cgroup v2 directory the programs are attached to;
	// they apply to every process in it and below (the cgroup v2 root on a
	// real node, the node's cgroup in the lab).
	CgroupPath string
	// Map sizes; zero means the Default* value. A restart must use the same
	// sizes as the pinned maps (or Cleanup first).
	MaxServices   uint32
	MaxBackends   uint32
	MaxReverseNAT uint32
	MaxAffinity   uint32 // entries of vip_affinity (client, service) → backend
	// Logger; nil discards.
	Logger *slog.Logger
}

// Names of the pins under Config.PinDir.
const (
	pinServices = bpf.VipMapVipServices // "vip_services"
	pinBackends = bpf.VipMapVipBackends // "vip_backends"
	pinRevNAT   = bpf.VipMapVipRevNat   // "vip_rev_nat"
	pinPeers    = bpf.VipMapVipPeers    // "vip_peers"
	pinAffinity = bpf.VipMapVipAffinity // "vip_affinity"
	pinGone     = bpf.VipMapVipGone     // "vip_gone"
)

// hook is one program and where it attaches. Reverse translations attach
// first, so a forward translation is never visible without its reverse.
type hook struct {
	pin    string // link pin name under PinDir
	attach ebpf.AttachType
	prog   func(*bpf.VipObjects) *ebpf.Program
}

var hooks = []hook{
	{"link_getpeername4", ebpf.AttachCgroupInet4GetPeername, func(o *bpf.VipObjects) *ebpf.Program { return o.VipGetpeername4 }},
	{"link_getpeername6", ebpf.AttachCgroupInet6GetPeername, func(o *bpf.VipObjects) *ebpf.Program { return o.VipGetpeername6 }},
	{"link_recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, func(o *bpf.VipObjects) *ebpf.Program { return o.VipRecvmsg4 }},
	{"link_recvmsg6", ebpf.AttachCGroupUDP6Recvmsg, func(o *bpf.VipObjects) *ebpf.Program { return o.VipRecvmsg6 }},
	{"link_sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, func(o *bpf.VipObjects) *ebpf.Program { return o.VipSendmsg4 }},
	{"link_sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, func(o *bpf.VipObjects) *ebpf.Program { return o.VipSendmsg6 }},
	{"link_connect4", ebpf.AttachCGroupInet4Connect, func(o *bpf.VipObjects) *ebpf.Program { return o.VipConnect4 }},
	{"link_connect6", ebpf.AttachCGroupInet6Connect, func(o *bpf.VipObjects) *ebpf.Program { return o.VipConnect6 }},
}

// Kernel is the Table backed by the eBPF programs of bpf/vip.c.
type Kernel struct {
	cfg    Config
	log    *slog.Logger
	limits Limits

	mu    sync.Mutex
	objs  bpf.VipObjects
	links []link.Link
	state mapState // what the maps hold, unless dirty
	dirty bool     // a Set failed half-way: re-read the maps first
	last  OpCounts
	// gone are (VIP, backend) pairs removed from UDP services whose
	// connected sockets are not terminated yet (a Set failed there).
	gone           []udpPeer
	lastTerminated int
}

var _ Table = (*Kernel)(nil)

// Open loads the programs, creates or adopts the pinned maps under
// cfg.PinDir, and attaches the programs to cfg.CgroupPath. Pinned links from
// an earlier run are adopted and switched to the new programs atomically
// (BPF_LINK_UPDATE), so established connections and the translation of new
// ones continue without a gap; the maps keep their content, which Open reads
// back as the starting point of the next Set.
func Open(cfg Config) (*Kernel, error) {
	if cfg.PinDir == "" || cfg.CgroupPath == "" {
		return nil, errors.New("open vip datapath: PinDir and CgroupPath are required")
	}
	if cfg.MaxServices == 0 {
		cfg.MaxServices = DefaultMaxServices
	}
	if cfg.MaxBackends == 0 {
		cfg.MaxBackends = DefaultMaxBackends
	}
	if cfg.MaxReverseNAT == 0 {
		cfg.MaxReverseNAT = DefaultMaxReverseNAT
	}
	if cfg.MaxAffinity == 0 {
		cfg.MaxAffinity = DefaultMaxAffinity
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	k := &Kernel{
		cfg:    cfg,
		log:    log.With("component", "vip"),
		limits: Limits{Services: cfg.MaxServices, Backends: cfg.MaxBackends},
	}
	if err := requireBPFFS(cfg.PinDir); err != nil {
		return nil, err
	}
	spec, err := bpf.LoadVip()
	if err != nil {
		return nil, fmt.Errorf("load vip spec: %w", err)
	}
	spec.Maps[pinServices].MaxEntries = cfg.MaxServices
	spec.Maps[pinBackends].MaxEntries = cfg.MaxBackends
	spec.Maps[pinRevNAT].MaxEntries = cfg.MaxReverseNAT
	spec.Maps[pinAffinity].MaxEntries = cfg.MaxAffinity
	for _, m := range spec.Maps {
		m.Pinning = ebpf.PinByName
	}
	err = spec.LoadAndAssign(&k.objs, &ebpf.CollectionOptions{Maps: ebpf.MapOptions{PinPath: cfg.PinDir}})
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		return nil, fmt.Errorf("load vip programs: maps pinned in %s have another layout or size (clean up first): %w", cfg.PinDir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("load vip programs: %w", err)
	}
	if k.state, err = readState(&k.objs); err != nil {
		_ = k.objs.Close()
		return nil, err
	}
	if err := k.attach(); err != nil {
		_ = k.Close()
		return nil, err
	}
	k.log.Info("vip datapath ready", "pinDir", cfg.PinDir, "cgroup", cfg.CgroupPath,
		"adoptedServices", len(k.state.services), "adoptedBackends", len(k.state.backends))
	return k, nil
}

// requireBPFFS creates dir and checks that it is on a bpffs mount.
func requireBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create pin directory: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if st.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("pin directory %s is not on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf)", dir)
	}
	return nil
}

// attach adopts or creates the cgroup links, one per hook.
func (k *Kernel) attach() error {
	var cg unix.Stat_t
	if err := unix.Stat(k.cfg.CgroupPath, &cg); err != nil {
		return fmt.Errorf("stat cgroup %s: %w", k.cfg.CgroupPath, err)
	}
	for _, h := range hooks {
		prog := h.prog(&k.objs)
		path := filepath.Join(k.cfg.PinDir, h.pin)
		l, err := link.LoadPinnedLink(path, nil)
		switch {
		case err == nil:
			info, ierr := l.Info()
			if ierr == nil && info.Cgroup() != nil && info.Cgroup().CgroupId == cg.Ino && uint32(info.Cgroup().AttachType) == uint32(h.attach) {
				if err := l.Update(prog); err != nil {
					_ = l.Close()
					return fmt.Errorf("update pinned link %s: %w", path, err)
				}
				k.links = append(k.links, l)
				k.log.Debug("adopted link", "pin", path)
				continue
			}
			// Attached elsewhere (another cgroup was configured): detach it.
			k.log.Info("replacing pinned link attached to another cgroup", "pin", path)
			if err := l.Unpin(); err != nil {
				_ = l.Close()
				return fmt.Errorf("unpin stale link %s: %w", path, err)
			}
			_ = l.Close()
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("load pinned link %s: %w", path, err)
		}
		l, err = link.AttachCgroup(link.CgroupOptions{Path: k.cfg.CgroupPath, Attach: h.attach, Program: prog})
		if err != nil {
			return fmt.Errorf("attach %s to %s: %w", prog, k.cfg.CgroupPath, err)
		}
		if err := l.Pin(path); err != nil {
			_ = l.Close()
			return fmt.Errorf("pin link %s: %w", path, err)
		}
		k.links = append(k.links, l)
	}
	return nil
}

// Set implements Table.
func (k *Kernel) Set(ctx context.Context, desired map[ServiceKey]Service) error {
	if err := Validate(desired, k.limits); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.objs.VipServices == nil {
		return errors.New("vip datapath is closed")
	}
	if k.dirty {
		st, err := readState(&k.objs)
		if err != nil {
			return err
		}
		k.state, k.dirty = st, false
	}
	start := time.Now()
	o := plan(k.state, desired)
	if o.empty() {
		// Nothing to write; the model still learns what each service it
		// found right was given (a state read from the kernel knows none).
		applyOps(k.state, o)
		if len(k.gone) == 0 {
			return nil
		}
	} else {
		gone := goneUDP(k.state, o)
		k.dirty = true // until every write below succeeded
		if err := k.apply(ctx, o); err != nil {
			return err
		}
		applyOps(k.state, o)
		k.dirty = false
		k.last = countOps(o)
		k.gone = append(k.gone, gone...)
	}
	// Only now, with the backends out of the maps: a terminated socket's
	// application reconnects to a backend that stays.
	n, err := k.terminateUDP(k.gone)
	if err != nil {
		return fmt.Errorf("terminate UDP sockets connected to removed backends: %w", err)
	}
	k.gone, k.lastTerminated = nil, n
	k.log.Debug("vip maps synced", "services", len(k.state.services), "ops", k.last.Total(),
		"terminatedUDP", n, "duration", time.Since(start))
	return nil
}

// apply writes o in its order, one batch per step.
func (k *Kernel) apply(ctx context.Context, o ops) error {
	if len(o.putBackends) > 0 {
		keys := make([]bpf.VipBackendKey, 0, len(o.putBackends))
		vals := make([]bpf.VipSlot, 0, len(o.putBackends))
		for key, sl := range o.putBackends {
			keys = append(keys, bpf.VipBackendKey{Id: key.ID, Slot: key.Slot})
			vals = append(vals, toSlot(sl))
		}
		if _, err := k.objs.VipBackends.BatchUpdate(keys, vals, nil); err != nil {
			return fmt.Errorf("write %d backends: %w", len(keys), err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(o.putServices) > 0 {
		keys := make([]bpf.VipSvcKey, 0, len(o.putServices))
		vals := make([]bpf.VipSvc, 0, len(o.putServices))
		for key, s := range o.putServices {
			keys = append(keys, toSvcKey(key))
			vals = append(vals, bpf.VipSvc{Count: s.Count, Id: s.ID, Affinity: s.Affinity})
		}
		if _, err := k.objs.VipServices.BatchUpdate(keys, vals, nil); err != nil {
			return fmt.Errorf("write %d services: %w", len(keys), err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(o.deleteServices) > 0 {
		keys := make([]bpf.VipSvcKey, len(o.deleteServices))
		for i, key := range o.deleteServices {
			keys[i] = toSvcKey(key)
		}
		if _, err := k.objs.VipServices.BatchDelete(keys, nil); err != nil {
			return fmt.Errorf("delete %d services: %w", len(keys), err)
		}
	}
	if len(o.deleteBackends) > 0 {
		keys := make([]bpf.VipBackendKey, len(o.deleteBackends))
		for i, key := range o.deleteBackends {
			keys[i] = bpf.VipBackendKey{Id: key.ID, Slot: key.Slot}
		}
		if _, err := k.objs.VipBackends.BatchDelete(keys, nil); err != nil {
			return fmt.Errorf("delete %d backends: %w", len(keys), err)
		}
	}
	return nil
}

// LastTerminated returns how many connected UDP sockets the last Set that
// removed backends terminated.
func (k *Kernel) LastTerminated() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lastTerminated
}

// goneBatch is how many pairs vip_gone holds (its max_entries).
const goneBatch = 65536

// terminateUDP terminates every UDP socket connected through a VIP to a
// backend in gone (vip_destroy_udp), in every network namespace of the
// processes in the cgroup, and returns how many it terminated.
func (k *Kernel) terminateUDP(gone []udpPeer) (int, error) {
	if len(gone) == 0 {
		return 0, nil
	}
	l, err := link.AttachIter(link.IterOptions{Program: k.objs.VipDestroyUdp})
	if err != nil {
		return 0, fmt.Errorf("attach UDP socket iterator: %w", err)
	}
	defer l.Close()
	namespaces, err := cgroupNetNS(k.cfg.CgroupPath)
	if err != nil {
		return 0, err
	}
	total := 0
	for len(gone) > 0 {
		batch := gone[:min(len(gone), goneBatch)]
		gone = gone[len(batch):]
		keys := make([]bpf.VipPeer, len(batch))
		vals := make([]uint8, len(batch))
		for i, g := range batch {
			keys[i] = bpf.VipPeer{Vip: toEndpoint(g.VIP.Addr(), g.VIP.Port()), Backend: toEndpoint(g.Backend.Addr(), g.Backend.Port())}
			vals[i] = 1
		}
		if _, err := k.objs.VipGone.BatchUpdate(keys, vals, nil); err != nil {
			return total, fmt.Errorf("write %d pairs to vip_gone: %w", len(keys), err)
		}
		for _, ns := range namespaces {
			n, err := iterateIn(l, ns)
			total += n
			if err != nil {
				_, _ = k.objs.VipGone.BatchDelete(keys, nil)
				return total, err
			}
		}
		if _, err := k.objs.VipGone.BatchDelete(keys, nil); err != nil {
			return total, fmt.Errorf("clear vip_gone: %w", err)
		}
	}
	if total > 0 {
		k.log.Info("terminated UDP sockets connected to removed backends", "sockets", total, "namespaces", len(namespaces))
	}
	return total, nil
}

// cgroupNetNS returns one /proc/<pid>/ns/net path per network namespace of
// the processes in cgroup dir and below (the sockets the hooks translated).
func cgroupNetNS(dir string) ([]string, error) {
	seen := map[uint64]bool{}
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // a cgroup removed meanwhile
		}
		if err != nil || !d.IsDir() {
			return err
		}
		procs, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read processes of cgroup %s: %w", path, err)
		}
		for _, pid := range strings.Fields(string(procs)) {
			ns := "/proc/" + pid + "/ns/net"
			var st unix.Stat_t
			if unix.Stat(ns, &st) != nil {
				continue // exited
			}
			if !seen[st.Ino] {
				seen[st.Ino] = true
				out = append(out, ns)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list network namespaces of cgroup %s: %w", dir, err)
	}
	return out, nil
}

// iterateIn runs iterator l over the UDP sockets of network namespace ns
// (the iterator sees the namespace it is opened in) and returns the bytes
// it wrote: one per terminated socket.
func iterateIn(l *link.Iter, ns string) (int, error) {
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		rd, back, err := openIn(l, ns)
		if back {
			runtime.UnlockOSThread()
		} // else the thread is stuck in ns: the runtime ends it with the goroutine
		if err != nil || rd == nil {
			res <- result{0, err}
			return
		}
		defer rd.Close()
		n, err := io.Copy(io.Discard, rd)
		if err != nil {
			err = fmt.Errorf("run UDP socket iterator in %s: %w", ns, err)
		}
		res <- result{int(n), err}
	}()
	r := <-res
	return r.n, r.err
}

// openIn opens l in network namespace ns on the calling (locked) thread and
// returns to the thread's namespace; back reports whether it did. A
// namespace whose process exited meanwhile gives nil, true, nil.
func openIn(l *link.Iter, ns string) (rd io.ReadCloser, back bool, err error) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, true, fmt.Errorf("open own network namespace: %w", err)
	}
	defer self.Close()
	target, err := os.Open(ns)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return nil, true, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("open network namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("enter network namespace %s: %w", ns, err)
	}
	rd, err = l.Open()
	if berr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); berr != nil {
		if rd != nil {
			_ = rd.Close()
		}
		return nil, false, fmt.Errorf("return from network namespace %s: %w", ns, berr)
	}
	if err != nil {
		return nil, true, fmt.Errorf("open UDP socket iterator in %s: %w", ns, err)
	}
	return rd, true, nil
}

// Services returns what the maps implement now, read from the kernel,
// backends in slot order.
func (k *Kernel) Services() (map[ServiceKey]Service, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.objs.VipServices == nil {
		return nil, errors.New("vip datapath is closed")
	}
	st, err := readState(&k.objs)
	if err != nil {
		return nil, err
	}
	return st.desired(), nil
}

// Limits implements Table: the maps' sizes (Config.MaxServices,
// MaxBackends).
func (k *Kernel) Limits() Limits { return k.limits }

// Usage implements Table: the entries of vip_services and vip_backends
// as the last Set that succeeded left them (after a Set that failed
// half-way, until the next one re-reads the maps, what they held before
// it).
func (k *Kernel) Usage() Limits {
	k.mu.Lock()
	defer k.mu.Unlock()
	return Limits{Services: uint32(len(k.state.services)), Backends: uint32(len(k.state.backends))}
}

// LastOps returns the map writes of the last Set that changed anything.
func (k *Kernel) LastOps() OpCounts {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.last
}

// Close releases the programs, maps and links of this process. The links and
// maps stay pinned: the datapath keeps translating, and the next Open adopts
// it.
func (k *Kernel) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var errs []error
	for _, l := range k.links {
		errs = append(errs, l.Close())
	}
	k.links = nil
	errs = append(errs, k.objs.Close())
	k.objs = bpf.VipObjects{}
	return errors.Join(errs...)
}

// Cleanup closes k, detaches the programs and removes every pin (see the
// package function Cleanup).
func (k *Kernel) Cleanup() error {
	return errors.Join(k.Close(), Cleanup(k.cfg.PinDir))
}

// Cleanup detaches the programs pinned under pinDir and removes the pins and
// the directory, without needing an open Kernel (a daemon's --cleanup, or
// uninstall). It is a no-op when pinDir does not exist. Sockets connected
// through a VIP keep working; after Cleanup new connections to a VIP are no
// longer translated.
func Cleanup(pinDir string) error {
	if _, err := os.Stat(pinDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, h := range hooks {
		path := filepath.Join(pinDir, h.pin)
		l, err := link.LoadPinnedLink(path, nil)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			// Not a link we can load: remove the pin anyway.
			errs = append(errs, fmt.Errorf("load pinned link %s: %w", path, err), removePin(path))
			continue
		}
		if err := l.Unpin(); err != nil {
			errs = append(errs, fmt.Errorf("unpin %s: %w", path, err))
		}
		errs = append(errs, l.Close()) // last reference: detaches
	}
	for _, name := range []string{pinServices, pinBackends, pinRevNAT, pinPeers, pinAffinity, pinGone} {
		errs = append(errs, removePin(filepath.Join(pinDir, name)))
	}
	if err := os.Remove(pinDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove pin directory: %w", err))
	}
	return errors.Join(errs...)
}

func removePin(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove pin %s: %w", path, err)
	}
	return nil
}

// readState reads vip_services and vip_backends.
func readState(objs *bpf.VipObjects) (mapState, error) {
	st := newMapState()
	var sk bpf.VipSvcKey
	var sv bpf.VipSvc
	it := objs.VipServices.Iterate()
	for it.Next(&sk, &sv) {
		st.services[fromSvcKey(sk)] = service{ID: sv.Id, Count: sv.Count, Affinity: sv.Affinity}
	}
	if err := it.Err(); err != nil {
		return mapState{}, fmt.Errorf("read vip_services: %w", err)
	}
	var bk bpf.VipBackendKey
	var bv bpf.VipSlot
	it = objs.VipBackends.Iterate()
	for it.Next(&bk, &bv) {
		st.backends[backendKey{ID: bk.Id, Slot: bk.Slot}] = fromSlot(bv)
	}
	if err := it.Err(); err != nil {
		return mapState{}, fmt.Errorf("read vip_backends: %w", err)
	}
	return st, nil
}

// Map layout conversions: addresses and ports in network byte order.

func htons(p uint16) uint16 { return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, p)) }

func ntohs(p uint16) uint16 { return binary.BigEndian.Uint16(binary.NativeEndian.AppendUint16(nil, p)) }

// addrWords is a as the maps hold it: 16 bytes, an IPv4 address
// IPv4-mapped, as four words in memory order.
func addrWords(a netip.Addr) [4]uint32 {
	b := a.As16() // IPv4: ::ffff:a.b.c.d
	var w [4]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

// wordsAddr is the inverse of addrWords: an IPv4-mapped address is
// returned as IPv4.
func wordsAddr(w [4]uint32) netip.Addr {
	var b [16]byte
	for i, v := range w {
		binary.NativeEndian.PutUint32(b[4*i:], v)
	}
	return netip.AddrFrom16(b).Unmap()
}

func toEndpoint(a netip.Addr, port uint16) bpf.VipEndpoint {
	return bpf.VipEndpoint{Addr: addrWords(a), Port: htons(port)}
}

func fromEndpoint(v bpf.VipEndpoint) (netip.Addr, uint16) { return wordsAddr(v.Addr), ntohs(v.Port) }

func toSlot(sl slot) bpf.VipSlot {
	return bpf.VipSlot{
		Backend:   toEndpoint(sl.Backend.Addr, sl.Backend.Port),
		Alias:     toEndpoint(sl.Alias.Addr, sl.Alias.Port),
		Threshold: sl.Threshold,
		Weight:    sl.Backend.Weight,
		AliasSlot: sl.AliasSlot,
	}
}

func fromSlot(v bpf.VipSlot) slot {
	addr, port := fromEndpoint(v.Backend)
	alias, aliasPort := fromEndpoint(v.Alias)
	return slot{
		Backend:   Backend{Addr: addr, Port: port, Weight: v.Weight},
		Alias:     Backend{Addr: alias, Port: aliasPort},
		Threshold: v.Threshold,
		AliasSlot: v.AliasSlot,
	}
}

func toSvcKey(k ServiceKey) bpf.VipSvcKey {
	return bpf.VipSvcKey{Addr: addrWords(k.VIP), Port: htons(k.Port), Proto: uint8(k.Proto)}
}

func fromSvcKey(k bpf.VipSvcKey) ServiceKey {
	return ServiceKey{VIP: wordsAddr(k.Addr), Port: ntohs(k.Port), Proto: Proto(k.Proto)}
}
