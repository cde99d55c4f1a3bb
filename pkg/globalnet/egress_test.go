package globalnet

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEgressIPCount(t *testing.T) {
	for value, want := range map[string]int{"1": 1, "2": 2, "8": 8} {
		if n, err := EgressIPCount(value); err != nil || n != want {
			t.Errorf("EgressIPCount(%q) = %d, %v; want %d", value, n, err, want)
		}
	}
	for _, value := range []string{"", "0", "9", "-1", "true", "01", "+1", " 1", "1.0", "999999999999999999999"} {
		if _, err := EgressIPCount(value); !errors.Is(err, ErrEgressLabel) {
			t.Errorf("EgressIPCount(%q): %v, want ErrEgressLabel", value, err)
		}
	}
}

func TestEgressPodsOf(t *testing.T) {
	pod := func(hostNetwork bool, phase corev1.PodPhase, ips ...string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "blue"}, Spec: corev1.PodSpec{HostNetwork: hostNetwork}, Status: corev1.PodStatus{Phase: phase}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	pods := []corev1.Pod{
		pod(false, corev1.PodRunning, "10.244.1.9", "fd00:10:244:1::9"), // dual stack: the IPv4 address
		pod(false, corev1.PodPending, "10.244.1.3"),
		pod(false, corev1.PodRunning, "10.244.1.3"),   // the same address twice: once
		pod(true, corev1.PodRunning, "10.244.1.1"),    // host network: a node's address
		pod(false, corev1.PodSucceeded, "10.244.1.4"), // finished: its address goes to the next pod
		pod(false, corev1.PodFailed, "10.244.1.5"),
		pod(false, corev1.PodRunning, "192.168.0.7"), // outside the pod CIDRs
		pod(false, corev1.PodPending),                // no address yet
		pod(false, corev1.PodRunning, "garbage"),
	}
	podCIDRs := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	want := []netip.Addr{netip.MustParseAddr("10.244.1.3"), netip.MustParseAddr("10.244.1.9")}
	if got := EgressPodsOf(pods, podCIDRs); !slices.Equal(got, want) {
		t.Errorf("EgressPodsOf = %v, want %v", got, want)
	}
	if got := EgressPodsOf(pods, nil); len(got) != 0 {
		t.Errorf("without pod CIDRs: %v, want none", got)
	}
}

// TestAssignEgress: a namespace keeps its IPs while its count stays,
// keeps the first ones when it shrinks, gets whole IPs that no Service
// port or headless pod holds, and an exhausted pool leaves exactly what
// it held; what is persisted replays into a fresh allocator.
func TestAssignEgress(t *testing.T) {
	// 242.0.9.0/29: ingress 242.0.9.2-242.0.9.4, three IPs.
	a, err := NewIngressAllocator(netip.MustParsePrefix("242.0.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Allocate("demo/web", 1); err != nil { // 242.0.9.2 carries ports
		t.Fatal(err)
	}
	blue, err := AssignEgress(a, "blue", nil, 1)
	if err != nil || !slices.Equal(blue, []string{"242.0.9.4"}) {
		t.Fatalf("blue: %v, %v; want the highest free whole IP", blue, err)
	}
	if again, err := AssignEgress(a, "blue", blue, 1); err != nil || !slices.Equal(again, blue) {
		t.Errorf("blue again: %v, %v; want it kept", again, err)
	}
	// Two IPs do not fit (one left): nothing changes.
	got, err := AssignEgress(a, "blue", blue, 3)
	if !errors.Is(err, ErrExhausted) || !slices.Equal(got, blue) {
		t.Fatalf("blue ×3: %v, %v; want ErrExhausted and %v", got, err, blue)
	}
	if u := a.Usage(); u.WholeIPs != 1 {
		t.Errorf("after the refused grow %d whole IPs held, want 1", u.WholeIPs)
	}
	blue2, err := AssignEgress(a, "blue", blue, 2)
	if err != nil || !slices.Equal(blue2, []string{"242.0.9.4", "242.0.9.3"}) {
		t.Fatalf("blue ×2: %v, %v", blue2, err)
	}
	if _, err := AssignEgress(a, "red", nil, 1); !errors.Is(err, ErrExhausted) {
		t.Errorf("red in a full pool: %v, want ErrExhausted", err)
	}

	// Replayed into a fresh allocator, the same state: red still waits,
	// and a conflicting replay holds nothing.
	b, err := NewIngressAllocator(netip.MustParsePrefix("242.0.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Reserve("demo/web", netip.MustParseAddr("242.0.9.2"), []uint16{1024}); err != nil {
		t.Fatal(err)
	}
	if err := ReplayEgress(b, "blue", blue2); err != nil {
		t.Fatal(err)
	}
	if err := ReplayEgress(b, "copy", []string{"242.0.9.3"}); !errors.Is(err, ErrConflict) {
		t.Errorf("replay of a held IP: %v, want ErrConflict", err)
	}
	if _, err := AssignEgress(b, "red", nil, 1); !errors.Is(err, ErrExhausted) {
		t.Errorf("red after the replay: %v, want ErrExhausted", err)
	}

	// Shrinking keeps the first IP and frees the second for red.
	blue1, err := AssignEgress(b, "blue", blue2, 1)
	if err != nil || !slices.Equal(blue1, []string{"242.0.9.4"}) {
		t.Fatalf("blue ×1: %v, %v", blue1, err)
	}
	if red, err := AssignEgress(b, "red", nil, 1); err != nil || !slices.Equal(red, []string{"242.0.9.3"}) {
		t.Errorf("red: %v, %v; want 242.0.9.3", red, err)
	}
	FreeEgress(b, "blue", blue1)
	if u := b.Usage(); u.WholeIPs != 1 {
		t.Errorf("after freeing blue %d whole IPs held, want 1 (red's)", u.WholeIPs)
	}
}
