package kubelet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestPodResolvConf(t *testing.T) {
	pod := func(policy corev1.DNSPolicy, hostNet bool, cfg *corev1.PodDNSConfig) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "p"},
			Spec: corev1.PodSpec{DNSPolicy: policy, HostNetwork: hostNet, DNSConfig: cfg}}
	}
	cluster := "nameserver 10.96.0.10\nsearch demo.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
	for name, tc := range map[string]struct {
		pod  *corev1.Pod
		dns  string
		want string
	}{
		"ClusterFirst by default":      {pod("", false, nil), "10.96.0.10", cluster},
		"ClusterFirst":                 {pod(corev1.DNSClusterFirst, false, nil), "10.96.0.10", cluster},
		"host network uses the node's": {pod(corev1.DNSClusterFirst, true, nil), "10.96.0.10", ""},
		"ClusterFirstWithHostNet":      {pod(corev1.DNSClusterFirstWithHostNet, true, nil), "10.96.0.10", cluster},
		"Default uses the node's":      {pod(corev1.DNSDefault, false, nil), "10.96.0.10", ""},
		"no cluster DNS: the node's":   {pod(corev1.DNSClusterFirst, false, nil), "", ""},
		"other domain":                 {pod("", false, nil), "10.1.0.10", "nameserver 10.1.0.10\nsearch demo.svc.example.org svc.example.org example.org\noptions ndots:5\n"},
		"None takes dnsConfig only":    {pod(corev1.DNSNone, false, &corev1.PodDNSConfig{Nameservers: []string{"1.2.3.4"}, Searches: []string{"a.b"}}), "10.96.0.10", "nameserver 1.2.3.4\nsearch a.b\n"},
		"dnsConfig appends and overrides": {pod("", false, &corev1.PodDNSConfig{Nameservers: []string{"1.2.3.4"}, Searches: []string{"x.y", "svc.cluster.local"},
			Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("2")}, {Name: "edns0"}}}), "10.96.0.10",
			"nameserver 10.96.0.10\nnameserver 1.2.3.4\nsearch demo.svc.cluster.local svc.cluster.local cluster.local x.y\noptions ndots:2 edns0\n"},
	} {
		domain := "cluster.local"
		if name == "other domain" {
			domain = "example.org"
		}
		if got := podResolvConf(tc.pod, tc.dns, domain); got != tc.want {
			t.Errorf("%s: got %q, want %q", name, got, tc.want)
		}
	}
}

func TestPodHosts(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-0"},
		Spec: corev1.PodSpec{Hostname: "web-0", Subdomain: "web", HostAliases: []corev1.HostAlias{{IP: "10.0.0.9", Hostnames: []string{"a", "b"}}}}}
	got := podHosts(p, []string{"10.244.0.5", "fd00::5"}, "cluster.local")
	want := "# Kubernetes-managed hosts file (the Causeway lab kubelet).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
		"10.244.0.5\tweb-0.web.demo.svc.cluster.local\tweb-0\nfd00::5\tweb-0.web.demo.svc.cluster.local\tweb-0\n10.0.0.9\ta\tb\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	p.Spec.HostNetwork = true
	if got := podHosts(p, nil, "cluster.local"); got != "" {
		t.Errorf("host network pod: %q, want the node's (\"\")", got)
	}
}
