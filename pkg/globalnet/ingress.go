package globalnet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// The global addresses of this cluster's exported Services, the
// allocation the globalnet controller (pkg/globalnet/controller) makes
// and persists in GlobalIngress objects. Its verbs are its own: Assign
// (hand out or keep a Service's addresses), Replay (re-hold persisted
// ones after a restart), Free (give them back). ClaimCIDR and
// ReleaseCIDR are this cluster's global CIDR in the broker (cidr.go);
// Allocate and Release are the clusterset VIPs' (pkg/mcs) and pkg/nat's
// Allocator methods underneath.

// NewIngressAllocator returns the allocator of a cluster's global CIDR:
// the ingress range of ClusterLayout (the layout the gateway uses),
// ports from DefaultPortRange.
func NewIngressAllocator(cidr netip.Prefix) (*Allocator, error) {
	l, err := ClusterLayout(cidr)
	if err != nil {
		return nil, err
	}
	return NewAllocator(l.Ingress, DefaultPortRange)
}

// ingressOwner is the allocator owner of a ClusterSetIP Service's port
// pairs; ingressPodOwner that of one backing pod of a headless Service.
func ingressOwner(namespace, name string) string { return namespace + "/" + name }

// ingressPodOwner: see ingressOwner.
func ingressPodOwner(namespace, name string, pod netip.Addr) string {
	return namespace + "/" + name + "/" + pod.String()
}

// IngressWant is what a Service needs from globalnet.
type IngressWant struct {
	// ClusterIP is the Service's IPv4 ClusterIP (invalid: headless, or no
	// IPv4 ClusterIP — then nothing is allocated for the ports).
	ClusterIP netip.Addr
	// Ports are the Service's ports (GlobalPort unset).
	Ports []v1alpha1.GlobalIngressPort
	// Pods are the ready IPv4 backing pods of a headless Service inside
	// the cluster's pod CIDRs.
	Pods []netip.Addr
}

// IngressWantFor returns what svc (exported, valid) needs: its ports on one
// global IP for a ClusterSetIP Service with an IPv4 ClusterIP, one global
// IP per ready IPv4 backing pod (local, the Service's own EndpointSlices)
// for a headless one — only a pod inside the cluster's podCIDRs: an
// EndpointSlice is what anyone with rights on the Service's namespace
// writes, and a global IP leads the whole ClusterSet (DNAT on the
// gateway) to its address, which must not be a node's, the metadata
// service's or any other address of the cluster's network. No podCIDRs:
// no pod gets one.
func IngressWantFor(svc *corev1.Service, local []discoveryv1.EndpointSlice, podCIDRs []netip.Prefix) IngressWant {
	var w IngressWant
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		seen := map[netip.Addr]bool{}
		for _, s := range local {
			if s.AddressType != discoveryv1.AddressTypeIPv4 {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready || e.Conditions.Terminating != nil && *e.Conditions.Terminating {
					continue
				}
				for _, a := range e.Addresses {
					ip, err := netip.ParseAddr(a)
					if err == nil && ip.Is4() && !seen[ip] && slices.ContainsFunc(podCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
						seen[ip] = true
						w.Pods = append(w.Pods, ip)
					}
				}
			}
		}
		slices.SortFunc(w.Pods, netip.Addr.Compare)
		return w
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Is4() {
			w.ClusterIP = ip
			break
		}
	}
	if !w.ClusterIP.IsValid() {
		return w
	}
	for _, p := range svc.Spec.Ports {
		proto := p.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		w.Ports = append(w.Ports, v1alpha1.GlobalIngressPort{Name: p.Name, Protocol: string(proto), Port: p.Port})
	}
	return w
}

type portKey struct {
	name, proto string
	port        int32
}

func keyOf(p v1alpha1.GlobalIngressPort) portKey { return portKey{p.Name, p.Protocol, p.Port} }

