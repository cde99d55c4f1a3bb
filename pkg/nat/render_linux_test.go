package nat

import (
	"context"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// applied runs the full transaction of c on a fresh Fake and returns it
// with the nft text knftables wrote for it.
func applied(t *testing.T, c Config) (*knftables.Fake, string) {
	t.Helper()
	d, err := c.compile()
	if err != nil {
		t.Fatal(err)
	}
	fake := knftables.NewFake(knftables.IPv4Family, TableName)
	tx := fake.NewTransaction()
	addFull(tx, d)
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatalf("full transaction: %v\n%s", err, tx)
	}
	return fake, tx.String()
}

func rules(fake *knftables.Fake, chain string) []string {
	var out []string
	for _, r := range fake.Table.Chains[chain].Rules {
		out = append(out, r.Rule)
	}
	return out
}

func TestFullTransaction(t *testing.T) {
	fake, text := applied(t, smallConfig())
	for _, want := range []string{
		"add table ip causeway-globalnet\ndelete table ip causeway-globalnet\nadd table ip causeway-globalnet\n", // atomic replace
		"add set ip causeway-globalnet remote { type ipv4_addr ; flags interval ; }\n",
		"add map ip causeway-globalnet tcp-in-addr { type ipv4_addr . inet_service : ipv4_addr ; }\n",
		"add map ip causeway-globalnet tcp-in-port { type ipv4_addr . inet_service : inet_service ; }\n",
		"add element ip causeway-globalnet tcp-in-addr { 242.0.1.2 . 1024 : 10.96.0.10 }\n",
		"add chain ip causeway-globalnet ingress { type filter hook prerouting priority -310 ; policy accept ; }\n", // raw - 10
		"add chain ip causeway-globalnet reply { type filter hook postrouting priority 110 ; policy accept ; }\n",   // srcnat + 10
		"add chain ip causeway-globalnet egress { type nat hook postrouting priority 90 ; policy accept ; }\n",      // srcnat - 10
		"add chain ip causeway-globalnet canary\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("full transaction lacks\n%s--- transaction:\n%s", want, text)
		}
	}
	want := map[string]map[string]string{
		SetRemote:       {"242.0.2.0/24": "", "242.0.3.0/24": ""},                                                 // the /25 inside the /24 dropped
		SetRemoteEgress: {"242.0.2.253/32": "", "242.0.2.254/32": "", "242.0.3.253/32": "", "242.0.3.254/32": ""}, // the remotes' layouts
		SetLocal:        {"242.0.1.0/24": ""},
		"tcp-in-addr":   {"242.0.1.2 . 1024": "10.96.0.10", "242.0.1.2 . 1025": "10.96.0.10"},
		"tcp-in-port":   {"10.96.0.10 . 1024": "80", "10.96.0.10 . 1025": "443"},
		"tcp-out-port":  {"10.96.0.10 . 80": "1024", "10.96.0.10 . 443": "1025"},
		"tcp-out-addr":  {"10.96.0.10 . 1024": "242.0.1.2", "10.96.0.10 . 1025": "242.0.1.2"},
		"udp-in-addr":   {"242.0.1.2 . 1026": "10.96.0.10"},
		"udp-in-port":   {"10.96.0.10 . 1026": "53"},
		"udp-out-port":  {"10.96.0.10 . 53": "1026"},
		"udp-out-addr":  {"10.96.0.10 . 1026": "242.0.1.2"},
		"sctp-in-addr":  {}, "sctp-in-port": {}, "sctp-out-port": {}, "sctp-out-addr": {}, // declared, empty
		MapPodIn:     {"242.0.1.252": "10.244.0.6"},
		MapPodOut:    {"10.244.0.6": "242.0.1.252"},
		MapPodEgress: {"10.244.0.7": "242.0.1.251", "10.244.0.8": "242.0.1.251"},
	}
	if got := fakeElems(fake); !sameElems(got, want) {
		t.Errorf("elements %v\nwant %v", got, want)
	}
	for chain, want := range map[string][]string{
		ChainIngress: {
			"ip daddr set ip daddr . tcp dport map @tcp-in-addr tcp dport set ip daddr . tcp dport map @tcp-in-port",
			"ip daddr set ip daddr . udp dport map @udp-in-addr udp dport set ip daddr . udp dport map @udp-in-port",
			"ip daddr set ip daddr . sctp dport map @sctp-in-addr sctp dport set ip daddr . sctp dport map @sctp-in-port",
			"ip daddr set ip daddr map @pod-in",
		},
		ChainReply: {
			"ct state new ip daddr @remote-egress drop",
			"ct direction reply ip daddr @remote tcp sport set ip saddr . tcp sport map @tcp-out-port ip saddr set ip saddr . tcp sport map @tcp-out-addr",
			"ct direction reply ip daddr @remote udp sport set ip saddr . udp sport map @udp-out-port ip saddr set ip saddr . udp sport map @udp-out-addr",
			"ct direction reply ip daddr @remote sctp sport set ip saddr . sctp sport map @sctp-out-port ip saddr set ip saddr . sctp sport map @sctp-out-addr",
			"ip daddr @remote ip saddr set ip saddr map @pod-out",
			"ct direction reply ip daddr @remote ip saddr != @local drop",
		},
		ChainEgress: {
			"ip daddr @remote ip saddr != @local ip saddr != @pod-out snat to ip saddr map @pod-egress",
			"ip daddr @remote ip saddr != @local ip saddr != @pod-out snat to 242.0.1.253-242.0.1.254 persistent",
		},
		ChainCanary: nil,
	} {
		if got := rules(fake, chain); !slices.Equal(got, want) {
			t.Errorf("chain %s rules\n%q\nwant\n%q", chain, got, want)
		}
	}

	scoped := smallConfig()
	scoped.Device = "cw-gw"
	fake, _ = applied(t, scoped)
	// Every rule but the drop of new flows to a remote's egress address,
	// which holds whatever the way out.
	unscoped := "ct state new ip daddr @" + SetRemoteEgress + " drop"
	n := 0
	for chain, prefix := range map[string]string{ChainIngress: `iifname "cw-gw" `, ChainReply: `oifname "cw-gw" `, ChainEgress: `oifname "cw-gw" `} {
		for _, r := range rules(fake, chain) {
			if r == unscoped {
				continue
			}
			if !strings.HasPrefix(r, prefix) {
				t.Errorf("chain %s rule %q not scoped by %q", chain, r, prefix)
			}
			n++
		}
	}
	if n != 11 || !slices.Contains(rules(fake, ChainReply), unscoped) {
		t.Errorf("%d rules scoped to the device, want all 11 but %q, which is unscoped in chain %s", n, unscoped, ChainReply)
	}
	scoped.Device = "bad dev"
	if _, err := scoped.compile(); err == nil {
		t.Error("device \"bad dev\" accepted")
	}
	noEgress := smallConfig()
	noEgress.Egress = nil
	// Without egress IPs only the namespaces' own egress IPs are SNAT sources.
	if fake, _ = applied(t, noEgress); len(rules(fake, ChainEgress)) != 1 {
		t.Errorf("no egress IPs but SNAT rules %q", rules(fake, ChainEgress))
	}
}

