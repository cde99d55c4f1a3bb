package ipsec

import (
	"context"
	"crypto/ecdh"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/strongswan/govici/vici"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/cable/internal/keyfile"
	"github.com/causeway-net/causeway/pkg/nodenet"
)

// Driver is the IPsec cable driver.
type Driver struct {
	local   cable.LocalEndpoint
	key     *ecdh.PrivateKey
	log     *slog.Logger
	files   Files
	localID string
	localTS []netip.Prefix
	plugins []string
	esp     []string

	mu    sync.Mutex
	h     *netlink.Handle
	link  netlink.Link
	pid   int
	conns []cable.Connection
}

var _ cable.Driver = (*Driver)(nil)

// New starts (or adopts) the gateway's charon in local.Netns with its
// files under <local.StateDir>/ipsec. The tunnel device is charon's TUN
// (TUNName); local.Interface is not used.
func New(ctx context.Context, local cable.LocalEndpoint) (cable.Driver, error) {
	return newDriver(ctx, local)
}

func newDriver(ctx context.Context, local cable.LocalEndpoint) (*Driver, error) {
	switch {
	case local.ClusterID == "":
		return nil, errors.New("ipsec: cluster ID required (IKE identity)")
	case !local.Address.IsValid():
		return nil, errors.New("ipsec: local address required")
	case local.StateDir == "":
		return nil, errors.New("ipsec: state dir required")
	case local.Port != 0 && local.Port != IKEPort:
		return nil, fmt.Errorf("ipsec: port %d: charon uses UDP %d and %d", local.Port, IKEPort, NATTPort)
	}
	if local.MTU == 0 {
		local.MTU = DefaultMTU
	}
	log := local.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "cable", "driver", Name, "cluster", local.ClusterID)
	raw, err := keyfile.LoadOrCreate(filepath.Join(local.StateDir, KeyFile))
	if err != nil {
		return nil, fmt.Errorf("ipsec: %w", err)
	}
	key, err := ecdh.X25519().NewPrivateKey(raw[:])
	if err != nil {
		return nil, fmt.Errorf("ipsec: private key: %w", err)
	}
	d := &Driver{local: local, key: key, log: log, files: FilesFor(local.StateDir), localID: Identity(local.ClusterID)}
	d.localTS = local.Subnets
	if len(d.localTS) == 0 {
		// The remote narrows "any" to the subnets it accepts from us.
		d.localTS = []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0)}
		if local.Address.Is6() {
			d.localTS = []netip.Prefix{netip.PrefixFrom(netip.IPv6Unspecified(), 0)}
		}
	}
	h, err := netnsx.Handle(local.Netns)
	if err != nil {
		return nil, err
	}
	d.h = h
	plugins, gcm := Plugins(PluginInstalled)
	d.plugins, d.esp = plugins, ESPProposals(gcm)
	pid, adopted, err := ensureCharon(ctx, d.files, local.Netns, plugins, log)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("ipsec: %w", err)
	}
	d.pid = pid
	if adopted {
		// The running charon has the plugins of its start.
		if b, err := os.ReadFile(d.files.Conf); err == nil {
			if p := LoadedPlugins(string(b)); len(p) > 0 {
				d.plugins = p
				d.esp = ESPProposals(HasGCM(p))
			}
		}
	}
	if err := d.ensureTUN(); err != nil {
		if !adopted {
			stopCharon(pid)
		}
		h.Close()
		return nil, fmt.Errorf("ipsec: %w", err)
	}
	return d, nil
}

