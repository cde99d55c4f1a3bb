package kubelet

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// DefaultClusterDomain is the cluster's DNS domain when Config leaves it
// empty.
const DefaultClusterDomain = "cluster.local"

// podResolvConf is the resolv.conf of pod's containers as a kubelet
// writes it, or "" when they use the node's (dnsPolicy Default, a
// hostNetwork pod without ClusterFirstWithHostNet, or no cluster DNS
// configured): the cluster DNS first with the pod's search path, or for
// dnsPolicy None only the pod's dnsConfig; dnsConfig's nameservers,
// searches and options are appended to (options: override) the policy's.
func podResolvConf(pod *corev1.Pod, clusterDNS, domain string) string {
	policy := pod.Spec.DNSPolicy
	if policy == "" {
		policy = corev1.DNSClusterFirst
	}
	var servers, search []string
	options := []string{}
	switch {
	case policy == corev1.DNSNone:
	case policy == corev1.DNSDefault, clusterDNS == "",
		pod.Spec.HostNetwork && policy != corev1.DNSClusterFirstWithHostNet:
		return ""
	default:
		servers = []string{clusterDNS}
		search = []string{pod.Namespace + ".svc." + domain, "svc." + domain, domain}
		options = []string{"ndots:5"}
	}
	if c := pod.Spec.DNSConfig; c != nil {
		servers = append(servers, c.Nameservers...)
		for _, s := range c.Searches {
			if !slices.Contains(search, s) {
				search = append(search, s)
			}
		}
		for _, o := range c.Options {
			opt := o.Name
			if o.Value != nil {
				opt += ":" + *o.Value
			}
			options = slices.DeleteFunc(options, func(have string) bool { return strings.Split(have, ":")[0] == o.Name })
			options = append(options, opt)
		}
	}
	var b strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}
	if len(options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(options, " "))
	}
	return b.String()
}

// podHosts is the /etc/hosts of pod's containers, or "" for a hostNetwork
// pod (it uses the node's): localhost, the pod's own name (hostname, or
// hostname.subdomain.namespace.svc.domain) at each of its IPs, and its
// hostAliases.
func podHosts(pod *corev1.Pod, podIPs []string, domain string) string {
	if pod.Spec.HostNetwork {
		return ""
	}
	var b strings.Builder
	b.WriteString("# Kubernetes-managed hosts file (the Causeway lab kubelet).\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	host := pod.Name
	if pod.Spec.Hostname != "" {
		host = pod.Spec.Hostname
	}
	names := host
	if pod.Spec.Subdomain != "" {
		names = fmt.Sprintf("%s.%s.%s.svc.%s\t%s", host, pod.Spec.Subdomain, pod.Namespace, domain, host)
	}
	for _, ip := range podIPs {
		fmt.Fprintf(&b, "%s\t%s\n", ip, names)
	}
	for _, a := range pod.Spec.HostAliases {
		fmt.Fprintf(&b, "%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	return b.String()
}

// podNameFiles writes pod's resolv.conf and hosts into its state
// directory and returns the mounts that put them in place of the
// container's /etc/resolv.conf and /etc/hosts (read-only); none for a
// pod that uses the node's.
func (w *worker) podNameFiles(pod *corev1.Pod) ([]mount, error) {
	k := w.k
	domain := k.cfg.ClusterDomain
	if domain == "" {
		domain = DefaultClusterDomain
	}
	dns := ""
	if k.cfg.ClusterDNS.IsValid() {
		dns = k.cfg.ClusterDNS.String()
	}
	var out []mount
	for _, f := range []struct{ name, body string }{
		{"resolv.conf", podResolvConf(pod, dns, domain)},
		{"hosts", podHosts(pod, w.podIPs(), domain)},
	} {
		if f.body == "" {
			continue
		}
		path := filepath.Join(k.podDir(w.namespace, w.name), f.name)
		if err := os.WriteFile(path, []byte(f.body), 0o644); err != nil {
			return nil, fmt.Errorf("pod %s: %w", f.name, err)
		}
		out = append(out, mount{Source: path, Target: "/etc/" + f.name, ReadOnly: true})
	}
	return out, nil
}
