package netlab

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/causeway-net/causeway/pkg/nodenet"
)

// Route protocol numbers marking the routes netlab owns (see
// /etc/iproute2/rt_protos; both are unassigned). Routes of other protocols
// are never touched.
const (
	// RouteProtoLab marks node and pod routes reconciled by Apply and
	// EnsurePod.
	RouteProtoLab netlink.RouteProtocol = 76
	// RouteProtoPod marks a node's pod-IP/32 routes to its pods' veths.
	RouteProtoPod netlink.RouteProtocol = 77
)

// Config configures a Host.
type Config struct {
	// Prefix of everything the lab creates; default DefaultPrefix.
	Prefix string
	// CgroupRoot is the cgroup v2 mount; "" finds it in
	// /proc/self/mountinfo.
	CgroupRoot string
	// NetnsDir is where namespaces are bound; default /run/netns.
	NetnsDir string
	// WireGuardDir holds wireguard-go UAPI sockets; default
	// /var/run/wireguard.
	WireGuardDir string
	// BPFFSDir is the bpffs mount whose <prefix>* entries belong to the
	// lab; default /sys/fs/bpf.
	BPFFSDir string
	Logger   *slog.Logger
}

// Host makes lab descriptions real on this machine. Its methods are safe
// for concurrent use on different nodes and pods.
type Host struct {
	prefix   string
	names    Names
	cgroups  CgroupLayout
	netnsDir string
	wgDir    string
	bpffsDir string
	log      *slog.Logger

	prepareOnce sync.Once
	prepareErr  error
}

// NewHost returns a Host for the lab with cfg's prefix.
func NewHost(cfg Config) (*Host, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(cfg.Prefix) {
		return nil, fmt.Errorf("prefix %q: want lower-case letters and digits ending in '-', at most 12 characters", cfg.Prefix)
	}
	if cfg.CgroupRoot == "" {
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return nil, fmt.Errorf("read mountinfo: %w", err)
		}
		cfg.CgroupRoot = FindCgroup2Mount(string(mi))
		if cfg.CgroupRoot == "" {
			return nil, errors.New("no cgroup2 file system is mounted; mount one or set the cgroup root")
		}
	}
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = "/run/netns"
	}
	if cfg.WireGuardDir == "" {
		cfg.WireGuardDir = "/var/run/wireguard"
	}
	if cfg.BPFFSDir == "" {
		cfg.BPFFSDir = "/sys/fs/bpf"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Host{
		prefix:   cfg.Prefix,
		names:    Names{Prefix: cfg.Prefix},
		cgroups:  CgroupLayout{Root: cfg.CgroupRoot, Prefix: cfg.Prefix},
		netnsDir: cfg.NetnsDir,
		wgDir:    cfg.WireGuardDir,
		bpffsDir: cfg.BPFFSDir,
		log:      cfg.Logger.With("component", "netlab"),
	}, nil
}

// Names returns the lab's naming scheme.
func (h *Host) Names() Names { return h.names }

// Cgroups returns the lab's cgroup layout.
func (h *Host) Cgroups() CgroupLayout { return h.cgroups }

// Apply makes the lab's namespaces, links, addresses, routes and node
// cgroups match t, and removes the clusters and nodes (with their pods) of
// this prefix that t no longer has. Pods of nodes that stay are left alone
// (see EnsurePod). Applying the same topology twice changes nothing.
func (h *Host) Apply(t Topology) error {
	if t.Prefix == "" {
		t.Prefix = h.prefix
	}
	if t.Prefix != h.prefix {
		return fmt.Errorf("topology prefix %q differs from the host's %q", t.Prefix, h.prefix)
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("invalid topology: %w", err)
	}
	if err := h.prune(t); err != nil {
		return err
	}
	hasWAN := false
	for _, c := range t.Clusters {
		for _, n := range c.Nodes {
			hasWAN = hasWAN || n.Gateway()
		}
	}
	if hasWAN {
		if err := h.ensureSwitch(h.names.WAN()); err != nil {
			return fmt.Errorf("WAN: %w", err)
		}
	}
	for _, c := range t.Clusters {
		if err := h.ensureSwitch(h.names.Switch(c.Name)); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		if err := mkdirCgroup(h.cgroups.Cluster(c.Name)); err != nil {
			return fmt.Errorf("cluster %s: cgroup: %w", c.Name, err)
		}
		for _, n := range c.Nodes {
			if err := h.ensureNode(c, n); err != nil {
				return fmt.Errorf("cluster %s node %s: %w", c.Name, n.Name, err)
			}
		}
	}
	return nil
}