// ensureTUN waits for charon's TUN and sets its MTU.
func (d *Driver) ensureTUN() error {
	var link netlink.Link
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := d.h.LinkByName(TUNName)
		if err == nil {
			if _, ok := l.(*netlink.Tuntap); !ok {
				return fmt.Errorf("link %s exists and is not charon's tun (%s)", TUNName, l.Type())
			}
			link = l
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("charon's tun device %s: %w", TUNName, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if link.Attrs().MTU != d.local.MTU {
		if err := d.h.LinkSetMTU(link, d.local.MTU); err != nil {
			return fmt.Errorf("set mtu of %s: %w", TUNName, err)
		}
	}
	if err := d.h.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", TUNName, err)
	}
	d.link = link
	return d.ensureSourceAddrs()
}

// ensureSourceAddrs gives every local traffic selector an address of the
// namespace inside it: kernel-libipsec installs a route with such a
// source for each outbound policy and fails the CHILD_SA when it finds
// none (e.g. for the service CIDR, which no interface holds), in either
// family. A selector without one gets SourceAddr (an address Kubernetes
// never allocates to a pod or a ClusterIP) as a host (/32, /128)
// noprefixroute address on the TUN, which goes away with the TUN.
func (d *Driver) ensureSourceAddrs() error {
	addrs, err := d.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	for _, ts := range d.local.Subnets {
		if ts.Bits() == 0 || slices.ContainsFunc(addrs, func(a netlink.Addr) bool {
			ip, ok := netip.AddrFromSlice(a.IP)
			return ok && ts.Contains(ip.Unmap())
		}) {
			continue
		}
		src := SourceAddr(ts)
		a := &netlink.Addr{IPNet: &net.IPNet{IP: src.AsSlice(), Mask: net.CIDRMask(src.BitLen(), src.BitLen())},
			Flags: unix.IFA_F_NOPREFIXROUTE}
		if err := d.h.AddrAdd(d.link, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add source address %s for %s to %s: %w", src, ts, TUNName, err)
		}
		d.log.Info("source address for a local traffic selector", "subnet", ts, "addr", src, "dev", TUNName)
	}
	return nil
}

// Name implements cable.Driver.
func (d *Driver) Name() string { return Name }

// PublicKey implements cable.Driver: the X25519 public key each pair's
// pre-shared key is derived from (DerivePSK).
func (d *Driver) PublicKey() cable.Key { return cable.Key(d.key.PublicKey().Bytes()) }

// Pid is the pid of the charon serving this driver.
func (d *Driver) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pid
}

// Files returns the driver's file layout.
func (d *Driver) Files() Files { return d.files }

// peers resolves the validated connections into what is loaded into
// charon, rejecting connections whose public key yields no pre-shared key
// or with an endpoint of the other address family.
func (d *Driver) peers(valid []cable.Connection) ([]Peer, []cable.Connection, []error) {
	var errs []error
	var out []Peer
	var ok []cable.Connection
	for _, c := range valid {
		if c.Endpoint.Addr().Is4() != d.local.Address.Is4() {
			errs = append(errs, &cable.ValidationError{ClusterID: c.ClusterID,
				Reason: fmt.Sprintf("endpoint %s and local address %s differ in family", c.Endpoint, d.local.Address)})
			continue
		}
		psk, err := DerivePSK(d.key, c.PublicKey, d.local.ClusterID, c.ClusterID)
		if err != nil {
			errs = append(errs, &cable.ValidationError{ClusterID: c.ClusterID, Reason: err.Error()})
			continue
		}
		out = append(out, Peer{ClusterID: c.ClusterID, Remote: c.Endpoint, LocalTS: d.localTS,
			RemoteTS: c.Subnets, PSK: psk, ESP: d.esp})
		ok = append(ok, c)
	}
	return out, ok, errs
}

// Set implements cable.Driver. Connections whose configuration (and key)
// is unchanged are left alone with their SAs; changed ones are unloaded,
// their SAs terminated, and loaded again; removed ones are unloaded and
// terminated.
func (d *Driver) Set(ctx context.Context, conns []cable.Connection) error {
	valid, verr := cable.Validate(conns, cable.Requirements{PublicKey: true})
	peers, valid, perrs := d.peers(valid)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return errors.New("ipsec: driver closed")
	}
	if err := d.apply(ctx, peers); err != nil {
		return fmt.Errorf("ipsec: %w", err)
	}
	d.conns = valid
	return errors.Join(append(perrs, verr)...)
}

