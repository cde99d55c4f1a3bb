package globalnet

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/nat"
)

// Rules is the active gateway's desired translation: every GlobalIngress
// that is not released becomes ingress pairs (global IP:port ↔
// ClusterIP:port) or 1:1 pod addresses, every GlobalEgress that is not
// released SNATs its pods to its namespace's egress IPs, other traffic
// to the remote clusters' IPv4 subnets is SNATed to the layout's egress
// IPs. It is pure. Remote
// IPv6 subnets (a dual-stack cluster's, reached directly:
// addrpolicy.ReachedThroughGlobal) are left out: the table is of family
// ip, so IPv6 traffic passes it untranslated.
//
// Each object is taken whole or not at all. Left out, and explained in
// skipped, are objects whose addresses do not fit the layout (not this
// cluster's ingress range, not an IPv4 ClusterIP, an unknown protocol or
// port) and objects that contend with an older one for an address (a hand
// edit, or two allocators for a moment): the globalnet controller's
// allocator never hands out such pairs, and nat refuses a whole Config
// that holds them, so one bad object must not stop every translation.
// GlobalIngresses take their addresses first, then GlobalEgresses
// (oldest first too); a pod address two GlobalEgresses hold (a pod
// gone from one namespace and its address reused in another, before
// the older object caught up) stays with the older one.
func Rules(layout Layout, ingresses []v1alpha1.GlobalIngress, egresses []v1alpha1.GlobalEgress, remote []netip.Prefix) (cfg nat.Config, skipped []string) {
	remote4 := slices.DeleteFunc(slices.Clone(remote), func(p netip.Prefix) bool { return !p.Addr().Is4() })
	cfg = nat.Config{
		LocalGlobal:  []netip.Prefix{layout.CIDR},
		Remote:       remote4,
		RemoteEgress: remoteEgress(remote4),
		Egress:       slices.Clone(layout.Egress),
	}
	objs := make([]*v1alpha1.GlobalIngress, 0, len(ingresses))
	for i := range ingresses {
		if gi := &ingresses[i]; gi.Spec.ReleasedAt == nil && gi.DeletionTimestamp == nil {
			objs = append(objs, gi)
		}
	}
	// Oldest first: on contention the older allocation keeps its pairs.
	slices.SortFunc(objs, func(a, b *v1alpha1.GlobalIngress) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	held := claims{}
	for _, gi := range objs {
		name := gi.Namespace + "/" + gi.Name
		ins, pods, err := translation(layout, gi.Spec)
		if err == nil {
			err = held.take(name, ins, pods)
		}
		if err != nil {
			skipped = append(skipped, name+": "+err.Error())
			continue
		}
		cfg.Ingress = append(cfg.Ingress, ins...)
		cfg.Pods = append(cfg.Pods, pods...)
	}
	eobjs := make([]*v1alpha1.GlobalEgress, 0, len(egresses))
	for i := range egresses {
		if ge := &egresses[i]; ge.Spec.ReleasedAt == nil && ge.DeletionTimestamp == nil && len(ge.Spec.IPs) > 0 {
			eobjs = append(eobjs, ge)
		}
	}
	slices.SortFunc(eobjs, func(a, b *v1alpha1.GlobalEgress) int {
		return cmp.Or(a.CreationTimestamp.Compare(b.CreationTimestamp.Time), cmp.Compare(a.Name, b.Name))
	})
	for _, ge := range eobjs {
		name := "egress " + ge.Name
		ips, err := egressIPs(layout, ge.Spec.IPs)
		if err == nil {
			err = held.takeKeys(name, wholeKeys(ips))
		}
		if err != nil {
			skipped = append(skipped, name+": "+err.Error())
			continue
		}
		for _, s := range ge.Spec.Pods {
			pod, err := netip.ParseAddr(s)
			if err != nil || !pod.Is4() {
				skipped = append(skipped, fmt.Sprintf("%s: pod %q: not an IPv4 address", name, s))
				continue
			}
			if err := held.takeKeys(name, []string{"egress-pod " + pod.String()}); err != nil {
				skipped = append(skipped, name+": "+err.Error())
				continue
			}
			cfg.PodEgress = append(cfg.PodEgress, nat.PodEgress{Pod: pod, Global: egressIPOf(pod, ips)})
		}
	}
	return cfg, skipped
}

// egressIPOf is the one of a namespace's egress IPs (at least one) its
// pod leaves from: spread by the pod's address, so a pod keeps its IP
// while others come and go.
// remoteEgress is the remote clusters' SNAT sources: the Egress of each
// remote CIDR's ClusterLayout, the layout every member uses. A CIDR inside
// another one of the list adds nothing; one too small for a layout has
// none.
func remoteEgress(remote []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range remote {
		if slices.ContainsFunc(remote, func(o netip.Prefix) bool { return o.Bits() < p.Bits() && o.Contains(p.Addr()) }) {
			continue
		}
		if l, err := ClusterLayout(p); err == nil {
			out = append(out, l.Egress...)
		}
	}
	return out
}

func egressIPOf(pod netip.Addr, ips []netip.Addr) netip.Addr {
	b := pod.As4()
	return ips[(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))%uint32(len(ips))]
}