// prune removes namespaces and cgroups of clusters and nodes that t lacks.
func (h *Host) prune(t Topology) error {
	keep := map[string]bool{}
	keepCluster := map[string]bool{}
	nodeNS := map[string]bool{}
	for _, c := range t.Clusters {
		keepCluster[c.Name] = true
		keep[h.names.Switch(c.Name)] = true
		for _, n := range c.Nodes {
			nodeNS[h.names.Node(c.Name, n.Name)] = true
			keep[h.names.Node(c.Name, n.Name)] = true
			if n.Gateway() {
				keep[h.names.WAN()] = true
			}
		}
	}
	// Cgroups first: kill the processes of vanished nodes and clusters.
	clusterDirs, err := readDirNames(h.cgroups.Base(), h.prefix)
	if err != nil {
		return err
	}
	for _, d := range clusterDirs {
		cluster := strings.TrimPrefix(d, h.prefix)
		if cluster == controlName {
			continue
		}
		if !keepCluster[cluster] {
			if err := killAndRemoveCgroup(h.cgroups.Cluster(cluster)); err != nil {
				return err
			}
			continue
		}
		c, _ := t.Cluster(cluster)
		nodes, err := readDirNames(h.cgroups.Cluster(cluster), "")
		if err != nil {
			return err
		}
		for _, node := range nodes {
			if _, ok := c.Node(node); !ok {
				if err := killAndRemoveCgroup(h.cgroups.Node(cluster, node)); err != nil {
					return err
				}
			}
		}
	}
	all, err := h.ListNetns(h.prefix)
	if err != nil {
		return err
	}
	for _, name := range all {
		if keep[name] {
			continue
		}
		if h.isPodOfKeptNode(name, nodeNS) {
			continue
		}
		if err := h.killNetnsProcesses(name); err != nil {
			return err
		}
		if err := h.DeleteNetns(name); err != nil {
			return err
		}
		h.log.Info("removed namespace", "netns", name)
	}
	return nil
}

// isPodOfKeptNode tells whether name is a pod namespace of a node in nodes.
func (h *Host) isPodOfKeptNode(name string, nodes map[string]bool) bool {
	rest := strings.TrimPrefix(name, h.prefix)
	cluster, rest, ok := strings.Cut(rest, ".")
	if !ok {
		return false
	}
	node, _, ok := strings.Cut(rest, ".")
	return ok && nodes[h.names.Node(cluster, node)]
}

// ensureSwitch creates a namespace holding an up bridge.
func (h *Host) ensureSwitch(name string) error {
	if err := h.EnsureNetns(name); err != nil {
		return err
	}
	return h.withHandle(name, func(nh *netlink.Handle, _ netns.NsHandle) error {
		if err := linkUp(nh, "lo"); err != nil {
			return err
		}
		l, err := nh.LinkByName(BridgeName)
		if err == nil {
			if _, ok := l.(*netlink.Bridge); !ok {
				if err := nh.LinkDel(l); err != nil {
					return fmt.Errorf("delete %s: %w", BridgeName, err)
				}
				l = nil
			}
		} else {
			l = nil
		}
		if l == nil {
			br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeName}}
			if err := nh.LinkAdd(br); err != nil {
				return fmt.Errorf("add bridge: %w", err)
			}
		}
		return linkUp(nh, BridgeName)
	})
}

// withHandle opens the namespace and a netlink handle in it.
func (h *Host) withHandle(name string, fn func(*netlink.Handle, netns.NsHandle) error) error {
	ns, err := h.openNetns(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", name, err)
	}
	defer nh.Close()
	return fn(nh, ns)
}

