package mcs

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
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
