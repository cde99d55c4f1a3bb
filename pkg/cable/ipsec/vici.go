package ipsec

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/strongswan/govici/vici"
)

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// ConnMessage builds the load-conn message for p: IKEv2, PSK both ways,
// UDP encapsulation forced (kernel-libipsec sends ESP over the IKE
// sockets), one tunnel-mode CHILD_SA local subnets <-> remote subnets,
// started by the driver (initiate; kernel-libipsec raises no acquires, so
// trap policies do not work), dead peer detection every 10 s and
// re-initiation when the SA is closed or the peer is dead.
func ConnMessage(localID string, local netip.Addr, p Peer) (*vici.Message, error) {
	name := ConnName(p.ClusterID)
	child := vici.NewMessage()
	for k, v := range map[string]any{
		"mode":          "tunnel",
		"local_ts":      prefixStrings(p.LocalTS),
		"remote_ts":     prefixStrings(p.RemoteTS),
		"esp_proposals": p.ESP,
		"start_action":  "none",
		"dpd_action":    "restart",
		"close_action":  "start",
	} {
		if err := child.Set(k, v); err != nil {
			return nil, err
		}
	}
	children := vici.NewMessage()
	if err := children.Set(name, child); err != nil {
		return nil, err
	}
	loc := vici.NewMessage()
	rem := vici.NewMessage()
	for _, kv := range []struct {
		m    *vici.Message
		k, v string
	}{{loc, "auth", "psk"}, {loc, "id", localID}, {rem, "auth", "psk"}, {rem, "id", Identity(p.ClusterID)}} {
		if err := kv.m.Set(kv.k, kv.v); err != nil {
			return nil, err
		}
	}
	conn := vici.NewMessage()
	for _, kv := range []struct {
		k string
		v any
	}{
		{"version", "2"},
		{"local_addrs", []string{local.String()}},
		{"remote_addrs", []string{p.Remote.Addr().String()}},
		{"remote_port", strconv.Itoa(int(p.Remote.Port()))},
		{"encap", "yes"},
		{"mobike", "no"},
		{"proposals", []string{IKEProposal}},
		{"dpd_delay", "10s"},
		{"unique", "replace"},
		{"keyingtries", "0"},
		{"local", loc},
		{"remote", rem},
		{"children", children},
	} {
		if err := conn.Set(kv.k, kv.v); err != nil {
			return nil, err
		}
	}
	msg := vici.NewMessage()
	if err := msg.Set(name, conn); err != nil {
		return nil, err
	}
	return msg, nil
}

// SharedMessage builds the load-shared message for p's PSK, owned by the
// local and the remote identity.
func SharedMessage(localID string, p Peer) (*vici.Message, error) {
	msg := vici.NewMessage()
	for _, kv := range []struct {
		k string
		v any
	}{
		{"id", ConnName(p.ClusterID)},
		{"type", "IKE"},
		{"data", string(p.PSK[:])},
		{"owners", []string{localID, Identity(p.ClusterID)}},
	} {
		if err := msg.Set(kv.k, kv.v); err != nil {
			return nil, err
		}
	}
	return msg, nil
}

// SA is the state of one IKE_SA as reported by list-sas.
type SA struct {
	Conn        string
	State       string // IKE_SA state, e.g. ESTABLISHED, CONNECTING
	Established time.Duration
	// ChildInstalled is true when at least one CHILD_SA is INSTALLED.
	ChildInstalled bool
	// BytesIn, BytesOut, PacketsIn and PacketsOut are summed over the
	// CHILD_SAs.
	BytesIn, BytesOut     int64
	PacketsIn, PacketsOut int64
}

// ParseSA parses one list-sa event message ({<conn>: {...}}).
func ParseSA(m *vici.Message) ([]SA, error) {
	var out []SA
	for _, conn := range m.Keys() {
		ike, ok := m.Get(conn).(*vici.Message)
		if !ok {
			continue
		}
		sa := SA{Conn: conn}
		sa.State, _ = ike.Get("state").(string)
		if s, ok := ike.Get("established").(string); ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse established %q of %s: %w", s, conn, err)
			}
			sa.Established = time.Duration(n) * time.Second
		}
		if children, ok := ike.Get("child-sas").(*vici.Message); ok {
			for _, ck := range children.Keys() {
				c, ok := children.Get(ck).(*vici.Message)
				if !ok {
					continue
				}
				if st, _ := c.Get("state").(string); st == "INSTALLED" {
					sa.ChildInstalled = true
				}
				for key, dst := range map[string]*int64{"bytes-in": &sa.BytesIn, "bytes-out": &sa.BytesOut,
					"packets-in": &sa.PacketsIn, "packets-out": &sa.PacketsOut} {
					if s, ok := c.Get(key).(string); ok {
						n, err := strconv.ParseInt(s, 10, 64)
						if err != nil {
							return nil, fmt.Errorf("parse %s %q of %s: %w", key, s, conn, err)
						}
						*dst += n
					}
				}
			}
		}
		out = append(out, sa)
	}
	return out, nil
}
