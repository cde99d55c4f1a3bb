package nat

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func smallConfig() Config {
	return Config{
		LocalGlobal: []netip.Prefix{netip.MustParsePrefix("242.0.1.0/24")},
		Remote:      []netip.Prefix{netip.MustParsePrefix("242.0.3.0/24"), netip.MustParsePrefix("242.0.2.0/24"), netip.MustParsePrefix("242.0.2.128/25")},
		Egress:      []netip.Addr{ip("242.0.1.253"), ip("242.0.1.254")},
		Ingress: []Ingress{
			{Protocol: "tcp", Global: ap("242.0.1.2:1024"), Target: ap("10.96.0.10:80")},
			{Protocol: "tcp", Global: ap("242.0.1.2:1025"), Target: ap("10.96.0.10:443")},
			{Protocol: "udp", Global: ap("242.0.1.2:1026"), Target: ap("10.96.0.10:53")},
		},
		Pods: []PodIngress{{Global: ip("242.0.1.252"), Pod: ip("10.244.0.6")}},
	}
}

func TestRenderFull(t *testing.T) {
	d, err := smallConfig().compile()
	if err != nil {
		t.Fatal(err)
	}
	got := renderFull(d)
	for _, want := range []string{
		"add table ip causeway-globalnet\ndelete table ip causeway-globalnet\ntable ip causeway-globalnet {\n",
		"\tset remote {\n\t\ttype ipv4_addr; flags interval;\n\t\telements = { 242.0.2.0/24, 242.0.3.0/24 }\n",                                            // the /25 inside the /24 dropped
		"\tset remote-egress {\n\t\ttype ipv4_addr; flags interval;\n\t\telements = { 242.0.2.253/32, 242.0.2.254/32, 242.0.3.253/32, 242.0.3.254/32 }\n", // the remotes' layouts
		"\tmap tcp-in-addr {\n\t\ttype ipv4_addr . inet_service : ipv4_addr;\n\t\telements = { 242.0.1.2 . 1024 : 10.96.0.10, 242.0.1.2 . 1025 : 10.96.0.10 }\n",
		"\tmap tcp-in-port {\n\t\ttype ipv4_addr . inet_service : inet_service;\n\t\telements = { 10.96.0.10 . 1024 : 80, 10.96.0.10 . 1025 : 443 }\n",
		"\tmap tcp-out-port {\n\t\ttype ipv4_addr . inet_service : inet_service;\n\t\telements = { 10.96.0.10 . 80 : 1024, 10.96.0.10 . 443 : 1025 }\n",
		"\tmap udp-out-addr {\n\t\ttype ipv4_addr . inet_service : ipv4_addr;\n\t\telements = { 10.96.0.10 . 1026 : 242.0.1.2 }\n",
		"\tmap sctp-in-addr {\n\t\ttype ipv4_addr . inet_service : ipv4_addr;\n\t}\n", // declared, empty
		"\tmap pod-in {\n\t\ttype ipv4_addr : ipv4_addr;\n\t\telements = { 242.0.1.252 : 10.244.0.6 }\n",
		"\tchain ingress {\n\t\ttype filter hook prerouting priority raw - 10; policy accept;\n",
		"\t\tip daddr set ip daddr . tcp dport map @tcp-in-addr tcp dport set ip daddr . tcp dport map @tcp-in-port\n",
		"\t\tip daddr set ip daddr map @pod-in\n",
		"\tchain reply {\n\t\ttype filter hook postrouting priority srcnat + 10; policy accept;\n\t\tct state new ip daddr @remote-egress drop\n",
		"\t\tct direction reply ip daddr @remote udp sport set ip saddr . udp sport map @udp-out-port ip saddr set ip saddr . udp sport map @udp-out-addr\n",
		"\t\tip daddr @remote ip saddr set ip saddr map @pod-out\n\t\tct direction reply ip daddr @remote ip saddr != @local drop\n\t}\n",
		"\tchain egress {\n\t\ttype nat hook postrouting priority srcnat - 10; policy accept;\n\t\tip daddr @remote ip saddr != @local ip saddr != @pod-out snat to 242.0.1.253-242.0.1.254 persistent\n\t}\n",
		"\tchain canary {\n\t}\n}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("full script lacks\n%s\n--- script:\n%s", want, got)
		}
	}
	scoped := smallConfig()
	scoped.Device = "cw-gw"
	d, err = scoped.compile()
	if err != nil {
		t.Fatal(err)
	}
	s := renderFull(d)
	for _, want := range []string{
		"\t\tiifname \"cw-gw\" ip daddr set ip daddr . tcp dport map @tcp-in-addr",
		"\t\tiifname \"cw-gw\" ip daddr set ip daddr map @pod-in\n",
		"\t\toifname \"cw-gw\" ct state new ip daddr @remote-egress drop\n",
		"\t\toifname \"cw-gw\" ct direction reply ip daddr @remote ip saddr != @local drop\n",
		"\t\toifname \"cw-gw\" ip daddr @remote ip saddr != @local ip saddr != @pod-out snat to",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("scoped script lacks\n%s\n--- script:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "ifname"); n != 11 {
		t.Errorf("%d rules scoped to the device, want all 11", n)
	}
	scoped.Device = "bad dev"
	if _, err := scoped.compile(); err == nil {
		t.Error("device \"bad dev\" accepted")
	}
	noEgress := smallConfig()
	noEgress.Egress = nil
	d, _ = noEgress.compile()
	if s := renderFull(d); strings.Contains(s, "snat") {
		t.Errorf("no egress IPs but SNAT rendered:\n%s", s)
	}
}