func (d *Driver) apply(ctx context.Context, peers []Peer) error {
	s, err := session(d.files)
	if err != nil {
		return err
	}
	defer s.Close()
	loaded, err := d.loadedConns(ctx, s)
	if err != nil {
		return err
	}
	db := d.readDB()
	active := map[string]bool{} // connections with an IKE_SA (up or coming up)
	sas, err := listSAs(ctx, s)
	if err != nil {
		return err
	}
	for _, sa := range sas {
		// An IKE_SA without a CHILD_SA (the peer refused or could not
		// install it) is initiated again: initiate reuses the IKE_SA.
		if sa.State == "CONNECTING" || (sa.State == "ESTABLISHED" && sa.ChildInstalled) {
			active[sa.Conn] = true
		}
	}
	want := map[string]bool{}
	var errs []error
	for _, p := range peers {
		name := ConnName(p.ClusterID)
		want[name] = true
		fp := p.Fingerprint(d.localID)
		if loaded[name] && db[name] == fp {
			if !active[name] {
				d.initiate(ctx, s, name)
			}
			continue
		}
		if loaded[name] {
			d.log.Info("connection changed: reloading", "peer", p.ClusterID)
			d.unload(ctx, s, name)
		}
		if err := d.load(ctx, s, p); err != nil {
			errs = append(errs, err)
			delete(db, name)
			continue
		}
		db[name] = fp
		d.log.Info("loaded connection", "peer", p.ClusterID, "remote", p.Remote, "local_ts", p.LocalTS, "remote_ts", p.RemoteTS)
		d.initiate(ctx, s, name)
	}
	for name := range loaded {
		if !want[name] {
			d.unload(ctx, s, name)
			delete(db, name)
			d.log.Info("removed connection", "conn", name)
		}
	}
	for name := range db {
		if !want[name] {
			delete(db, name)
		}
	}
	if err := d.writeDB(db); err != nil {
		errs = append(errs, err)
	}
	idx := d.link.Attrs().Index
	var rs []nodenet.Route
	for _, p := range peers {
		if !want[ConnName(p.ClusterID)] || db[ConnName(p.ClusterID)] == "" {
			continue
		}
		for _, sub := range p.RemoteTS {
			rs = append(rs, nodenet.Route{Dst: sub, Link: idx})
		}
	}
	if _, err := nodenet.SyncRoutes(d.h, d.local.RouteOwner(idx), rs); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// loadedConns returns the names of our connections loaded in charon.
func (d *Driver) loadedConns(ctx context.Context, s *vici.Session) (map[string]bool, error) {
	m, err := s.Call(ctx, "get-conns", nil)
	if err != nil {
		return nil, fmt.Errorf("get-conns: %w", err)
	}
	out := map[string]bool{}
	names, _ := m.Get("conns").([]string)
	for _, n := range names {
		if strings.HasPrefix(n, "cw-") {
			out[n] = true
		}
	}
	return out, nil
}

func (d *Driver) load(ctx context.Context, s *vici.Session, p Peer) error {
	sh, err := SharedMessage(d.localID, p)
	if err != nil {
		return err
	}
	if _, err := s.Call(ctx, "load-shared", sh); err != nil {
		return fmt.Errorf("load-shared for %s: %w", p.ClusterID, err)
	}
	cm, err := ConnMessage(d.localID, d.local.Address, p)
	if err != nil {
		return err
	}
	if _, err := s.Call(ctx, "load-conn", cm); err != nil {
		return fmt.Errorf("load-conn for %s: %w", p.ClusterID, err)
	}
	return nil
}

// unload removes a connection, its key and its SAs (errors are logged:
// the SAs or the key may already be gone).
func (d *Driver) unload(ctx context.Context, s *vici.Session, name string) {
	msg := vici.NewMessage()
	msg.Set("name", name)
	if _, err := s.Call(ctx, "unload-conn", msg); err != nil {
		d.log.Warn("unload-conn", "conn", name, "err", err)
	}
	term := vici.NewMessage()
	term.Set("ike", name)
	term.Set("force", "yes")
	term.Set("timeout", "-1")
	if _, err := s.Call(ctx, "terminate", term); err != nil {
		d.log.Debug("terminate", "conn", name, "err", err)
	}
	sh := vici.NewMessage()
	sh.Set("id", name)
	if _, err := s.Call(ctx, "unload-shared", sh); err != nil {
		d.log.Debug("unload-shared", "conn", name, "err", err)
	}
}

// initiate starts the IKE_SA and CHILD_SA without waiting for them. Both
// sides initiate when a connection is loaded: the first fails while the
// peer does not know us yet, the second succeeds (duplicates are replaced,
// unique=replace). A Set also initiates loaded connections without an
// IKE_SA. Once up, dead peer detection and close_action re-initiate.
func (d *Driver) initiate(ctx context.Context, s *vici.Session, name string) {
	msg := vici.NewMessage()
	msg.Set("child", name)
	msg.Set("ike", name)
	msg.Set("timeout", "-1")
	msg.Set("init-limits", "no")
	if _, err := s.Call(ctx, "initiate", msg); err != nil {
		d.log.Warn("initiate", "conn", name, "err", err)
	}
}

func (d *Driver) readDB() map[string]string {
	db := map[string]string{}
	b, err := os.ReadFile(d.files.ConnsDB)
	if err == nil {
		json.Unmarshal(b, &db)
	}
	return db
}

func (d *Driver) writeDB(db map[string]string) error {
	b, err := json.Marshal(db)
	if err != nil {
		return err
	}
	return writeFileAtomic(d.files.ConnsDB, b, 0o600)
}

// SAs lists charon's IKE_SAs.
func (d *Driver) SAs(ctx context.Context) ([]SA, error) {
	s, err := session(d.files)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return listSAs(ctx, s)
}

func listSAs(ctx context.Context, s *vici.Session) ([]SA, error) {
	var out []SA
	for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
		if err != nil {
			return nil, fmt.Errorf("list-sas: %w", err)
		}
		sas, err := ParseSA(m)
		if err != nil {
			return nil, err
		}
		out = append(out, sas...)
	}
	return out, nil
}