// ensureNode makes one node namespace real.
func (h *Host) ensureNode(c Cluster, n Node) error {
	name := h.names.Node(c.Name, n.Name)
	if err := h.EnsureNetns(name); err != nil {
		return err
	}
	// Sysctls first so that links created below inherit the defaults.
	sysctls := []nodenet.Sysctl{
		{Path: "net/ipv4/ip_forward", Value: "1"},
		{Path: "net/ipv4/conf/all/rp_filter", Value: "0"},
		{Path: "net/ipv4/conf/default/rp_filter", Value: "0"},
	}
	if c.DualStack() {
		sysctls = append(sysctls, ipv6Sysctls...)
	}
	err := h.Do(name, func() error {
		_, err := nodenet.SyncSysctls(sysctls)
		return err
	})
	if err != nil {
		return err
	}
	nodeNS, err := h.openNetns(name)
	if err != nil {
		return err
	}
	defer nodeNS.Close()
	nodeH, err := netlink.NewHandleAt(nodeNS)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", name, err)
	}
	defer nodeH.Close()
	if err := linkUp(nodeH, "lo"); err != nil {
		return err
	}
	if err := addLoopbackAddr(nodeH, APIAddress); err != nil {
		return err
	}

	if err := h.withHandle(h.names.Switch(c.Name), func(swH *netlink.Handle, _ netns.NsHandle) error {
		addrs := []netip.Prefix{n.Address}
		if n.Address6.IsValid() {
			addrs = append(addrs, n.Address6)
		}
		return attachToBridge(swH, SwitchPort(n.Name), nodeH, nodeNS, NodeLink, addrs...)
	}); err != nil {
		return fmt.Errorf("node link: %w", err)
	}
	if n.Gateway() {
		if err := h.withHandle(h.names.WAN(), func(wanH *netlink.Handle, _ netns.NsHandle) error {
			return attachToBridge(wanH, WANPort(c.Name, n.Name), nodeH, nodeNS, NodeWANLink, n.WANAddress)
		}); err != nil {
			return fmt.Errorf("WAN link: %w", err)
		}
	} else if l, err := nodeH.LinkByName(NodeWANLink); err == nil {
		if err := nodeH.LinkDel(l); err != nil {
			return fmt.Errorf("delete %s: %w", NodeWANLink, err)
		}
	}
	if err := syncRoutes(nodeH, c.NodeRoutes(n.Name), RouteProtoLab); err != nil {
		return fmt.Errorf("routes: %w", err)
	}
	for _, dir := range []string{h.cgroups.Node(c.Name, n.Name), h.cgroups.NodeSystem(c.Name, n.Name)} {
		if err := mkdirCgroup(dir); err != nil {
			return err
		}
	}
	return nil
}

// attachToBridge ensures a veth pair whose end port sits in the bridge
// namespace (enslaved to BridgeName) and whose end link sits in the node
// namespace with exactly addresses addrs.
func attachToBridge(brH *netlink.Handle, port string, nodeH *netlink.Handle, nodeNS netns.NsHandle, link string, addrs ...netip.Prefix) error {
	if err := ensureVethPair(brH, port, nil, nodeH, nodeNS, link, 0); err != nil {
		return err
	}
	br, err := brH.LinkByName(BridgeName)
	if err != nil {
		return fmt.Errorf("find bridge: %w", err)
	}
	p, err := brH.LinkByName(port)
	if err != nil {
		return fmt.Errorf("find %s: %w", port, err)
	}
	if p.Attrs().MasterIndex != br.Attrs().Index {
		if err := brH.LinkSetMaster(p, br); err != nil {
			return fmt.Errorf("enslave %s: %w", port, err)
		}
	}
	if err := linkUp(brH, port); err != nil {
		return err
	}
	if err := syncAddrs(nodeH, link, addrs); err != nil {
		return err
	}
	return linkUp(nodeH, link)
}

// ensureVethPair makes aName (in a's namespace) and bName (in b's) the two
// ends of one veth pair, recreating them if they are missing, of the wrong
// kind or not each other's peer.
func ensureVethPair(a *netlink.Handle, aName string, aMAC net.HardwareAddr, b *netlink.Handle, bNS netns.NsHandle, bName string, mtu int) error {
	la, errA := a.LinkByName(aName)
	lb, errB := b.LinkByName(bName)
	if errA == nil && errB == nil {
		va, okA := la.(*netlink.Veth)
		vb, okB := lb.(*netlink.Veth)
		if okA && okB && va.Attrs().ParentIndex == vb.Attrs().Index && vb.Attrs().ParentIndex == va.Attrs().Index &&
			(mtu == 0 || (va.Attrs().MTU == mtu && vb.Attrs().MTU == mtu)) {
			return nil
		}
	}
	if errA == nil {
		if err := a.LinkDel(la); err != nil {
			return fmt.Errorf("delete stale %s: %w", aName, err)
		}
	}
	if lb, err := b.LinkByName(bName); err == nil { // may have gone with la
		if err := b.LinkDel(lb); err != nil {
			return fmt.Errorf("delete stale %s: %w", bName, err)
		}
	}
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: aName, HardwareAddr: aMAC, MTU: mtu},
		PeerName:      bName,
		PeerNamespace: netlink.NsFd(int(bNS)),
	}
	if mtu > 0 {
		v.PeerMTU = uint32(mtu)
	}
	if err := a.LinkAdd(v); err != nil {
		return fmt.Errorf("add veth %s/%s: %w", aName, bName, err)
	}
	return nil
}

