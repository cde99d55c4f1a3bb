package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inNetns runs fn on an OS thread switched into the namespace at path (the
// caller's namespace when path is empty). The thread is never unlocked,
// so the runtime discards it afterwards: no goroutine can later run in the
// wrong namespace. Sockets fn opens stay in that namespace.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", path, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// netlinkHandle opens a netlink handle in the namespace at path.
func netlinkHandle(path string) (*netlink.Handle, error) {
	if path == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

// enableForwarding sets net.ipv4.ip_forward=1 in the gateway's namespace
// (/proc/sys/net follows the opening thread's namespace).
func enableForwarding(nsPath string) error {
	return inNetns(nsPath, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("enable ip_forward: %w", err)
		}
		return nil
	})
}

// ensureHealthAddr makes addr/32 present on device dev (idempotent). The
// address is the gateway's health-check IP: remote gateways' echoes to it
// arrive through the tunnel and the kernel answers them.
func ensureHealthAddr(nsPath, dev string, addr netip.Addr) error {
	h, err := netlinkHandle(nsPath)
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
	h, err := netlinkHandle(nsPath)
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
