package bench

import (
	"math"
	"slices"
	"time"
)

// Stats summarises a set of durations, in milliseconds.
type Stats struct {
	N     int     `json:"n"`
	P50MS float64 `json:"p50MS"`
	P90MS float64 `json:"p90MS"`
	P99MS float64 `json:"p99MS"`
	MaxMS float64 `json:"maxMS"`
}

// NewStats computes nearest-rank percentiles of samples (with fewer than
// 100 samples the p99 is the maximum).
func NewStats(samples []time.Duration) Stats {
	s := Stats{N: len(samples)}
	if len(samples) == 0 {
		return s
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
		return sorted[max(0, min(i, len(sorted)-1))]
	}
	s.P50MS, s.P90MS, s.P99MS = ms(rank(50)), ms(rank(90)), ms(rank(99))
	s.MaxMS = ms(sorted[len(sorted)-1])
	return s
}
