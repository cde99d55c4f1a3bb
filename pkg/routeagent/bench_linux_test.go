package routeagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/causeway-net/causeway/internal/kubetest"
	"github.com/causeway-net/causeway/internal/procmem"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/mcs"
)

// BenchmarkVIPMemory runs the real route agent process (VIP datapath on,
// in a lab node namespace with a private bpffs) against a real API server
// and measures its RSS and Go heap in use with $RA_BENCH_SERVICES (default
// 10000) imported services (a ServiceImport with a clusterset VIP and a
// multicluster EndpointSlice from each of $RA_BENCH_MEMBERS clusters,
// default 1) programmed into the BPF maps; with $RA_BENCH_HEAP_PROFILE
// set, the agent's heap profile after a GC is saved there. Baseline:
// the same agent idle, with no import, in the same run. $BENCH_GOMEMLIMIT
// and $BENCH_GOGC are passed to the agent as GOMEMLIMIT (Go's soft memory
// limit) and GOGC (its GC target; unset: the agent's GCPercent).
//
//	go test -run '^$' -bench BenchmarkVIPMemory -benchtime 1x ./pkg/routeagent/
func BenchmarkVIPMemory(b *testing.B) {
	requireRoot(b)
	n, members := 10000, 1
	if s := os.Getenv("RA_BENCH_SERVICES"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("RA_BENCH_MEMBERS"); s != "" {
		members, _ = strconv.Atoi(s)
	}
	kc := kubetest.Start(b, "ravipmem")
	ctx := context.Background()
	cl := kc.Client
	for _, ns := range []string{"causeway-system", "bench"} {
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
	}
	// The ClusterSet policy as the gateway mirrors it: the agent waits for it.
	if err := clusterset.Store(ctx, cl, addrpolicy.DefaultPolicy()); err != nil {
		b.Fatal(err)
	}

	h, c := labHost(b, "rab", 1)
	node, _ := c.Node("n0")
	nodeNS := h.Names().Node("c1", "n0")
	metricsURL := "http://127.0.0.1:9532/metrics"
	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return h.Dial(nodeNS, network, addr)
		}}}
	var env []string
	for _, v := range []string{"GOMEMLIMIT", "GOGC"} { // the Go runtime's soft memory limit and GC target
		if s := os.Getenv("BENCH_" + v); s != "" {
			env = append(env, v+"="+s)
		}
	}
	start := func() *exec.Cmd { return startVIPAgent(b, h, kc, node.Address.Addr(), "warn", env...) }
	metric := func(name string) (float64, bool) { return procmem.Metric(httpc, metricsURL, name) }
	waitServices := func(want float64) {
		b.Helper()
		deadline := time.Now().Add(30 * time.Minute)
		for {
			if v, ok := metric("causeway_route_agent_vip_services"); ok && v == want {
				return
			}
			if time.Now().After(deadline) {
				v, _ := metric("causeway_route_agent_vip_services")
				b.Fatalf("causeway_route_agent_vip_services is %v, want %v", v, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	memory := func(cmd *exec.Cmd) procmem.Memory {
		b.Helper()
		m, err := procmem.Read(httpc, cmd.Process.Pid, metricsURL)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}

	// Baseline: the same agent with nothing imported.
	agent := start()
	waitServices(0)
	idle := memory(agent)

	// n imports, written while the agent runs (as in a cluster).
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				createImport(b, ctx, cl, i, members)
			}
		})
	}
	b.ResetTimer()
	t0 := time.Now()
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	waitServices(float64(n))
	converge := time.Since(t0)
	loaded := memory(agent)
	b.StopTimer()
	if path := os.Getenv("RA_BENCH_HEAP_PROFILE"); path != "" {
		if err := procmem.SaveHeapProfile(httpc, metricsURL, path, true); err != nil {
			b.Fatal(err)
		}
		b.Logf("heap profile (after a GC) in %s", path)
	}

	b.ReportMetric(loaded.RSSMiB(), "RSS-MiB")
	b.ReportMetric(loaded.PeakMiB(), "peak-RSS-MiB")
	b.ReportMetric(loaded.HeapMiB(), "heap-MiB")
	b.ReportMetric(idle.RSSMiB(), "idle-RSS-MiB")
	b.ReportMetric(loaded.RSSMiB()/idle.RSSMiB(), "RSS/idle")
	b.Logf("route agent with the VIP datapath: idle %s; with %d imported services of %d clusters programmed %s (RSS %.1f× idle); "+
		"writing the imports and programming them took %.1fs", idle, n, members, loaded, loaded.RSSMiB()/idle.RSSMiB(), converge.Seconds())
}

// createImport writes service s<i>'s ServiceImport (VIP 243.x.y.z) and
// its multicluster EndpointSlices, one per member cluster c<m> with one
// ready backend (a pod of c1; with several members, each member's global
// IP:port), shaped as the MCS controller writes them.
func createImport(b *testing.B, ctx context.Context, cl client.Client, i, members int) {
	name := fmt.Sprintf("s%d", i)
	si := &mcsv1beta1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
		Spec: mcsv1beta1.ServiceImportSpec{
			Type:  mcsv1beta1.ClusterSetIP,
			IPs:   []string{fmt.Sprintf("243.%d.%d.%d", i>>16&0xf, i>>8&0xff, i&0xff)},
			Ports: []mcsv1beta1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	if err := cl.Create(ctx, si); err != nil {
		b.Error(err)
		return
	}
	ready := true
	for m := range members {
		cluster := fmt.Sprintf("c%d", m+1)
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name + "-" + cluster,
				Labels: map[string]string{
					LabelServiceName:                            name,
					LabelSourceCluster:                          cluster,
					discoveryv1.LabelManagedBy:                  mcs.ManagedBy,
					"multicluster.kubernetes.io/service-import": name,
				},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: mcsv1beta1.GroupVersion.String(), Kind: mcsv1beta1.ServiceImportKindName,
					Name: name, UID: si.UID, Controller: ref(true)}}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ref("http"), Protocol: ref(corev1.ProtocolTCP), Port: ref(int32(8080))}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ref(false)},
			}},
		}
		if members > 1 { // a remote member's global IP:port
			slice.Endpoints[0].Addresses[0] = fmt.Sprintf("242.%d.%d.2", m/250, m%250)
			slice.Ports[0].Port = ref(int32(1024 + i))
		}
		if err := cl.Create(ctx, slice); err != nil {
			b.Error(err)
		}
	}
}

func ref[T any](v T) *T { return &v }
