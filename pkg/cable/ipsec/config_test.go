package ipsec

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/strongswan/govici/vici"

	"github.com/causeway-net/causeway/pkg/cable"
)

func TestDerivePSK(t *testing.T) {
	s := []byte("secret")
	if DerivePSK(s, "c1", "c2") != DerivePSK(s, "c2", "c1") {
		t.Fatal("PSK differs between the two ends")
	}
	if DerivePSK(s, "c1", "c2") == DerivePSK(s, "c1", "c3") {
		t.Fatal("two pairs share a PSK")
	}
	if DerivePSK(s, "c1", "c2") == DerivePSK([]byte("other"), "c1", "c2") {
		t.Fatal("PSK does not depend on the secret")
	}
	// "a"+"bc" and "ab"+"c" must not collide.
	if DerivePSK(s, "a", "bc") == DerivePSK(s, "ab", "c") {
		t.Fatal("ambiguous concatenation")
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
		PSK:      DerivePSK([]byte("s"), "c1", "c2"), ESP: ESPProposals(true)}
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
	child := vici.NewMessage()
	child.Set("name", "cw-b")
	child.Set("state", "INSTALLED")
	child.Set("bytes-in", "100")
	child.Set("bytes-out", "250")
	children := vici.NewMessage()
	children.Set("cw-b-3", child)
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
	want := SA{Conn: "cw-b", State: "ESTABLISHED", Established: 42e9, ChildInstalled: true, BytesIn: 100, BytesOut: 250}
	if len(sas) != 1 || sas[0] != want {
		t.Fatalf("got %+v, want %+v", sas, want)
	}
	child.Set("bytes-in", "x")
	if _, err := ParseSA(m); err == nil {
		t.Fatal("bad counter accepted")
	}
}

func TestLastAddr(t *testing.T) {
	for in, want := range map[string]string{"10.97.0.0/16": "10.97.255.255", "10.1.2.0/23": "10.1.3.255", "10.0.0.7/32": "10.0.0.7", "fd00::/120": "fd00::ff"} {
		if got := LastAddr(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("LastAddr(%s) = %s, want %s", in, got, want)
		}
	}
}
