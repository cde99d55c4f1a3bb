package inspect

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/causeway-net/causeway/pkg/nodeview"
	"github.com/causeway-net/causeway/pkg/vip"
)

// sysctls are the settings a node view reports.
var sysctls = []string{
	"net.ipv4.ip_forward",
	"net.ipv6.conf.all.forwarding",
	"net.ipv4.conf.all.rp_filter",
}

// Read returns the view of the node the calling process runs on (its
// network namespace), with the VIP maps pinned in vipPinDir. A part
// that cannot be read is named in the view's Errors; the rest is still
// read.
func Read(vipPinDir string) *nodeview.Node {
	n := &nodeview.Node{Time: time.Now().UTC(), Sysctls: map[string]string{}}
	fail := func(what string, err error) {
		n.Errors = append(n.Errors, fmt.Sprintf("%s: %v", what, err))
	}
	if h, err := os.Hostname(); err == nil {
		n.Hostname = h
	}
	for _, s := range sysctls {
		b, err := os.ReadFile(filepath.Join("/proc/sys", strings.ReplaceAll(s, ".", "/")))
		if err != nil {
			fail("sysctl "+s, err)
			continue
		}
		n.Sysctls[s] = strings.TrimSpace(string(b))
	}
	names, err := readLinks(n)
	if err != nil {
		fail("links", err)
	}
	if err := readRoutes(n, names); err != nil {
		fail("routes", err)
	}
	if err := readRules(n); err != nil {
		fail("rules", err)
	}
	if err := readNeighbours(n, names); err != nil {
		fail("neighbours", err)
	}
	if err := readWireGuard(n, names); err != nil {
		fail("wireguard", err)
	}
	if err := readXfrm(n); err != nil {
		fail("ipsec", err)
	}
	if err := readNft(n); err != nil {
		fail("nftables", err)
	}
	for _, family := range []string{"ipv4", "ipv6"} {
		if err := readIptables(n, family); err != nil {
			fail("iptables "+family, err)
		}
	}
	if err := readVIPs(n, vipPinDir); err != nil {
		fail("vip maps", err)
	}
	return n
}

// readLinks fills n.Links and returns the link names by index.
func readLinks(n *nodeview.Node) (map[int]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	for _, l := range links {
		a := l.Attrs()
		v := nodeview.Link{Name: a.Name, Kind: l.Type(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0, Master: names[a.MasterIndex]}
		if s := a.Statistics; s != nil {
			v.RxBytes, v.TxBytes, v.RxPackets, v.TxPackets = s.RxBytes, s.TxBytes, s.RxPackets, s.TxPackets
		}
		if vx, ok := l.(*netlink.Vxlan); ok {
			v.VNI, v.Port = vx.VxlanId, vx.Port
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return names, fmt.Errorf("addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			v.Addrs = append(v.Addrs, ad.IPNet.String())
		}
		n.Links = append(n.Links, v)
	}
	return names, nil
}

func readRoutes(n *nodeview.Node, names map[int]string) error {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return err
	}
	for _, r := range routes {
		v := nodeview.Route{Table: r.Table, Type: routeType(r.Type), Dev: names[r.LinkIndex], Proto: int(r.Protocol), Metric: r.Priority, MTU: r.MTU}
		switch {
		case r.Dst != nil:
			v.Dst = r.Dst.String()
		case r.Family == unix.AF_INET6:
			v.Dst = "::/0"
		default:
			v.Dst = "0.0.0.0/0"
		}
		if r.Gw != nil {
			v.Gw = r.Gw.String()
		}
		if r.Src != nil {
			v.Src = r.Src.String()
		}
		n.Routes = append(n.Routes, v)
	}
	return nil
}

func routeType(t int) string {
	switch t {
	case unix.RTN_UNICAST:
		return "unicast"
	case unix.RTN_LOCAL:
		return "local"
	case unix.RTN_BROADCAST:
		return "broadcast"
	case unix.RTN_MULTICAST:
		return "multicast"
	case unix.RTN_BLACKHOLE:
		return "blackhole"
	case unix.RTN_UNREACHABLE:
		return "unreachable"
	case unix.RTN_PROHIBIT:
		return "prohibit"
	case unix.RTN_THROW:
		return "throw"
	}
	return fmt.Sprintf("type %d", t)
}

func readRules(n *nodeview.Node) error {
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := netlink.RuleList(family)
		if err != nil {
			return err
		}
		for _, r := range rules {
			v := nodeview.Rule{Family: "inet", Priority: r.Priority, Table: r.Table}
			if family == netlink.FAMILY_V6 {
				v.Family = "inet6"
			}
			if r.Src != nil {
				v.Src = r.Src.String()
			}
			if r.Dst != nil {
				v.Dst = r.Dst.String()
			}
			if r.Mark != 0 || r.Mask != nil {
				v.Mark = fmt.Sprintf("%#x", r.Mark)
				if r.Mask != nil {
					v.Mark += fmt.Sprintf("/%#x", *r.Mask)
				}
			}
			n.Rules = append(n.Rules, v)
		}
	}
	return nil
}

