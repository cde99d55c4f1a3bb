package apps

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"
)

func TestRunRR(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan net.Addr, 1)
	go func() {
		_ = RunWhereami(ctx, WhereamiConfig{Address: "127.0.0.1", Port: 0, Pod: "p", Ready: func(_, udp net.Addr) { ready <- udp }})
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("whereami did not start")
	}
	var out bytes.Buffer
	if err := RunRR(ctx, RRConfig{Addr: addr.String(), Count: 50, Timeout: time.Second}, &out); err != nil {
		t.Fatal(err)
	}
	var res RRResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.Count != 50 || res.Lost != 0 || res.P50US <= 0 || res.P99US < res.P50US {
		t.Errorf("RunRR = %+v, want 50 answered round trips with p99 ≥ p50 > 0", res)
	}
	if err := RunRR(ctx, RRConfig{Addr: "", Count: 1}, &out); err == nil {
		t.Error("RunRR accepted an empty address")
	}
}
