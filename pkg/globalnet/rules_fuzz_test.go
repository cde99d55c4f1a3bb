package globalnet

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// FuzzRules: whatever GlobalIngress and GlobalEgress objects the cluster
// holds (written by the globalnet controller, or by hand; a
// GlobalEgress's pods are what tenants run), Rules never panics, returns a Config
// that pkg/nat accepts whole (one bad object never stops every
// translation), accounts for every live object (translated or skipped),
// and does not depend on the objects' order. The remote subnets (what the
// gateway's policy accepted: global CIDRs of any size inside the
// supernet, contained or repeated ones, IPv6 subnets) are fuzzed too:
// every remote egress address lies in a remote IPv4 subnet.
func FuzzRules(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2})
	f.Add([]byte{7, 0, 1, 7, 0, 1, 7, 0, 1, 200, 3, 3, 9, 9, 9})
	f.Fuzz(func(t *testing.T, data []byte) {
		layout, err := ClusterLayout(netip.MustParsePrefix("242.0.1.0/24"))
		if err != nil {
			t.Fatal(err)
		}
		in, eg, remote := fuzzIngresses(data), fuzzEgresses(data), fuzzRemotes(data)
		cfg, skipped := Rules(layout, in, eg, remote)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Rules gave a Config nat refuses: %v\ninput %+v", err, in)
		}
		// Every live object not skipped has all its entries in cfg.
		isSkipped := map[string]bool{}
		for _, sk := range skipped {
			name, _, _ := strings.Cut(sk, ": ")
			isSkipped[name] = true
		}
		global := map[netip.AddrPort]bool{}
		for _, i := range cfg.Ingress {
			global[i.Global] = true
		}
		pods := map[netip.Addr]bool{}
		for _, p := range cfg.Pods {
			pods[p.Pod] = true
		}
		for _, gi := range in {
			if gi.Spec.ReleasedAt != nil || isSkipped[gi.Namespace+"/"+gi.Name] {
				continue
			}
			for _, p := range gi.Spec.Ports {
				if a := netip.AddrPortFrom(netip.MustParseAddr(gi.Spec.IP), uint16(p.GlobalPort)); !global[a] {
					t.Fatalf("%s neither skipped nor translated: %s missing\n%+v", gi.Name, a, cfg)
				}
			}
			for _, p := range gi.Spec.Pods {
				if !pods[netip.MustParseAddr(p.PodIP)] {
					t.Fatalf("%s neither skipped nor translated: pod %s missing\n%+v", gi.Name, p.PodIP, cfg)
				}
			}
		}
		for _, a := range cfg.RemoteEgress {
			if !slices.ContainsFunc(remote, func(p netip.Prefix) bool { return p.Contains(a) }) {
				t.Fatalf("remote egress %s outside every remote subnet %v", a, remote)
			}
		}
		egressOf := map[netip.Addr]bool{}
		for _, p := range cfg.PodEgress {
			egressOf[p.Pod] = true
		}
		for _, ge := range eg {
			if ge.Spec.ReleasedAt != nil || isSkipped["egress "+ge.Name] {
				continue
			}
			for _, p := range ge.Spec.Pods {
				if a, err := netip.ParseAddr(p); err == nil && a.Is4() && !egressOf[a] {
					t.Fatalf("egress %s neither skipped nor translated: pod %s missing\n%+v", ge.Name, p, cfg)
				}
			}
		}
		rev := slices.Clone(in)
		slices.Reverse(rev)
		egRev := slices.Clone(eg)
		slices.Reverse(egRev)
		remoteRev := slices.Clone(remote)
		slices.Reverse(remoteRev)
		cfg2, skipped2 := Rules(layout, rev, egRev, remoteRev)
		byAddrBits := func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		}
		slices.SortFunc(cfg2.Remote, byAddrBits)
		slices.SortFunc(cfg.Remote, byAddrBits)
		slices.SortFunc(cfg2.RemoteEgress, netip.Addr.Compare)
		slices.SortFunc(cfg.RemoteEgress, netip.Addr.Compare)
		if !reflect.DeepEqual(cfg, cfg2) || !slices.Equal(skipped, skipped2) {
			t.Fatalf("Rules depends on the input order:\n%+v %v\n%+v %v", cfg, skipped, cfg2, skipped2)
		}
	})
}