func readNeighbours(n *nodeview.Node, names map[int]string) error {
	neighs, err := netlink.NeighList(0, netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, e := range neighs {
		// Like ip neigh: entries that resolve nothing (multicast,
		// point-to-point devices) are left out.
		if e.IP != nil && e.State&netlink.NUD_NOARP == 0 {
			v := nodeview.Neighbour{Dev: names[e.LinkIndex], IP: e.IP.String(), State: neighState(e.State)}
			if e.HardwareAddr != nil {
				v.MAC = e.HardwareAddr.String()
			}
			n.Neighbours = append(n.Neighbours, v)
		}
	}
	fdb, err := netlink.NeighList(0, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("fdb: %w", err)
	}
	for _, e := range fdb {
		// Entries with a remote (VXLAN: MAC → remote node); a device's
		// own multicast entries are left out.
		if e.IP != nil {
			n.FDB = append(n.FDB, nodeview.FDBEntry{Dev: names[e.LinkIndex], MAC: e.HardwareAddr.String(), Dst: e.IP.String()})
		}
	}
	return nil
}

func neighState(s int) string {
	var out []string
	for _, st := range []struct {
		bit  int
		name string
	}{
		{netlink.NUD_INCOMPLETE, "incomplete"}, {netlink.NUD_REACHABLE, "reachable"}, {netlink.NUD_STALE, "stale"},
		{netlink.NUD_DELAY, "delay"}, {netlink.NUD_PROBE, "probe"}, {netlink.NUD_FAILED, "failed"},
		{netlink.NUD_NOARP, "noarp"}, {netlink.NUD_PERMANENT, "permanent"},
	} {
		if s&st.bit != 0 {
			out = append(out, st.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// readWireGuard reads the WireGuard devices among this network
// namespace's links: kernel ones, and userspace ones (wireguard-go)
// through their UAPI socket under /var/run/wireguard. That directory is
// not per namespace and may hold other namespaces' sockets, also dead
// ones of a killed process, so devices are asked for by the names of
// links here rather than listed.
func readWireGuard(n *nodeview.Node, links map[int]string) error {
	c, err := wgctrl.New()
	if err != nil {
		return err
	}
	defer c.Close()
	var devs []*wgtypes.Device
	for _, name := range links {
		d, err := c.Device(name)
		if errors.Is(err, os.ErrNotExist) {
			continue // not a WireGuard device
		}
		if err != nil {
			return fmt.Errorf("device %s: %w", name, err)
		}
		devs = append(devs, d)
	}
	slices.SortFunc(devs, func(a, b *wgtypes.Device) int { return strings.Compare(a.Name, b.Name) })
	now := time.Now()
	for _, d := range devs {
		v := nodeview.WireGuardDevice{Name: d.Name, Type: d.Type.String(), PublicKey: d.PublicKey.String(), ListenPort: d.ListenPort, Peers: []nodeview.WireGuardPeer{}}
		for _, p := range d.Peers {
			pv := nodeview.WireGuardPeer{PublicKey: p.PublicKey.String(), RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes,
				AllowedIPs: []string{}, HandshakeAgeSeconds: -1}
			if p.Endpoint != nil {
				pv.Endpoint = p.Endpoint.String()
			}
			for _, a := range p.AllowedIPs {
				pv.AllowedIPs = append(pv.AllowedIPs, a.String())
			}
			if !p.LastHandshakeTime.IsZero() {
				pv.LastHandshake = p.LastHandshakeTime.UTC()
				pv.HandshakeAgeSeconds = now.Sub(p.LastHandshakeTime).Seconds()
			}
			v.Peers = append(v.Peers, pv)
		}
		n.WireGuard = append(n.WireGuard, v)
	}
	return nil
}

func readXfrm(n *nodeview.Node) error {
	states, err := netlink.XfrmStateList(netlink.FAMILY_ALL)
	if err != nil {
		return err
	}
	for _, s := range states {
		n.IPsec = append(n.IPsec, nodeview.IPsecSA{Src: s.Src.String(), Dst: s.Dst.String(), Proto: s.Proto.String(), Mode: s.Mode.String(),
			SPI: fmt.Sprintf("%#08x", uint32(s.Spi)), Bytes: s.Statistics.Bytes, Packets: s.Statistics.Packets})
	}
	return nil
}

// readNft lists every nftables table whose name starts with "causeway".
func readNft(n *nodeview.Node) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return errors.New("no nft(8) on this node")
	}
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		return fmt.Errorf("nft list tables: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line) // "table ip causeway-globalnet"
		if len(f) != 3 || f[0] != "table" || !strings.HasPrefix(f[2], "causeway") {
			continue
		}
		text, err := exec.Command("nft", "list", "table", f[1], f[2]).Output()
		if err != nil {
			return fmt.Errorf("nft list table %s %s: %w", f[1], f[2], err)
		}
		n.Nftables = append(n.Nftables, nodeview.NftTable{Family: f[1], Name: f[2], Text: string(text)})
	}
	return nil
}

// readIptables keeps the CAUSEWAY-* chains of `iptables-save -c` and the
// rules of other chains that jump to them.
func readIptables(n *nodeview.Node, family string) error {
	tool := "iptables-save"
	if family == "ipv6" {
		tool = "ip6tables-save"
	}
	if _, err := exec.LookPath(tool); err != nil {
		return fmt.Errorf("no %s on this node", tool)
	}
	out, err := exec.Command(tool, "-c").Output()
	if err != nil {
		return fmt.Errorf("%s -c: %w", tool, err)
	}
	n.Iptables = append(n.Iptables, parseSave(family, string(out))...)
	return nil
}

// parseSave picks Causeway's chains out of iptables-save -c output.
func parseSave(family, out string) []nodeview.IptablesChain {
	var chains []nodeview.IptablesChain
	index := map[[2]string]int{} // table, chain → chains index
	table := ""
	add := func(chain, rule string) {
		k := [2]string{table, chain}
		i, ok := index[k]
		if !ok {
			i = len(chains)
			index[k] = i
			chains = append(chains, nodeview.IptablesChain{Family: family, Table: table, Chain: chain, Rules: []string{}})
		}
		if rule != "" {
			chains[i].Rules = append(chains[i].Rules, rule)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":CAUSEWAY-"):
			name, _, _ := strings.Cut(line[1:], " ")
			add(name, "")
		default:
			// "[pkts:bytes] -A CHAIN spec" or "-A CHAIN spec".
			rest := line
			if strings.HasPrefix(rest, "[") {
				if _, r, ok := strings.Cut(rest, "] "); ok {
					rest = r
				}
			}
			spec, ok := strings.CutPrefix(rest, "-A ")
			if !ok {
				continue
			}
			chain, _, _ := strings.Cut(spec, " ")
			if strings.HasPrefix(chain, "CAUSEWAY-") || strings.Contains(spec+" ", " -j CAUSEWAY-") {
				add(chain, line)
			}
		}
	}
	slices.SortStableFunc(chains, func(a, b nodeview.IptablesChain) int {
		return strings.Compare(a.Table+" "+a.Chain, b.Table+" "+b.Chain)
	})
	return chains
}

// readVIPs reads the pinned VIP maps; a node without them (no route
// agent, or the VIP datapath off) has none, which is not an error.
func readVIPs(n *nodeview.Node, pinDir string) error {
	if pinDir == "" {
		return nil
	}
	if _, err := os.Stat(pinDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	p, err := vip.OpenPinned(pinDir)
	if err != nil {
		return err
	}
	defer p.Close()
	services, err := p.Services()
	if err != nil {
		return err
	}
	n.VIPs = nodeview.FromServices(services)
	return nil
}
