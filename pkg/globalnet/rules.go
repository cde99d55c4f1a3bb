package globalnet

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/nat"
)

// Rules is the active gateway's desired translation: every GlobalIngress
// that is not released becomes ingress pairs (global IP:port ↔
// ClusterIP:port) or 1:1 pod addresses, traffic to the remote clusters'
// subnets is SNATed to the layout's egress IPs. It is pure. Objects whose
// addresses do not fit the layout (not this cluster's global CIDR, not a
// ClusterIP, an unknown protocol) are left out and explained in skipped;
// they never reach the kernel.
func Rules(layout nat.Layout, ingresses []v1alpha1.GlobalIngress, remote []netip.Prefix) (cfg nat.Config, skipped []string) {
	cfg = nat.Config{
		LocalGlobal: []netip.Prefix{layout.CIDR},
		Remote:      slices.Clone(remote),
		Egress:      slices.Clone(layout.Egress),
	}
	for i := range ingresses {
		gi := &ingresses[i]
		if gi.Spec.ReleasedAt != nil || gi.DeletionTimestamp != nil {
			continue
		}
		name := gi.Namespace + "/" + gi.Name
		skip := func(format string, args ...any) {
			skipped = append(skipped, name+": "+fmt.Sprintf(format, args...))
		}
		for _, p := range gi.Spec.Pods {
			pod, err1 := netip.ParseAddr(p.PodIP)
			global, err2 := netip.ParseAddr(p.GlobalIP)
			if err1 != nil || err2 != nil || !pod.Is4() || !layout.Ingress.Contains(global) {
				skip("pod %q at %q: not an IPv4 pod address and an ingress address of %s", p.PodIP, p.GlobalIP, layout.CIDR)
				continue
			}
			cfg.Pods = append(cfg.Pods, nat.PodIngress{Global: global, Pod: pod})
		}
		if len(gi.Spec.Ports) == 0 {
			continue
		}
		ip, err1 := netip.ParseAddr(gi.Spec.IP)
		target, err2 := netip.ParseAddr(gi.Spec.ClusterIP)
		if err1 != nil || err2 != nil || !target.Is4() || !layout.Ingress.Contains(ip) {
			skip("ip %q, clusterIP %q: want an ingress address of %s and an IPv4 cluster IP", gi.Spec.IP, gi.Spec.ClusterIP, layout.CIDR)
			continue
		}
		for _, p := range gi.Spec.Ports {
			proto := strings.ToLower(p.Protocol)
			if !slices.Contains(nat.Protocols, proto) || p.Port < 1 || p.Port > 65535 || p.GlobalPort < 1 || p.GlobalPort > 65535 {
				skip("port %s %d → %d: bad protocol or port", p.Protocol, p.GlobalPort, p.Port)
				continue
			}
			cfg.Ingress = append(cfg.Ingress, nat.Ingress{
				Protocol: proto,
				Global:   netip.AddrPortFrom(ip, uint16(p.GlobalPort)),
				Target:   netip.AddrPortFrom(target, uint16(p.Port)),
			})
		}
	}
	return cfg, skipped
}
