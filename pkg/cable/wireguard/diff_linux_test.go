package wireguard

import (
	"net"
	"net/netip"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/causeway-net/causeway/pkg/cable"
)

// applyChanges models what the device does with a wgtypes.Config.
func applyChanges(have []wgtypes.Peer, changes []wgtypes.PeerConfig) []wgtypes.Peer {
	byKey := map[wgtypes.Key]wgtypes.Peer{}
	var order []wgtypes.Key
	for _, p := range have {
		byKey[p.PublicKey] = p
		order = append(order, p.PublicKey)
	}
	for _, c := range changes {
		if c.Remove {
			delete(byKey, c.PublicKey)
			continue
		}
		p, ok := byKey[c.PublicKey]
		if !ok {
			order = append(order, c.PublicKey)
		}
		p.PublicKey = c.PublicKey
		if c.Endpoint != nil {
			p.Endpoint = c.Endpoint
		}
		if c.PresharedKey != nil {
			p.PresharedKey = *c.PresharedKey
		}
		if c.PersistentKeepaliveInterval != nil {
			p.PersistentKeepaliveInterval = *c.PersistentKeepaliveInterval
		}
		if c.ReplaceAllowedIPs {
			p.AllowedIPs = nil
		}
		p.AllowedIPs = append(p.AllowedIPs, c.AllowedIPs...)
		byKey[c.PublicKey] = p
	}
	var out []wgtypes.Peer
	for _, k := range order {
		if p, ok := byKey[k]; ok {
			out = append(out, p)
			delete(byKey, k)
		}
	}
	return out
}

func TestPeerChangesConverge(t *testing.T) {
	k := func(b byte) cable.Key { return cable.Key{b} }
	psk := cable.Key{9}
	conn := func(id string, key cable.Key, ep string, subnets ...string) cable.Connection {
		c := cable.Connection{ClusterID: id, PublicKey: key, Endpoint: netip.MustParseAddrPort(ep)}
		for _, s := range subnets {
			c.Subnets = append(c.Subnets, netip.MustParsePrefix(s))
		}
		return c
	}
	withPSK := conn("c2", k(2), "198.18.0.2:51820", "10.2.0.0/16")
	withPSK.PresharedKey = &psk
	states := [][]cable.Connection{
		nil,
		{conn("c2", k(2), "198.18.0.2:51820", "10.2.0.0/16")},
		{conn("c2", k(2), "198.18.0.2:51820", "10.2.0.0/16"), conn("c3", k(3), "198.18.0.3:51820", "10.3.0.0/16")},
		{conn("c2", k(2), "198.18.0.2:51821", "10.2.0.0/16", "10.96.0.0/16"), conn("c3", k(3), "198.18.0.3:51820", "10.3.0.0/16")},
		{withPSK},
		{conn("c2", k(22), "198.18.0.2:51820", "10.2.0.0/16")}, // rotated key
		nil,
	}
	// Every state reached from every other state converges, and a second
	// diff is empty.
	for i, from := range states {
		for j, to := range states {
			dev := applyChanges(nil, peerChanges(nil, from))
			dev = applyChanges(dev, peerChanges(dev, to))
			if again := peerChanges(dev, to); len(again) != 0 {
				t.Fatalf("%d -> %d: not converged, still %d changes: %+v", i, j, len(again), again)
			}
			if len(dev) != len(to) {
				t.Fatalf("%d -> %d: %d peers, want %d", i, j, len(dev), len(to))
			}
		}
	}
}

func TestPeerChangesUnchangedPeerUntouched(t *testing.T) {
	c := cable.Connection{ClusterID: "c2", PublicKey: cable.Key{2}, Endpoint: netip.MustParseAddrPort("198.18.0.2:51820"),
		Subnets: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")}}
	dev := []wgtypes.Peer{{
		PublicKey: wgtypes.Key(c.PublicKey),
		// The device reports an IPv4-mapped endpoint and a different
		// AllowedIPs order: still equal.
		Endpoint:                    net.UDPAddrFromAddrPort(netip.MustParseAddrPort("[::ffff:198.18.0.2]:51820")),
		PersistentKeepaliveInterval: Keepalive,
		AllowedIPs: []net.IPNet{
			{IP: net.IPv4(10, 96, 0, 0).To4(), Mask: net.CIDRMask(16, 32)},
			{IP: net.IPv4(10, 2, 0, 0).To4(), Mask: net.CIDRMask(16, 32)},
		},
	}}
	if ch := peerChanges(dev, []cable.Connection{c}); len(ch) != 0 {
		t.Fatalf("changes for an equal peer: %+v", ch)
	}
}
