package daemon

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNodeIPv4(t *testing.T) {
	addrs := []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "n0"},
		{Type: corev1.NodeInternalIP, Address: "fd00::10"},
		{Type: corev1.NodeInternalIP, Address: "172.18.1.10"},
		{Type: corev1.NodeExternalIP, Address: "198.18.1.10"},
	}
	for _, tc := range []struct {
		types []corev1.NodeAddressType
		want  string
	}{
		{[]corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP}, "198.18.1.10"},
		{[]corev1.NodeAddressType{corev1.NodeInternalIP}, "172.18.1.10"},
		{[]corev1.NodeAddressType{corev1.NodeExternalDNS}, "invalid IP"},
	} {
		if got := nodeIPv4(addrs, tc.types); got.String() != tc.want {
			t.Errorf("%v: %s, want %s", tc.types, got, tc.want)
		}
	}
	if got := nodeIPv4(addrs[:3], []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP}); got != netip.MustParseAddr("172.18.1.10") {
		t.Errorf("no ExternalIP: %s, want the InternalIP", got)
	}
}
