package ipsec

import (
	"crypto/ecdh"
	"crypto/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/strongswan/govici/vici"

	"github.com/causeway-net/causeway/pkg/cable"
)

// The pair's key is the same at both ends and derivable by them only: a
// third member with its own key pair, knowing both public keys and both
// cluster IDs, derives something else.
func TestDerivePSK(t *testing.T) {
	gen := func() *ecdh.PrivateKey {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	pub := func(k *ecdh.PrivateKey) cable.Key { return cable.Key(k.PublicKey().Bytes()) }
	psk := func(priv *ecdh.PrivateKey, remote cable.Key, local, remoteID string) cable.Key {
		k, err := DerivePSK(priv, remote, local, remoteID)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a, b, c := gen(), gen(), gen()
	pair := psk(a, pub(b), "c1", "c2")
	if psk(b, pub(a), "c2", "c1") != pair {
		t.Fatal("the two ends derive different keys")
	}
	for what, k := range map[string]cable.Key{
		"c3 with a's public key, as c2":  psk(c, pub(a), "c2", "c1"),
		"c3 with b's public key, as c1":  psk(c, pub(b), "c1", "c2"),
		"c3 with a's public key, as c3":  psk(c, pub(a), "c3", "c1"),
		"the pair's keys for another ID": psk(a, pub(b), "c1", "c3"),
	} {
		if k == pair {
			t.Errorf("%s derives the pair's key", what)
		}
	}
	if _, err := DerivePSK(a, cable.Key{}, "c1", "c2"); err == nil {
		t.Error("a low-order public key (all zeroes) was accepted")
	}
}

func TestPlugins(t *testing.T) {
	none, gcm := Plugins(func(string) bool { return false })
	if gcm || !slices.Equal(none, BasePlugins) {
		t.Fatalf("no optional plugins: %v gcm=%v", none, gcm)
	}
	all, gcm := Plugins(func(string) bool { return true })
	if !gcm || all[0] != "openssl" || !slices.Contains(all, "kernel-libipsec") {
		t.Fatalf("all plugins: %v gcm=%v", all, gcm)
	}
	if i, j := slices.Index(all, "kernel-libipsec"), slices.Index(all, "kernel-netlink"); i > j {
		t.Fatalf("kernel-libipsec must load before kernel-netlink: %v", all)
	}
	if got := ESPProposals(false); !slices.Equal(got, []string{ESPProposal}) {
		t.Fatalf("esp without gcm: %v", got)
	}
	if got := ESPProposals(true); got[len(got)-1] != ESPProposal {
		t.Fatalf("esp with gcm must keep the common fallback last: %v", got)
	}
}

func TestStrongSwanConf(t *testing.T) {
	f := FilesFor("/var/lib/causeway/cable")
	conf := StrongSwanConf(f, BasePlugins)
	for _, want := range []string{
		"load_modular = no",
		"load = " + strings.Join(BasePlugins, " "),
		"socket = unix:///var/lib/causeway/cable/ipsec/charon.vici",
		"install_routes = no",
		"routing_table = 51806",
		"fwmark = 0xca5e0157",
		"path = /var/lib/causeway/cable/ipsec/charon.log",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("strongswan.conf lacks %q:\n%s", want, conf)
		}
	}
	if got := LoadedPlugins(conf); !slices.Equal(got, BasePlugins) {
		t.Errorf("LoadedPlugins: %v", got)
	}
	if strings.Count(conf, "{") != strings.Count(conf, "}") {
		t.Errorf("unbalanced braces:\n%s", conf)
	}
}

func testPeer() Peer {
	return Peer{ClusterID: "c2", Remote: netip.MustParseAddrPort("198.18.0.2:500"),
		LocalTS:  []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		RemoteTS: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16"), netip.MustParsePrefix("10.96.0.0/16")},
		PSK:      cable.Key{0x42}, ESP: ESPProposals(true)}
}

func TestConnMessage(t *testing.T) {
	m, err := ConnMessage("@c1", netip.MustParseAddr("198.18.0.1"), testPeer())
	if err != nil {
		t.Fatal(err)
	}
	conn, ok := m.Get("cw-c2").(*vici.Message)
	if !ok {
		t.Fatalf("no cw-c2 section: %v", m)
	}
	for k, want := range map[string]string{"version": "2", "encap": "yes", "remote_port": "500"} {
		if got := conn.Get(k); got != want {
			t.Errorf("%s = %v, want %s", k, got, want)
		}
	}
	if got := conn.Get("remote_addrs"); !slices.Equal(got.([]string), []string{"198.18.0.2"}) {
		t.Errorf("remote_addrs %v", got)
	}
	rem := conn.Get("remote").(*vici.Message)
	if rem.Get("id") != "@c2" || rem.Get("auth") != "psk" {
		t.Errorf("remote auth: %v", rem)
	}
	child := conn.Get("children").(*vici.Message).Get("cw-c2").(*vici.Message)
	if got := child.Get("remote_ts").([]string); !slices.Equal(got, []string{"10.2.0.0/16", "10.96.0.0/16"}) {
		t.Errorf("remote_ts %v", got)
	}
	if got := child.Get("local_ts").([]string); !slices.Equal(got, []string{"10.1.0.0/16"}) {
		t.Errorf("local_ts %v", got)
	}
	if child.Get("mode") != "tunnel" || child.Get("start_action") != "none" || child.Get("dpd_action") != "restart" {
		t.Errorf("child actions: %v", child)
	}
	sh, err := SharedMessage("@c1", testPeer())
	if err != nil {
		t.Fatal(err)
	}
	psk := testPeer().PSK
	if sh.Get("data") != string(psk[:]) || !slices.Equal(sh.Get("owners").([]string), []string{"@c1", "@c2"}) || sh.Get("id") != "cw-c2" {
		t.Errorf("shared message: %v", sh)
	}
}

func TestFingerprint(t *testing.T) {
	p := testPeer()
	fp := p.Fingerprint("@c1")
	if p.Fingerprint("@c1") != fp {
		t.Fatal("fingerprint not stable")
	}
	q := p
	q.PSK = cable.Key{1}
	if q.Fingerprint("@c1") == fp {
		t.Error("PSK change not detected")
	}
	q = p
	q.RemoteTS = q.RemoteTS[:1]
	if q.Fingerprint("@c1") == fp {
		t.Error("subnet change not detected")
	}
}

func TestParseSA(t *testing.T) {
	// A CHILD_SA as list-sas reports it: its state, then the counters
	// bytes-in, bytes-out, packets-in, packets-out.
	childSA := func(state string, counters ...string) *vici.Message {
		m := vici.NewMessage()
		m.Set("name", "cw-b")
		m.Set("state", state)
		for i, key := range []string{"bytes-in", "bytes-out", "packets-in", "packets-out"} {
			m.Set(key, counters[i])
		}
		return m
	}
	child := childSA("INSTALLED", "100", "250", "3", "5")
	children := vici.NewMessage()
	children.Set("cw-b-3", child)
	// A CHILD_SA being rekeyed: its counters add to the new one's.
	children.Set("cw-b-2", childSA("REKEYED", "1000", "2000", "10", "20"))
	ike := vici.NewMessage()
	ike.Set("state", "ESTABLISHED")
	ike.Set("established", "42")
	ike.Set("child-sas", children)
	m := vici.NewMessage()
	m.Set("cw-b", ike)
	sas, err := ParseSA(m)
	if err != nil {
		t.Fatal(err)
	}
	want := SA{Conn: "cw-b", State: "ESTABLISHED", Established: 42e9, ChildInstalled: true, BytesIn: 1100, BytesOut: 2250,
		PacketsIn: 13, PacketsOut: 25}
	if len(sas) != 1 || sas[0] != want {
		t.Fatalf("got %+v, want %+v", sas, want)
	}
	child.Set("bytes-in", "x")
	if _, err := ParseSA(m); err == nil {
		t.Fatal("bad counter accepted")
	}
}

func TestSourceAddr(t *testing.T) {
	for in, want := range map[string]string{"10.97.0.0/16": "10.97.255.255", "10.1.2.0/23": "10.1.3.255", "10.0.0.7/32": "10.0.0.7",
		"fd00:10:96::/112": "fd00:10:96::", "fd00::/120": "fd00::", "fd00:1::/64": "fd00:1::"} {
		if got := SourceAddr(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("SourceAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