// fuzzRemotes decodes data into one to four remote subnets, picked by
// its first bytes from global CIDRs the policy could accept besides the
// local 242.0.1.0/24: other clusters' of every size (one contained in
// another, one too small for a layout), and IPv6.
func fuzzRemotes(data []byte) []netip.Prefix {
	pool := []string{"242.0.2.0/24", "242.0.2.0/23", "242.0.2.128/25", "242.0.3.0/30", "242.0.4.0/22", "242.1.0.0/16", "fd00::/64"}
	if len(data) == 0 {
		return []netip.Prefix{netip.MustParsePrefix(pool[0])}
	}
	n := 1 + int(data[0])%4
	out := make([]netip.Prefix, 0, n)
	for i := range n {
		b := byte(i)
		if i+1 < len(data) {
			b = data[i+1]
		}
		out = append(out, netip.MustParsePrefix(pool[int(b)%len(pool)]))
	}
	return out
}

// fuzzIngresses decodes data into GlobalIngress objects, 5 bytes each:
// global IP, ClusterIP, protocol and port, global port, and whether it
// is released or carries a pod address. Addresses come from small sets
// (inside and outside the layout's ingress range, its health-check and
// egress addresses, IPv6, garbage) so that objects contend for them.
func fuzzIngresses(data []byte) []v1alpha1.GlobalIngress {
	globals := []string{"242.0.1.2", "242.0.1.3", "242.0.1.1", "242.0.1.253", "242.0.2.2", "fd00::2", "", "nope"}
	targets := []string{"10.96.0.10", "10.96.0.11", "10.96.0.12", "fd00:96::1", "", "10.96.0.10/32"}
	protos := []string{"TCP", "UDP", "SCTP", "ICMP", ""}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var out []v1alpha1.GlobalIngress
	for i := 0; i+5 <= len(data) && len(out) < 16; i += 5 {
		b := data[i : i+5]
		spec := v1alpha1.GlobalIngressSpec{IP: globals[int(b[0])%len(globals)], ClusterIP: targets[int(b[1])%len(targets)]}
		if b[4]&1 == 0 {
			spec.Ports = []v1alpha1.GlobalIngressPort{{Protocol: protos[int(b[2])%len(protos)], Port: int32(b[2]) % 4 * 20,
				GlobalPort: 1020 + int32(b[3])%8}}
		}
		if b[4]&2 != 0 {
			spec.Pods = []v1alpha1.GlobalPodAddress{{PodIP: targets[int(b[3])%len(targets)], GlobalIP: globals[int(b[2])%len(globals)]}}
		}
		if b[4]&4 != 0 {
			now := metav1.NewMicroTime(t0)
			spec.ReleasedAt = &now
		}
		out = append(out, v1alpha1.GlobalIngress{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: fmt.Sprintf("s%d", len(out)),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(b[4]>>3) * time.Second))}, Spec: spec})
	}
	return out
}

// fuzzEgresses decodes data into GlobalEgress objects, one per 5 bytes
// whose last has bit 3 set: an egress IP (the same small set as the
// ingresses' global IPs, so that the two contend), two pod addresses
// from a small set, released or not.
func fuzzEgresses(data []byte) []v1alpha1.GlobalEgress {
	globals := []string{"242.0.1.2", "242.0.1.3", "242.0.1.1", "242.0.1.253", "242.0.2.2", "fd00::2", "", "nope"}
	pods := []string{"10.244.1.1", "10.244.1.2", "10.96.0.10", "fd00::5", "x"}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var out []v1alpha1.GlobalEgress
	for i := 0; i+5 <= len(data) && len(out) < 8; i += 5 {
		b := data[i : i+5]
		if b[4]&8 == 0 {
			continue
		}
		spec := v1alpha1.GlobalEgressSpec{IPs: []string{globals[int(b[1])%len(globals)]},
			Pods: []string{pods[int(b[2])%len(pods)], pods[int(b[3])%len(pods)]}}
		if b[0]&1 != 0 {
			spec.IPs = append(spec.IPs, globals[int(b[0]>>1)%len(globals)])
		}
		if b[4]&4 != 0 {
			now := metav1.NewMicroTime(t0)
			spec.ReleasedAt = &now
		}
		out = append(out, v1alpha1.GlobalEgress{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns%d", len(out)),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(b[4]>>4) * time.Second))}, Spec: spec})
	}
	return out
}