// egressIPs parses a GlobalEgress's IPs, each an ingress address of
// layout's CIDR (the controller hands them out of that range).
func egressIPs(layout Layout, in []string) ([]netip.Addr, error) {
	out := make([]netip.Addr, 0, len(in))
	for _, s := range in {
		ip, err := netip.ParseAddr(s)
		if err != nil || !layout.Ingress.Contains(ip) {
			return nil, fmt.Errorf("egress IP %q: want an ingress address of %s", s, layout.CIDR)
		}
		out = append(out, ip)
	}
	return out, nil
}

// wholeKeys are the claims keys of global IPs used whole.
func wholeKeys(ips []netip.Addr) []string {
	keys := make([]string, 0, len(ips))
	for _, ip := range ips {
		keys = append(keys, "whole "+ip.String())
	}
	return keys
}

// translation is one GlobalIngress's entries, or why they do not fit.
func translation(layout Layout, spec v1alpha1.GlobalIngressSpec) ([]nat.Ingress, []nat.PodIngress, error) {
	var pods []nat.PodIngress
	for _, p := range spec.Pods {
		pod, err1 := netip.ParseAddr(p.PodIP)
		global, err2 := netip.ParseAddr(p.GlobalIP)
		if err1 != nil || err2 != nil || !pod.Is4() || !layout.Ingress.Contains(global) {
			return nil, nil, fmt.Errorf("pod %q at %q: not an IPv4 pod address and an ingress address of %s", p.PodIP, p.GlobalIP, layout.CIDR)
		}
		pods = append(pods, nat.PodIngress{Global: global, Pod: pod})
	}
	if len(spec.Ports) == 0 {
		return nil, pods, nil
	}
	ip, err1 := netip.ParseAddr(spec.IP)
	target, err2 := netip.ParseAddr(spec.ClusterIP)
	if err1 != nil || err2 != nil || !target.Is4() || !layout.Ingress.Contains(ip) {
		return nil, nil, fmt.Errorf("ip %q, clusterIP %q: want an ingress address of %s and an IPv4 cluster IP", spec.IP, spec.ClusterIP, layout.CIDR)
	}
	var ins []nat.Ingress
	for _, p := range spec.Ports {
		proto := strings.ToLower(p.Protocol)
		if !slices.Contains(nat.Protocols, proto) || p.Port < 1 || p.Port > 65535 || p.GlobalPort < 1 || p.GlobalPort > 65535 {
			return nil, nil, fmt.Errorf("port %s %d → %d: bad protocol or port", p.Protocol, p.GlobalPort, p.Port)
		}
		ins = append(ins, nat.Ingress{
			Protocol: proto,
			Global:   netip.AddrPortFrom(ip, uint16(p.GlobalPort)),
			Target:   netip.AddrPortFrom(target, uint16(p.Port)),
		})
	}
	return ins, pods, nil
}

// claims records which object holds each address the stateless maps key
// on: a global IP:port, a ClusterIP:port (the reply direction), a
// ClusterIP with a global port (the reply's global port and address are
// looked up by that pair: one ClusterIP's global port on two global IPs
// would give it two values), a global IP used whole (1:1 for a pod, or a namespace's egress IP) or for
// ports, a pod, a pod of a namespace with its own egress IPs.
type claims map[string]string

// take gives every key of the entries to owner, all or none: it fails if
// an older owner holds one of them or the entries repeat one.
func (c claims) take(owner string, ins []nat.Ingress, pods []nat.PodIngress) error {
	var keys []string
	for _, in := range ins {
		keys = append(keys,
			in.Protocol+" global "+in.Global.String(),
			in.Protocol+" target "+in.Target.String(),
			in.Protocol+" target-global-port "+netip.AddrPortFrom(in.Target.Addr(), in.Global.Port()).String(),
			"ports-on "+in.Global.Addr().String())
	}
	for _, p := range pods {
		keys = append(keys, "whole "+p.Global.String(), "pod "+p.Pod.String())
	}
	return c.takeKeys(owner, keys)
}

// takeKeys gives keys to owner, all or none (see take).
func (c claims) takeKeys(owner string, keys []string) error {
	own := map[string]bool{}
	for _, k := range keys {
		kind, addr, _ := strings.Cut(k, " ")
		// Many Services carry ports on one global IP (that is the
		// point of IP:port pairs): "ports-on" is shared, the rest are
		// exclusive.
		if kind != "ports-on" {
			if h, ok := c[k]; ok {
				return fmt.Errorf("%s is held by %s (older)", k, h)
			}
			if own[k] {
				return fmt.Errorf("%s twice", k)
			}
		}
		own[k] = true
		// A global IP is either 1:1 or carries ports, never both.
		other := map[string]string{"whole": "ports-on", "ports-on": "whole"}[kind]
		if h, ok := c[other+" "+addr]; other != "" && ok {
			return fmt.Errorf("global IP %s is used by %s the other way", addr, h)
		}
		if other != "" && own[other+" "+addr] {
			return fmt.Errorf("global IP %s is used both ways", addr)
		}
	}
	for _, k := range keys {
		if _, ok := c[k]; !ok {
			c[k] = owner
		}
	}
	return nil
}