// Connections implements cable.Driver from list-sas: connected when an
// IKE_SA of the connection is ESTABLISHED with an INSTALLED CHILD_SA
// (otherwise connecting); LastHandshake is when that IKE_SA was
// established; bytes and packets are summed over the connection's
// CHILD_SAs (they restart from zero on rekeying).
func (d *Driver) Connections(ctx context.Context) ([]cable.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return nil, errors.New("ipsec: driver closed")
	}
	sas, err := d.SAs(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []cable.Status
	for _, c := range d.conns {
		st := cable.Status{ClusterID: c.ClusterID, Endpoint: c.Endpoint, Subnets: c.Subnets}
		for _, sa := range sas {
			if sa.Conn != ConnName(c.ClusterID) {
				continue
			}
			st.RxBytes += sa.BytesIn
			st.TxBytes += sa.BytesOut
			st.RxPackets += sa.PacketsIn
			st.TxPackets += sa.PacketsOut
			if sa.State == "ESTABLISHED" && sa.ChildInstalled {
				st.Connected = true
				if t := now.Add(-sa.Established); t.After(st.LastHandshake) {
					st.LastHandshake = t
				}
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b cable.Status) int { return strings.Compare(a.ClusterID, b.ClusterID) })
	return out, nil
}

// removeCharonRouting deletes rules for CharonTable and its routes.
func (d *Driver) removeCharonRouting() error {
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := d.h.RuleList(fam)
		if err != nil {
			errs = append(errs, fmt.Errorf("list rules: %w", err))
			continue
		}
		for _, r := range rules {
			if r.Table == CharonTable {
				if err := d.h.RuleDel(&r); err != nil {
					errs = append(errs, fmt.Errorf("delete rule for table %d: %w", CharonTable, err))
				}
			}
		}
		rs, err := d.h.RouteListFiltered(fam, &netlink.Route{Table: CharonTable}, netlink.RT_FILTER_TABLE)
		if err != nil {
			errs = append(errs, fmt.Errorf("list routes of table %d: %w", CharonTable, err))
			continue
		}
		for _, r := range rs {
			if err := d.h.RouteDel(&r); err != nil {
				errs = append(errs, fmt.Errorf("delete route %s: %w", r.Dst, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Close implements cable.Driver: charon keeps running with its
// connections and SAs (and the TUN and routes stay), so traffic is not
// interrupted; a new driver with the same state dir adopts it.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h != nil {
		d.h.Close()
		d.h = nil
	}
	return nil
}

// Cleanup implements cable.Driver: charon is stopped (it deletes its SAs,
// notifying the peers, and its TUN goes with it, taking the routes), and
// <StateDir>/ipsec is removed.
func (d *Driver) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h == nil {
		return errors.New("ipsec: driver closed")
	}
	var errs []error
	if _, err := nodenet.SyncRoutes(d.h, d.local.RouteOwner(d.link.Attrs().Index), nil); err != nil {
		errs = append(errs, err)
	}
	pid := charonPID(d.files)
	if pid == 0 {
		pid = d.pid
	}
	if err := stopCharon(pid); err != nil {
		errs = append(errs, err)
	}
	// charon removes its rule and routes on SIGTERM; after a crash
	// (SIGKILL) they would stay: remove what is left.
	if err := d.removeCharonRouting(); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(d.files.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", d.files.Dir, err))
	}
	d.h.Close()
	d.h = nil
	d.conns = nil
	return errors.Join(errs...)
}