// linkUp sets a link up unless it is.
func linkUp(nh *netlink.Handle, name string) error {
	l, err := nh.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	if l.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	if err := nh.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// addLoopbackAddr puts a on lo as a /32 (lo's other addresses stay),
// scope host: the kernel never picks it as the source of the node's own
// traffic (to a pod it would otherwise, before eth0's address), yet it
// accepts and answers connections to it.
func addLoopbackAddr(nh *netlink.Handle, a netip.Addr) error {
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}, Scope: int(netlink.SCOPE_HOST)}
	if err := nh.AddrReplace(lo, addr); err != nil {
		return fmt.Errorf("add %s to lo: %w", a, err)
	}
	return nil
}

// syncAddrs makes the addresses of link name exactly want.
func syncAddrs(nh *netlink.Handle, name string, want []netip.Prefix) error {
	l, err := nh.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	_, err = nodenet.SyncAddrs(nh, l, want)
	return err
}

// syncRoutes makes the main-table routes of protocol proto exactly want;
// routes of other protocols are left alone.
func syncRoutes(nh *netlink.Handle, want []Route, proto netlink.RouteProtocol) error {
	routes := make([]nodenet.Route, 0, len(want))
	for _, r := range want {
		l, err := nh.LinkByName(r.Dev)
		if err != nil {
			return fmt.Errorf("route %s: find %s: %w", r.Dst, r.Dev, err)
		}
		routes = append(routes, nodenet.Route{Dst: r.Dst, Via: r.Via, Src: r.Src, Link: l.Attrs().Index})
	}
	_, err := nodenet.SyncRoutes(nh, nodenet.Owner{Protocol: int(proto)}, routes)
	return err
}

// ipv6Sysctls are set in the namespaces of dual-stack nodes: IPv6 on
// and forwarding. Addresses need no DAD off: nodenet.SyncAddrs adds
// IPv6 addresses with IFA_F_NODAD.
var ipv6Sysctls = []nodenet.Sysctl{
	{Path: "net/ipv6/conf/all/disable_ipv6", Value: "0"},
	{Path: "net/ipv6/conf/default/disable_ipv6", Value: "0"},
	{Path: "net/ipv6/conf/all/forwarding", Value: "1"},
}

