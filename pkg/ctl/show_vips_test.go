package ctl

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/pkg/lab/netlab"
	"github.com/causeway-net/causeway/pkg/mcs"
	"github.com/causeway-net/causeway/pkg/vip"
)

func vipKey(s string, p vip.Proto) vip.ServiceKey {
	ap := netip.MustParseAddrPort(s)
	return vip.ServiceKey{VIP: ap.Addr(), Port: ap.Port(), Proto: p}
}

func vipBackend(s string, w uint32) vip.Backend {
	ap := netip.MustParseAddrPort(s)
	return vip.Backend{Addr: ap.Addr(), Port: ap.Port(), Weight: w}
}

// TestCompareVIPs: every kind of difference between a node's maps and the
// API is named, an equal service (in another order, weight 0 as 1) is ok.
func TestCompareVIPs(t *testing.T) {
	same, weights, missing, stale := vipKey("243.0.0.1:80", vip.TCP), vipKey("243.0.0.2:80", vip.TCP), vipKey("243.0.0.3:80", vip.TCP), vipKey("243.0.0.4:80", vip.TCP)
	affinity := vipKey("243.0.0.1:53", vip.UDP)
	a, b := vipBackend("242.0.0.2:1024", 1), vipBackend("242.0.1.2:1024", 3)
	programmed := map[vip.ServiceKey]vip.Service{
		same:     {Backends: []vip.Backend{b, {Addr: a.Addr, Port: a.Port}}},
		weights:  {Backends: []vip.Backend{a, vipBackend("242.0.1.2:1024", 1), vipBackend("10.96.0.9:80", 1)}},
		stale:    {Backends: []vip.Backend{a}},
		affinity: {Backends: []vip.Backend{a}},
	}
	expected := map[vip.ServiceKey]vip.Service{
		same:     {Backends: []vip.Backend{a, b}},
		weights:  {Backends: []vip.Backend{a, b}},
		missing:  {},
		affinity: {Backends: []vip.Backend{a}, AffinitySeconds: 10800},
	}
	rows := compareVIPs("c3/n1", programmed, expected, map[vip.ServiceKey]string{same: "demo/whereami"})
	got := map[string][]string{}
	for _, r := range rows {
		if r.Node != "c3/n1" {
			t.Errorf("row of node %q", r.Node)
		}
		got[r.VIP] = r.Diff
	}
	want := map[string][]string{
		"243.0.0.1:53/UDP": {"affinity 0s, want 10800s"},
		"243.0.0.1:80/TCP": nil,
		"243.0.0.2:80/TCP": {"242.0.1.2:1024 weight 1, want 3", "stale 10.96.0.9:80"},
		"243.0.0.3:80/TCP": {"not programmed"},
		"243.0.0.4:80/TCP": {"not a service in the API"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diffs:\n got %v\nwant %v", got, want)
	}
	// Sorted by VIP, port, protocol.
	if r := rows[1]; r.VIP != "243.0.0.1:80/TCP" || r.Service != "demo/whereami" || r.Programmed.cell() != "242.0.0.2:1024 w1, 242.0.1.2:1024 w3" {
		t.Errorf("second row %+v (cell %q)", r, r.Programmed.cell())
	}
}

// TestShowVIPs runs `show vips --node` against a real API server (a
// ServiceImport with slices of two clusters, weighted, ClientIP affinity)
// and real pinned maps of the VIP datapath, first equal to what the API
// says, then with a backend's weight and the affinity out of date.
func TestShowVIPs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("reading pinned BPF maps needs root; CI runs as root")
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	c1 := kubetest.Start(t, "c1")
	ctx := context.Background()
	if err := c1.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}); err != nil {
		t.Fatal(err)
	}
	si := &mcsv1beta1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "whereami"},
		Spec: mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, IPs: []string{"243.0.0.10"},
			Ports:                 []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
			SessionAffinity:       corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}}}
	if err := c1.Client.Create(ctx, si); err != nil {
		t.Fatal(err)
	}
	for cluster, ep := range map[string]struct {
		addr  string
		port  int32
		ready string
	}{"c1": {"10.96.0.5", 80, "1"}, "c2": {"242.0.1.2", 1024, "3"}} {
		// As the MCS controller writes them: managed by it, controlled by
		// the import (the route agent takes no other).
		s := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "whereami-" + cluster,
				Labels: map[string]string{mcsv1beta1.LabelServiceName: "whereami", mcsv1beta1.LabelSourceCluster: cluster,
					discoveryv1.LabelManagedBy: mcs.ManagedBy},
				Annotations: map[string]string{mcs.AnnotationReadyEndpoints: ep.ready},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName,
					Name: si.Name, UID: si.UID, Controller: ptr.To(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(ep.port)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ep.addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		}
		if err := c1.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	bpffs := t.TempDir()
	if err := unix.Mount("bpf", bpffs, "bpf", 0, ""); err != nil {
		t.Fatalf("mount bpffs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bpffs, unix.MNT_DETACH) })
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	mnt := netlab.FindCgroup2Mount(string(mountinfo))
	if mnt == "" {
		t.Fatal("no cgroup2 mount")
	}
	cg, err := os.MkdirTemp(mnt, "causeway-ctl-test-")
	if err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	pins := filepath.Join(bpffs, "vip")
	k, err := vip.Open(vip.Config{PinDir: pins, CgroupPath: cg, MaxServices: 64, MaxBackends: 64, MaxReverseNAT: 64, MaxAffinity: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Cleanup() })
	key := vipKey("243.0.0.10:80", vip.TCP)
	local, remote := vipBackend("10.96.0.5:80", 1), vipBackend("242.0.1.2:1024", 3)

	show := func() []VIPRow {
		t.Helper()
		out, err := run(t, "show", "vips", "--kubeconfig", "c1="+c1.AdminKubeconfig, "--node", "c1/n0", "--pin-dir", pins, "-o", "json")
		if err != nil {
			t.Fatalf("show vips: %v\n%s", err, out)
		}
		var rows []VIPRow
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return rows
	}
	if err := k.Set(ctx, map[vip.ServiceKey]vip.Service{key: {Backends: []vip.Backend{local, remote}, AffinitySeconds: 60}}); err != nil {
		t.Fatal(err)
	}
	rows := show()
	want := &VIPEntry{Backends: []VIPBackend{{"10.96.0.5:80", 1}, {"242.0.1.2:1024", 3}}, AffinitySeconds: 60}
	if len(rows) != 1 || rows[0].Service != "demo/whereami" || rows[0].Node != "c1/n0" || len(rows[0].Diff) != 0 ||
		!reflect.DeepEqual(rows[0].Programmed, want) || !reflect.DeepEqual(rows[0].Expected, want) {
		t.Fatalf("in sync: rows %+v", rows)
	}

	remote.Weight = 2
	stray := vipKey("243.0.0.99:80", vip.TCP)
	if err := k.Set(ctx, map[vip.ServiceKey]vip.Service{key: {Backends: []vip.Backend{local, remote}}, stray: {}}); err != nil {
		t.Fatal(err)
	}
	rows = show()
	if len(rows) != 2 || !reflect.DeepEqual(rows[0].Diff, []string{"242.0.1.2:1024 weight 2, want 3", "affinity 0s, want 60s"}) ||
		!reflect.DeepEqual(rows[1].Diff, []string{"not a service in the API"}) {
		t.Fatalf("out of date: rows %+v", rows)
	}
	table, err := run(t, "show", "vips", "--kubeconfig", "c1="+c1.AdminKubeconfig, "--node", "c1/n0", "--pin-dir", pins)
	if err != nil || !strings.Contains(table, "DIFF: 242.0.1.2:1024 weight 2, want 3") || !strings.Contains(table, "10.96.0.5:80 w1, 242.0.1.2:1024 w3 [ClientIP 60s]") {
		t.Errorf("table: %v\n%s", err, table)
	}
	if out, err := run(t, "show", "vips", "--kubeconfig", "c1="+c1.AdminKubeconfig); err == nil || !strings.Contains(out, "--node") {
		t.Errorf("without --node outside the lab: %v %s", err, out)
	}
}
