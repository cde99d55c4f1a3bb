package nat

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/causeway-net/causeway/internal/netnsx"
)

// DeleteConntrack removes, in the network namespace at netnsPath ("":
// the process's own), the IPv4 conntrack entries of flows whose original
// source or destination lies in one of prefixes, and returns how many it
// removed.
//
// A gateway that becomes active calls it for the remote subnets once its
// rules are in place. While passive the node only forwarded: its own
// pods' traffic on the way to the old active gateway, replies for it.
// The entries it made then carry no NAT of this gateway's (egress SNAT),
// or collide with the ones the translated flow needs (a reply tuple
// already taken), and conntrack never translates a confirmed entry
// again, so such a flow would leave untranslated for as long as it
// lives. Without the entry its next packet is tracked anew — a TCP flow
// mid-stream too (nf_conntrack_tcp_loose, on by default) — and
// translated.
func DeleteConntrack(netnsPath string, prefixes []netip.Prefix) (uint, error) {
	if len(prefixes) == 0 {
		return 0, nil
	}
	h, err := netnsx.Handle(netnsPath)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	var filters []netlink.CustomConntrackFilter
	for _, p := range prefixes {
		if !p.Addr().Is4() {
			continue
		}
		n := &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
		for _, side := range []netlink.ConntrackFilterType{netlink.ConntrackOrigSrcIP, netlink.ConntrackOrigDstIP} {
			f := &netlink.ConntrackFilter{}
			if err := f.AddIPNet(side, n); err != nil {
				return 0, fmt.Errorf("conntrack filter %s: %w", p, err)
			}
			filters = append(filters, f)
		}
	}
	deleted, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, filters...)
	if err != nil {
		return deleted, fmt.Errorf("delete conntrack entries of %v: %w", prefixes, err)
	}
	return deleted, nil
}
