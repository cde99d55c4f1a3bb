package mcs

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	causewayv1alpha1 "github.com/causeway-net/causeway/api/v1alpha1"
)

// BenchmarkMerge merges the exports of one Service from 50 clusters, with
// port and label conflicts.
func BenchmarkMerge(b *testing.B) {
	var recs []ExportRecord
	for i := range 50 {
		recs = append(recs, rec(fmt.Sprintf("c%02d", i), i%7, ports(port("http", "TCP", int32(80+i%3)), port(fmt.Sprintf("p%d", i), "TCP", int32(9000+i))),
			func(r *ExportRecord) { r.ExportedLabels = map[string]string{"tier": fmt.Sprint(i % 2)} }))
	}
	for b.Loop() {
		Merge(recs)
	}
}

// BenchmarkRenderEndpointSlices renders 10 000 backends from 50 clusters.
func BenchmarkRenderEndpointSlices(b *testing.B) {
	var srcs []SourceEndpoints
	for c := range 50 {
		s := SourceEndpoints{ClusterID: fmt.Sprintf("c%02d", c)}
		for i := range 200 {
			s.Backends = append(s.Backends, backend(fmt.Sprintf("10.%d.%d.%d", c, i/250, i%250+1), i%5 != 0))
		}
		srcs = append(srcs, s)
	}
	in := RenderInput{Import: testImport("ClusterSetIP", httpPort), LocalClusterID: "c00", Sources: srcs}
	for b.Loop() {
		if n := len(RenderEndpointSlices(in)); n != 100 {
			b.Fatalf("%d slices", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/endpoint")
}

// BenchmarkAllocateCrowded allocates in a /16 that is 90 % full, where
// most first candidates are taken.
func BenchmarkAllocateCrowded(b *testing.B) {
	ctx := context.Background()
	r := MustParseVIPRange("243.0.0.0/16")
	a := NewVIPAllocator(r, newMemVIPs().store("c1"), "c1")
	exp := exporting("c1")
	for i := range int(r.Size()) * 9 / 10 {
		if _, err := a.Allocate(ctx, nn(fmt.Sprintf("fill-%d", i)), exp, netip.Addr{}); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		svc := nn(fmt.Sprintf("bench-%d", i))
		i++
		vip, err := a.Allocate(ctx, svc, exp, netip.Addr{})
		if err != nil || vip == (netip.Addr{}) {
			b.Fatal(err)
		}
		if err := a.Release(ctx, svc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocateGlobal is one Service's globalnet sync with 10 000
// other Services (two ports each) already held by the long-lived
// allocator: a port change (one pair kept, one new) and back. It stays
// flat in the number of Services, which is why the controller keeps one
// allocator per leadership term instead of replaying every GlobalIngress
// per sync; replay reports the cost of that replay (once per term).
func BenchmarkAllocateGlobal(b *testing.B) {
	const services = 10000
	a, err := NewGlobalAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	if err != nil {
		b.Fatal(err)
	}
	cip := netip.MustParseAddr("10.96.0.10")
	two := func(second string, port int32) GlobalWant {
		return GlobalWant{ClusterIP: cip, Ports: []causewayv1alpha1.GlobalIngressPort{
			{Name: "http", Protocol: "TCP", Port: 80}, {Name: second, Protocol: "TCP", Port: port}}}
	}
	specs := make([]GlobalIngressSpec, services)
	for i := range services {
		if specs[i], err = AllocateGlobal(a, "ns", fmt.Sprintf("svc-%d", i), GlobalIngressSpec{}, two("metrics", 9090)); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	replay, _ := NewGlobalAllocator(netip.MustParsePrefix("242.0.1.0/24"))
	for i, s := range specs {
		if err := ReserveGlobal(replay, "ns", fmt.Sprintf("svc-%d", i), s); err != nil {
			b.Fatal(err)
		}
	}
	replayMS := float64(time.Since(start).Microseconds()) / 1000
	have := specs[0]
	for b.Loop() {
		s, err := AllocateGlobal(a, "ns", "svc-0", have, two("grpc", 9000))
		if err != nil {
			b.Fatal(err)
		}
		if have, err = AllocateGlobal(a, "ns", "svc-0", s, two("metrics", 9090)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(replayMS, "replay-ms") // after b.Loop, which resets reported metrics
}