func TestRenderDiff(t *testing.T) {
	old, _ := smallConfig().compile()
	c := smallConfig()
	c.Ingress[1].Target = ap("10.96.0.10:8443")                                                                            // value change
	c.Ingress = append(c.Ingress[:2], Ingress{Protocol: "sctp", Global: ap("242.0.1.2:1027"), Target: ap("10.96.0.10:9")}) // udp gone, sctp new
	c.Remote = c.Remote[:1]
	d, err := c.compile()
	if err != nil {
		t.Fatal(err)
	}
	got, added, removed := renderDiff(old, d)
	want := `flush chain ip causeway-globalnet canary
delete element ip causeway-globalnet remote { 242.0.2.0/24 }
delete element ip causeway-globalnet remote-egress { 242.0.2.253/32, 242.0.2.254/32 }
delete element ip causeway-globalnet tcp-in-port { 10.96.0.10 . 1025 }
delete element ip causeway-globalnet tcp-out-port { 10.96.0.10 . 443 }
delete element ip causeway-globalnet udp-in-addr { 242.0.1.2 . 1026 }
delete element ip causeway-globalnet udp-in-port { 10.96.0.10 . 1026 }
delete element ip causeway-globalnet udp-out-port { 10.96.0.10 . 53 }
delete element ip causeway-globalnet udp-out-addr { 10.96.0.10 . 1026 }
add element ip causeway-globalnet tcp-in-port { 10.96.0.10 . 1025 : 8443 }
add element ip causeway-globalnet tcp-out-port { 10.96.0.10 . 8443 : 1025 }
add element ip causeway-globalnet sctp-in-addr { 242.0.1.2 . 1027 : 10.96.0.10 }
add element ip causeway-globalnet sctp-in-port { 10.96.0.10 . 1027 : 9 }
add element ip causeway-globalnet sctp-out-port { 10.96.0.10 . 9 : 1027 }
add element ip causeway-globalnet sctp-out-addr { 10.96.0.10 . 1027 : 242.0.1.2 }
`
	if got != want {
		t.Errorf("diff script:\n%s\nwant:\n%s", got, want)
	}
	if added != 6 || removed != 9 {
		t.Errorf("added %d removed %d, want 6 and 9", added, removed)
	}
	if s, a, r := renderDiff(d, d); a+r != 0 || strings.Contains(s, "element") {
		t.Errorf("diff of equal states: %q", s)
	}
}

func TestCompileRefusesAmbiguousConfigs(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"same global pair twice", func(c *Config) {
			c.Ingress = append(c.Ingress, Ingress{Protocol: "tcp", Global: ap("242.0.1.2:1024"), Target: ap("10.96.0.11:80")})
		}},
		{"one ClusterIP on two global IPs with the same global port", func(c *Config) {
			c.Ingress = append(c.Ingress, Ingress{Protocol: "tcp", Global: ap("242.0.1.3:1024"), Target: ap("10.96.0.10:81")})
		}},
		{"one service port behind two global ports", func(c *Config) {
			c.Ingress = append(c.Ingress, Ingress{Protocol: "tcp", Global: ap("242.0.1.2:1030"), Target: ap("10.96.0.10:80")})
		}},
		{"global IP 1:1 and with ports", func(c *Config) { c.Pods = append(c.Pods, PodIngress{Global: ip("242.0.1.2"), Pod: ip("10.244.0.9")}) }},
		{"pod twice", func(c *Config) { c.Pods = append(c.Pods, PodIngress{Global: ip("242.0.1.251"), Pod: ip("10.244.0.6")}) }},
		{"unknown protocol", func(c *Config) { c.Ingress[0].Protocol = "TCP" }},
		{"zero port", func(c *Config) { c.Ingress[0].Target = ap("10.96.0.10:0") }},
		{"IPv6 target", func(c *Config) { c.Ingress[0].Target = ap("[fd00::1]:80") }},
		{"egress not contiguous", func(c *Config) { c.Egress = []netip.Addr{ip("242.0.1.252"), ip("242.0.1.254")} }},
		{"ingress outside the local global CIDR", func(c *Config) { c.Ingress[0].Global = ap("242.0.3.2:1024") }},
		{"pod outside the local global CIDR", func(c *Config) { c.Pods[0].Global = ip("242.0.3.9") }},
		{"egress outside the local global CIDR", func(c *Config) { c.Egress = []netip.Addr{ip("242.0.3.253")} }},
		{"remote not canonical", func(c *Config) { c.Remote = []netip.Prefix{netip.MustParsePrefix("242.0.3.1/24")} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := smallConfig()
			tc.mod(&c)
			if err := c.Validate(); !errors.Is(err, ErrConfig) {
				t.Errorf("compile: %v, want ErrConfig", err)
			}
		})
	}
	// The same entry twice is harmless.
	c := smallConfig()
	c.Ingress = append(c.Ingress, c.Ingress[0])
	if _, err := c.compile(); err != nil {
		t.Errorf("duplicate identical entry: %v", err)
	}
}

func TestSortElems(t *testing.T) {
	for _, n := range []int{0, 1, 5, 255, 256, 3000} {
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		es := make([]elem, n)
		for i := range es {
			es[i] = elem{k: rng.Uint64() >> 16, v: uint32(i)}
			if i%7 == 0 && i > 0 {
				es[i].k = es[i-1].k & 0xffff00ffffff // shared bytes, duplicates
			}
		}
		want := slices.Clone(es)
		slices.SortStableFunc(want, func(a, b elem) int { return cmp.Compare(a.k, b.k) })
		sortElems(es)
		if !slices.EqualFunc(es, want, func(a, b elem) bool { return a.k == b.k }) {
			t.Errorf("n=%d: not sorted by key", n)
		}
	}
}