// ReplayIngress replays an allocation that is already persisted (in a
// GlobalIngress) into a: the Service's port pairs and its pods' IPs. It
// reserves all or nothing.
func ReplayIngress(a *Allocator, namespace, name string, spec v1alpha1.GlobalIngressSpec) error {
	owner := ingressOwner(namespace, name)
	var errs []error
	if len(spec.Ports) > 0 {
		ip, err := netip.ParseAddr(spec.IP)
		if err != nil {
			errs = append(errs, fmt.Errorf("global IP %q: %w", spec.IP, err))
		} else {
			ports := make([]uint16, 0, len(spec.Ports))
			for _, p := range spec.Ports {
				ports = append(ports, uint16(p.GlobalPort))
			}
			if err := a.Reserve(owner, ip, ports); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range spec.Pods {
		pod, err1 := netip.ParseAddr(p.PodIP)
		gip, err2 := netip.ParseAddr(p.GlobalIP)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := a.ReserveIP(ingressPodOwner(namespace, name, pod), gip); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		FreeIngress(a, namespace, name, spec)
		return fmt.Errorf("replay global addresses of %s/%s: %w", namespace, name, err)
	}
	return nil
}

// FreeIngress frees everything spec holds in a.
func FreeIngress(a *Allocator, namespace, name string, spec v1alpha1.GlobalIngressSpec) {
	a.Release(ingressOwner(namespace, name))
	for _, p := range spec.Pods {
		if pod, err := netip.ParseAddr(p.PodIP); err == nil {
			a.Release(ingressPodOwner(namespace, name, pod))
		}
	}
}

// AssignIngress returns the allocation of want, given that a holds have
// for this Service (what was allocated before, replayed with
// ReplayIngress after a restart). It is stable: ports present in both
// keep their global port and the Service keeps its global IP; pods
// present in both keep their global IP; what have holds and want does not
// is released. On error (ErrExhausted: no room) a holds exactly have
// again — nothing is half allocated — and the returned spec is have.
// ReleasedAt is never set in the result.
func AssignIngress(a *Allocator, namespace, name string, have v1alpha1.GlobalIngressSpec, want IngressWant) (v1alpha1.GlobalIngressSpec, error) {
	owner := ingressOwner(namespace, name)
	var out v1alpha1.GlobalIngressSpec
	if want.ClusterIP.IsValid() {
		out.ClusterIP = want.ClusterIP.String()
	}
	rollback := func(err error) (v1alpha1.GlobalIngressSpec, error) {
		a.Release(owner)
		for _, p := range want.Pods {
			a.Release(ingressPodOwner(namespace, name, p))
		}
		FreeIngress(a, namespace, name, have)
		if rerr := ReplayIngress(a, namespace, name, have); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return have, err
	}

	// Pods no longer wanted (all of them for a ClusterSetIP Service).
	wantPod := make(map[netip.Addr]bool, len(want.Pods))
	for _, p := range want.Pods {
		wantPod[p] = true
	}
	for _, p := range have.Pods {
		if pod, err := netip.ParseAddr(p.PodIP); err == nil && !wantPod[pod] {
			a.Release(ingressPodOwner(namespace, name, pod))
		}
	}

	// Port pairs: drop the ports gone, then ask for as many as wanted; the
	// allocator hands the kept ports back first, on the same IP.
	kept := map[portKey]int32{}
	wantKey := make(map[portKey]bool, len(want.Ports))
	for _, p := range want.Ports {
		wantKey[keyOf(p)] = true
	}
	for _, p := range have.Ports {
		if wantKey[keyOf(p)] {
			kept[keyOf(p)] = p.GlobalPort
		} else {
			a.ReleasePort(owner, uint16(p.GlobalPort))
		}
	}
	if len(want.Ports) == 0 {
		a.Release(owner)
	} else {
		ip, ports, err := a.Allocate(owner, len(want.Ports))
		if err != nil {
			return rollback(fmt.Errorf("global port pairs of %s/%s: %w", namespace, name, err))
		}
		if have.IP != ip.String() {
			clear(kept) // a new IP (first allocation, or the old one was lost): new pairs throughout
		}
		free := make(map[uint16]bool, len(ports))
		for _, p := range ports {
			free[p] = true
		}
		out.IP = ip.String()
		out.Ports = make([]v1alpha1.GlobalIngressPort, len(want.Ports))
		var todo []int
		for i, p := range want.Ports {
			out.Ports[i] = p
			if gp, ok := kept[keyOf(p)]; ok && free[uint16(gp)] {
				out.Ports[i].GlobalPort = gp
				delete(free, uint16(gp))
				continue
			}
			todo = append(todo, i)
		}
		for _, p := range ports { // the remaining ports, in the allocator's order
			if free[p] {
				out.Ports[todo[0]].GlobalPort = int32(p)
				todo = todo[1:]
			}
		}
	}

	for _, pod := range want.Pods {
		gip, err := a.AllocateIP(ingressPodOwner(namespace, name, pod))
		if err != nil {
			return rollback(fmt.Errorf("global IP of pod %s of %s/%s: %w", pod, namespace, name, err))
		}
		out.Pods = append(out.Pods, v1alpha1.GlobalPodAddress{PodIP: pod.String(), GlobalIP: gip.String()})
	}
	return out, nil
}
