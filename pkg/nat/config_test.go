package nat

import (
	"cmp"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
func ip(s string) netip.Addr     { return netip.MustParseAddr(s) }

func smallConfig() Config {
	return Config{
		LocalGlobal: []netip.Prefix{netip.MustParsePrefix("242.0.1.0/24")},
		Remote:      []netip.Prefix{netip.MustParsePrefix("242.0.3.0/24"), netip.MustParsePrefix("242.0.2.0/24"), netip.MustParsePrefix("242.0.2.128/25")},
		// The remotes' egress addresses (their layouts' last two hosts).
		RemoteEgress: []netip.Addr{ip("242.0.3.253"), ip("242.0.3.254"), ip("242.0.2.253"), ip("242.0.2.254")},
		Egress:       []netip.Addr{ip("242.0.1.253"), ip("242.0.1.254")},
		Ingress: []Ingress{
			{Protocol: "tcp", Global: ap("242.0.1.2:1024"), Target: ap("10.96.0.10:80")},
			{Protocol: "tcp", Global: ap("242.0.1.2:1025"), Target: ap("10.96.0.10:443")},
			{Protocol: "udp", Global: ap("242.0.1.2:1026"), Target: ap("10.96.0.10:53")},
		},
		Pods:      []PodIngress{{Global: ip("242.0.1.252"), Pod: ip("10.244.0.6")}},
		PodEgress: []PodEgress{{Pod: ip("10.244.0.7"), Global: ip("242.0.1.251")}, {Pod: ip("10.244.0.8"), Global: ip("242.0.1.251")}},
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
		{"pod with two egress IPs", func(c *Config) {
			c.PodEgress = append(c.PodEgress, PodEgress{Pod: ip("10.244.0.7"), Global: ip("242.0.1.250")})
		}},
		{"egress IP carrying ports", func(c *Config) { c.PodEgress[0].Global = ip("242.0.1.2") }},
		{"egress IP 1:1 for a pod", func(c *Config) { c.PodEgress[0].Global = ip("242.0.1.252") }},
		{"pod egress outside the local global CIDR", func(c *Config) { c.PodEgress[0].Global = ip("242.0.3.9") }},
		{"remote egress outside the remote CIDRs", func(c *Config) { c.RemoteEgress = append(c.RemoteEgress, ip("242.0.1.253")) }},
		{"remote egress IPv6", func(c *Config) { c.RemoteEgress = append(c.RemoteEgress, ip("fd00::1")) }},
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
