package globalnet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// The global egress IPs of a namespace labelled
// v1alpha1.LabelGlobalEgress: the globalnet controller assigns them out
// of the ingress range of the cluster's global CIDR, whole IPs like a
// headless Service's pods, and persists them in the namespace's
// GlobalEgress. Same verbs as the exports' addresses (ingress.go):
// Assign, Replay, Free.

// MaxEgressIPs is the most global egress IPs one namespace may ask for.
const MaxEgressIPs = 8

// MaxEgressPods is the most pod addresses one GlobalEgress holds (its
// CRD's bound).
const MaxEgressPods = 10000

// ErrEgressLabel is wrapped by the error of an invalid label value.
var ErrEgressLabel = errors.New("invalid " + v1alpha1.LabelGlobalEgress + " label")

// EgressIPCount is the number of global egress IPs a namespace's
// v1alpha1.LabelGlobalEgress value asks for: a decimal count from 1 to
// MaxEgressIPs.
func EgressIPCount(value string) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 || n > MaxEgressIPs || strconv.Itoa(n) != value {
		return 0, fmt.Errorf("%w: value %q: want the number of global egress IPs, 1 to %d", ErrEgressLabel, value, MaxEgressIPs)
	}
	return n, nil
}

// EgressPodsOf returns the addresses a namespace's egress IPs apply to,
// sorted and unique: the IPv4 addresses of its pods that are not on the
// host network (their address is a node's), not finished (a finished
// pod's address is handed to the next pod of any namespace) and inside
// the cluster's podCIDRs. No podCIDRs: none.
func EgressPodsOf(pods []corev1.Pod, podCIDRs []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range pods {
		if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, a := range p.Status.PodIPs {
			ip, err := netip.ParseAddr(a.IP)
			if err == nil && ip.Is4() && slices.ContainsFunc(podCIDRs, func(c netip.Prefix) bool { return c.Contains(ip) }) {
				out = append(out, ip)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// egressOwner is the allocator owner of a namespace's i-th egress IP
// (no Kubernetes name holds a ':', so it never meets a Service's).
func egressOwner(namespace string, i int) string {
	return "egress:" + namespace + "/" + strconv.Itoa(i)
}

// ReplayEgress re-holds in a the egress IPs a GlobalEgress persists (all
// or nothing).
func ReplayEgress(a *Allocator, namespace string, ips []string) error {
	var errs []error
	for i, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err == nil {
			err = a.ReserveIP(egressOwner(namespace, i), ip)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("egress IP %q: %w", s, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		FreeEgress(a, namespace, ips)
		return fmt.Errorf("replay global egress IPs of namespace %s: %w", namespace, err)
	}
	return nil
}

// FreeEgress gives a namespace's egress IPs back to a.
func FreeEgress(a *Allocator, namespace string, ips []string) {
	for i := range ips {
		a.Release(egressOwner(namespace, i))
	}
}

// AssignEgress returns the n egress IPs of a namespace that holds have
// in a: have's first n are kept, the rest released, missing ones
// allocated (the highest free whole IPs). On error (ErrExhausted) a
// holds exactly have again and have is returned.
func AssignEgress(a *Allocator, namespace string, have []string, n int) ([]string, error) {
	out := slices.Clone(have[:min(n, len(have))])
	for i := n; i < len(have); i++ {
		a.Release(egressOwner(namespace, i))
	}
	for i := len(out); i < n; i++ {
		ip, err := a.AllocateIP(egressOwner(namespace, i))
		if err != nil {
			for j := range n {
				a.Release(egressOwner(namespace, j))
			}
			if rerr := ReplayEgress(a, namespace, have); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return have, fmt.Errorf("global egress IP of namespace %s: %w", namespace, err)
		}
		out = append(out, ip.String())
	}
	return out, nil
}