func TestDiffTransaction(t *testing.T) {
	fake, _ := applied(t, smallConfig())
	old, _ := smallConfig().compile()
	c := smallConfig()
	c.Ingress[1].Target = ap("10.96.0.10:8443")                                                                            // value change
	c.Ingress = append(c.Ingress[:2], Ingress{Protocol: "sctp", Global: ap("242.0.1.2:1027"), Target: ap("10.96.0.10:9")}) // udp gone, sctp new
	c.Remote = c.Remote[:1]
	c.RemoteEgress = c.RemoteEgress[:2] // 242.0.2.0/24 left, and its egress addresses with it
	d, err := c.compile()
	if err != nil {
		t.Fatal(err)
	}
	tx := fake.NewTransaction()
	probeCanary(tx)
	added, removed := addDiff(tx, old, d)
	want := `flush chain ip causeway-globalnet canary
delete element ip causeway-globalnet remote { 242.0.2.0/24 }
delete element ip causeway-globalnet remote-egress { 242.0.2.253/32 }
delete element ip causeway-globalnet remote-egress { 242.0.2.254/32 }
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
	if got := tx.String(); got != want {
		t.Errorf("diff transaction:\n%s\nwant:\n%s", got, want)
	}
	if added != 6 || removed != 9 {
		t.Errorf("added %d removed %d, want 6 and 9", added, removed)
	}
	if err := fake.Run(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	if got := fakeElems(fake); !sameElems(got, desiredElems(d)) {
		t.Errorf("after the diff %v\nwant %v", got, desiredElems(d))
	}
	tx = fake.NewTransaction()
	if a, r := addDiff(tx, d, d); a+r != 0 || tx.NumOperations() != 0 {
		t.Errorf("diff of equal states: %s", tx)
	}
}