// EnsurePod gives a pod its namespace, a routed veth pair to its node, its
// address and routes, and its cgroup directory. The node must exist (see
// Apply). Calling it again with the same Pod changes nothing; with a new IP
// it readdresses the pod.
func (h *Host) EnsurePod(p Pod) error {
	if !p.IP.Is4() {
		return fmt.Errorf("pod %s/%s: IP %s is not IPv4", p.Namespace, p.Name, p.IP)
	}
	if p.IP6.IsValid() && !p.IP6.Is6() {
		return fmt.Errorf("pod %s/%s: IP6 %s is not IPv6", p.Namespace, p.Name, p.IP6)
	}
	nodeName := h.names.Node(p.Cluster, p.Node)
	podName := h.names.PodOf(p)
	if !isBoundNetns(h.netnsPath(nodeName)) {
		return fmt.Errorf("pod %s/%s: node namespace %s does not exist", p.Namespace, p.Name, nodeName)
	}
	if err := h.EnsureNetns(podName); err != nil {
		return err
	}
	if err := mkdirCgroup(h.cgroups.PodOf(p)); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	dual := p.IP6.IsValid()
	addrs := []netip.Prefix{netip.PrefixFrom(p.IP, 32)}
	if dual {
		addrs = append(addrs, netip.PrefixFrom(p.IP6, 128))
	}
	hostVeth := HostVeth(p.Namespace, p.Name)
	err := h.withHandle(nodeName, func(nodeH *netlink.Handle, _ netns.NsHandle) error {
		return h.withHandle(podName, func(podH *netlink.Handle, podNS netns.NsHandle) error {
			if err := linkUp(podH, "lo"); err != nil {
				return err
			}
			if err := ensureVethPair(nodeH, hostVeth, net.HardwareAddr(HostVethMAC[:]), podH, podNS, PodLink, p.MTU); err != nil {
				return err
			}
			if err := syncAddrs(podH, PodLink, addrs); err != nil {
				return err
			}
			if err := linkUp(podH, PodLink); err != nil {
				return err
			}
			if err := linkUp(nodeH, hostVeth); err != nil {
				return err
			}
			eth0, err := podH.LinkByName(PodLink)
			if err != nil {
				return fmt.Errorf("find pod %s: %w", PodLink, err)
			}
			gws := []nodenet.Neigh{{IP: PodGateway, MAC: net.HardwareAddr(HostVethMAC[:])}}
			if dual {
				gws = append(gws, nodenet.Neigh{IP: PodGateway6, MAC: net.HardwareAddr(HostVethMAC[:])})
			}
			if _, err := nodenet.AddNeighbours(podH, eth0, nodenet.Neighbours{Neigh: gws}); err != nil {
				return fmt.Errorf("gateway neighbour: %w", err)
			}
			if err := syncRoutes(podH, PodRoutes(dual), RouteProtoLab); err != nil {
				return fmt.Errorf("pod routes: %w", err)
			}
			return syncPodRoutes(nodeH, hostVeth, addrs)
		})
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// syncPodRoutes makes the pod's addresses (host prefixes) the only pod
// routes through hostVeth.
func syncPodRoutes(nh *netlink.Handle, hostVeth string, addrs []netip.Prefix) error {
	l, err := nh.LinkByName(hostVeth)
	if err != nil {
		return fmt.Errorf("find %s: %w", hostVeth, err)
	}
	idx := l.Attrs().Index
	routes := make([]nodenet.Route, 0, len(addrs))
	for _, a := range addrs {
		routes = append(routes, nodenet.Route{Dst: a, Link: idx})
	}
	_, err = nodenet.SyncRoutes(nh, nodenet.Owner{Protocol: int(RouteProtoPod), Link: idx}, routes)
	return err
}

// DeletePod kills the pod's processes, removes its cgroup, its veth pair
// and its namespace. Missing parts are fine.
func (h *Host) DeletePod(p Pod) error {
	if err := killAndRemoveCgroup(h.cgroups.PodOf(p)); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	podName := h.names.PodOf(p)
	if err := h.killNetnsProcesses(podName); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	nodeName := h.names.Node(p.Cluster, p.Node)
	if isBoundNetns(h.netnsPath(nodeName)) {
		// Delete the veth now rather than when the namespace is
		// destroyed (asynchronously), so a recreated pod finds no stale
		// host veth.
		err := h.withHandle(nodeName, func(nh *netlink.Handle, _ netns.NsHandle) error {
			l, err := nh.LinkByName(HostVeth(p.Namespace, p.Name))
			if err != nil {
				return nil
			}
			return nh.LinkDel(l)
		})
		if err != nil {
			return fmt.Errorf("pod %s/%s: delete veth: %w", p.Namespace, p.Name, err)
		}
	}
	if err := h.DeleteNetns(podName); err != nil {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// PodNetns lists the pod namespaces of a node.
func (h *Host) PodNetns(cluster, node string) ([]string, error) {
	return h.ListNetns(h.names.Node(cluster, node) + ".")
}

// SyncPods makes the pods of one node exactly pods: each is ensured (see
// EnsurePod) and every other pod namespace and pod cgroup of the node is
// removed with its processes. Errors of single pods do not stop the
// others; they are returned joined.
func (h *Host) SyncPods(cluster, node string, pods []Pod) error {
	var errs []error
	keepNS := map[string]bool{}
	keepCG := map[string]bool{}
	for _, p := range pods {
		if p.Cluster != cluster || p.Node != node {
			errs = append(errs, fmt.Errorf("pod %s/%s belongs to %s/%s, not %s/%s", p.Namespace, p.Name, p.Cluster, p.Node, cluster, node))
			continue
		}
		keepNS[h.names.PodOf(p)] = true
		keepCG[h.cgroups.PodOf(p)] = true
		if err := h.EnsurePod(p); err != nil {
			errs = append(errs, err)
		}
	}
	nodeNS := h.names.Node(cluster, node)
	have, err := h.PodNetns(cluster, node)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, name := range have {
		if keepNS[name] {
			continue
		}
		rest := strings.TrimPrefix(name, nodeNS+".")
		namespace, podName, ok := strings.Cut(rest, ".")
		if ok && !strings.Contains(rest, "~") {
			errs = append(errs, h.DeletePod(Pod{Cluster: cluster, Node: node, Namespace: namespace, Name: podName}))
			continue
		}
		// A shortened name cannot be mapped back to the pod: remove
		// the namespace (its veth goes with it) and let the cgroup
		// sweep below take its cgroup.
		if err := h.killNetnsProcesses(name); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, h.DeleteNetns(name))
	}
	dirs, err := readDirNames(h.cgroups.Node(cluster, node), "pod-")
	errs = append(errs, err)
	for _, d := range dirs {
		dir := filepath.Join(h.cgroups.Node(cluster, node), d)
		if !keepCG[dir] {
			errs = append(errs, killAndRemoveCgroup(dir))
		}
	}
	return errors.Join(errs...)
}
