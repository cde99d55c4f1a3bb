package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/causeway-net/causeway/pkg/nodenet"
)

// enableForwarding sets net.ipv4.ip_forward=1 in the gateway's namespace,
// and net.ipv6.conf.all.forwarding=1 too when ipv6 (the tunnel carries
// IPv6 subnets).
func enableForwarding(nsPath string, ipv6 bool) error {
	want := []nodenet.Sysctl{{Path: "net/ipv4/ip_forward", Value: "1"}}
	if ipv6 {
		want = append(want, nodenet.Sysctl{Path: "net/ipv6/conf/all/forwarding", Value: "1"})
	}
	return netnsx.Do(nsPath, func() error {
		_, err := nodenet.SyncSysctls(want)
		return err
	})
}

// ensureHealthAddr makes addr/32 present on device dev (idempotent). The
// address is the gateway's health-check IP: remote gateways' echoes to it
// arrive through the tunnel and the kernel answers them.
func ensureHealthAddr(nsPath, dev string, addr netip.Addr) error {
	h, err := netnsx.Handle(nsPath)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return fmt.Errorf("find tunnel device %s: %w", dev, err)
	}
	ipn := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}
	err = h.AddrAdd(l, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NOPREFIXROUTE, Scope: unix.RT_SCOPE_UNIVERSE})
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add health-check address %s to %s: %w", addr, dev, err)
	}
	return nil
}

// linkExists reports whether device dev exists in the namespace.
func linkExists(nsPath, dev string) (bool, error) {
	h, err := netnsx.Handle(nsPath)
	if err != nil {
		return false, err
	}
	defer h.Close()
	_, err = h.LinkByName(dev)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return false, nil
	}
	return err == nil, err
}

// readDeviceCounters reads the kernel's counters of device dev.
func readDeviceCounters(nsPath, dev string) (deviceCounters, error) {
	h, err := netnsx.Handle(nsPath)
	if err != nil {
		return deviceCounters{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(dev)
	if err != nil {
		return deviceCounters{}, fmt.Errorf("find tunnel device %s: %w", dev, err)
	}
	st := l.Attrs().Statistics
	if st == nil {
		return deviceCounters{}, fmt.Errorf("tunnel device %s: no statistics", dev)
	}
	return deviceCounters{RxBytes: st.RxBytes, TxBytes: st.TxBytes, RxPackets: st.RxPackets, TxPackets: st.TxPackets}, nil
}

// nodeNetworks returns the networks of addrs as configured in the
// namespace: the prefix of the interface address equal to each one (a
// public address behind NAT, on no interface, stands for itself, /32 or
// /128). They are this cluster's node and gateway networks, which no
// remote may claim.
func nodeNetworks(nsPath string, addrs ...netip.Addr) ([]netip.Prefix, error) {
	h, err := netnsx.Handle(nsPath)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	have, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		p := netip.PrefixFrom(a, a.BitLen())
		for _, h := range have {
			ip, ok := netip.AddrFromSlice(h.IP)
			if ones, _ := h.Mask.Size(); ok && ip.Unmap() == a.Unmap() {
				p = netip.PrefixFrom(a.Unmap(), ones).Masked()
				break
			}
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}
