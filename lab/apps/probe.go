package apps

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
)

// ProbeConfig configures the connect prober.
type ProbeConfig struct {
	// Interval between two connect attempts to one target.
	Interval time.Duration
	// AttemptTimeout bounds one connect attempt.
	AttemptTimeout time.Duration
	// Timeout gives up on a target.
	Timeout time.Duration
}

// AddFlags binds the config to flags.
func (c *ProbeConfig) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&c.Interval, "interval", 10*time.Millisecond, "time between two connect attempts to one target")
	fs.DurationVar(&c.AttemptTimeout, "attempt-timeout", time.Second, "bound of one connect attempt")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Minute, "give up on a target after this long")
}

// RunProbe reads targets from in, one per line as "<id> <host:port>", and
// probes each until a TCP connect to it succeeds: it starts a connect
// every Interval, each bounded by AttemptTimeout, so several attempts may
// be in flight and a lost SYN does not hold the answer back by a
// retransmission timeout. For each target it writes one line to out:
// "<id> ok <unix time of the first successful connect, ns>", or
// "<id> fail <last error>" after Timeout. Targets are probed
// concurrently; RunProbe returns when in is exhausted and every target is
// answered, or when ctx is done.
//
// The success time is the wall clock of this process, so the caller (on
// the same machine) can subtract its own timestamps without counting the
// pipe.
func RunProbe(ctx context.Context, c ProbeConfig, in io.Reader, out io.Writer) error {
	if c.Interval <= 0 || c.AttemptTimeout <= 0 || c.Timeout <= 0 {
		return fmt.Errorf("probe: interval, attempt timeout and timeout must be positive")
	}
	var mu sync.Mutex
	reply := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
	}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			reply("%s fail want \"<id> <host:port>\", got %q", f[0], sc.Text())
			continue
		}
		wg.Add(1)
		go func(id, addr string) {
			defer wg.Done()
			at, err := probe(ctx, c, addr)
			if err != nil {
				reply("%s fail %v", id, err)
				return
			}
			reply("%s ok %d", id, at.UnixNano())
		}(f[0], f[1])
	}
	wg.Wait()
	if err := sc.Err(); err != nil {
		return fmt.Errorf("probe: read targets: %w", err)
	}
	return ctx.Err()
}

// probe returns when the first connect to addr succeeded.
func probe(ctx context.Context, c ProbeConfig, addr string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	results := make(chan time.Time, 1)
	var mu sync.Mutex
	var last error
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(c.Interval)
	defer tick.Stop()
	for {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: c.AttemptTimeout}
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				mu.Lock()
				// A timeout says less than a refusal or an unreachable
				// route (and the end of the probe cuts attempts short).
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() || last == nil {
					last = err
				}
				mu.Unlock()
				return
			}
			at := time.Now()
			_ = conn.Close()
			select {
			case results <- at:
			default: // another attempt answered first
			}
		}()
		select {
		case at := <-results:
			cancel() // attempts still in flight give up
			return at, nil
		case <-ctx.Done():
			mu.Lock()
			defer mu.Unlock()
			if last == nil {
				last = ctx.Err()
			}
			return time.Time{}, fmt.Errorf("connect %s: %w", addr, last)
		case <-tick.C:
		}
	}
}
