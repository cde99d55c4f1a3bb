package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/causeway-net/causeway/lab/netlab"
)

// Baseline is a raw veth pair between two fresh namespaces, the reference
// every lab figure is divided by.
type Baseline struct {
	h    *netlab.Host
	A, B Endpoint
}

type nsEndpoint struct {
	h        *netlab.Host
	ns, addr string
}

func (e nsEndpoint) Name() string { return "veth:" + e.ns }
func (e nsEndpoint) IP() string   { return e.addr }
func (e nsEndpoint) Start(_ context.Context, path string, args []string, out io.Writer) (*exec.Cmd, error) {
	return e.h.Start(netlab.Process{Netns: e.ns, Path: path, Args: args, Env: os.Environ(), Stdout: out, Stderr: out})
}

// NewBaseline creates namespaces <prefix>a and <prefix>b joined by a veth
// (10.254.254.1/30 ↔ .2, MTU 1500); Close removes them.
func NewBaseline(prefix string) (*Baseline, error) {
	h, err := netlab.NewHost(netlab.Config{Prefix: prefix})
	if err != nil {
		return nil, err
	}
	b := &Baseline{h: h}
	a, bn := prefix+"a", prefix+"b"
	if err := b.setup(a, bn); err != nil {
		b.Close()
		return nil, fmt.Errorf("baseline veth: %w", err)
	}
	b.A = nsEndpoint{h: h, ns: a, addr: "10.254.254.1"}
	b.B = nsEndpoint{h: h, ns: bn, addr: "10.254.254.2"}
	return b, nil
}

func (b *Baseline) setup(a, bn string) error {
	for _, n := range []string{a, bn} {
		if err := b.h.EnsureNetns(n); err != nil {
			return err
		}
	}
	fa, err := netns.GetFromName(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := netns.GetFromName(bn)
	if err != nil {
		return err
	}
	defer fb.Close()
	ha, err := netlink.NewHandleAt(fa)
	if err != nil {
		return err
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(fb)
	if err != nil {
		return err
	}
	defer hb.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: "peer0", PeerNamespace: netlink.NsFd(int(fb))}
	if err := ha.LinkAdd(veth); err != nil {
		return err
	}
	for _, side := range []struct {
		h    *netlink.Handle
		link string
		addr string
	}{{ha, "eth0", "10.254.254.1/30"}, {hb, "peer0", "10.254.254.2/30"}} {
		l, err := side.h.LinkByName(side.link)
		if err != nil {
			return err
		}
		ip, n, _ := net.ParseCIDR(side.addr)
		n.IP = ip
		if err := side.h.AddrAdd(l, &netlink.Addr{IPNet: n}); err != nil {
			return err
		}
		if err := side.h.LinkSetUp(l); err != nil {
			return err
		}
		lo, err := side.h.LinkByName("lo")
		if err == nil {
			_ = side.h.LinkSetUp(lo)
		}
	}
	return nil
}

// Close removes the namespaces.
func (b *Baseline) Close() {
	_, _ = b.h.Teardown()
}
