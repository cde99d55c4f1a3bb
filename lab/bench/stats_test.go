package bench

import (
	"testing"
	"time"
)

func TestNewStats(t *testing.T) {
	var samples []time.Duration
	for i := 100; i >= 1; i-- { // 1..100 ms, unsorted
		samples = append(samples, time.Duration(i)*time.Millisecond)
	}
	got := NewStats(samples)
	want := Stats{N: 100, P50MS: 50, P90MS: 90, P99MS: 99, MaxMS: 100}
	if got != want {
		t.Errorf("NewStats(1..100 ms) = %+v, want %+v", got, want)
	}
	if samples[0] != 100*time.Millisecond {
		t.Error("NewStats reordered its input")
	}
	few := NewStats([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond})
	if few != (Stats{N: 3, P50MS: 2, P90MS: 3, P99MS: 3, MaxMS: 3}) {
		t.Errorf("NewStats of 3 samples = %+v", few)
	}
	if z := NewStats(nil); z != (Stats{}) {
		t.Errorf("NewStats(nil) = %+v", z)
	}
}
