package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/spf13/pflag"
)

// RRConfig configures the request/response latency client.
type RRConfig struct {
	// Addr is a whereami UDP echo (host:port).
	Addr string
	// Count is the number of sequential round trips.
	Count int
	// Timeout bounds one round trip; a late answer counts as lost.
	Timeout time.Duration
}

// AddFlags binds the config to flags.
func (c *RRConfig) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", "", "whereami UDP echo to measure against (host:port)")
	fs.IntVar(&c.Count, "count", 2000, "number of sequential round trips")
	fs.DurationVar(&c.Timeout, "timeout", time.Second, "timeout of one round trip")
}

// RRResult is what RunRR measured, in microseconds.
type RRResult struct {
	Count  int     `json:"count"`
	Lost   int     `json:"lost"`
	MeanUS float64 `json:"meanUS"`
	P50US  float64 `json:"p50US"`
	P99US  float64 `json:"p99US"`
}

// RunRR sends Count UDP requests one after the other to a whereami echo
// and writes an RRResult as JSON to out.
func RunRR(ctx context.Context, c RRConfig, out io.Writer) error {
	if c.Addr == "" || c.Count < 1 {
		return errors.New("rr: --addr and a positive --count are required")
	}
	conn, err := net.Dial("udp", c.Addr)
	if err != nil {
		return fmt.Errorf("rr: %w", err)
	}
	defer conn.Close()
	buf := make([]byte, 2048)
	rtts := make([]time.Duration, 0, c.Count)
	lost := 0
	for i := 0; i < c.Count && ctx.Err() == nil; i++ {
		start := time.Now()
		if _, err := conn.Write([]byte("rr")); err != nil {
			return fmt.Errorf("rr: send: %w", err)
		}
		_ = conn.SetReadDeadline(start.Add(c.Timeout))
		if _, err := conn.Read(buf); err != nil {
			lost++
			continue
		}
		rtts = append(rtts, time.Since(start))
	}
	res := RRResult{Count: len(rtts), Lost: lost}
	if len(rtts) > 0 {
		slices.Sort(rtts)
		var sum time.Duration
		for _, d := range rtts {
			sum += d
		}
		us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
		res.MeanUS = us(sum / time.Duration(len(rtts)))
		res.P50US = us(rtts[len(rtts)/2])
		res.P99US = us(rtts[min(len(rtts)-1, len(rtts)*99/100)])
	}
	return json.NewEncoder(out).Encode(res)
}
