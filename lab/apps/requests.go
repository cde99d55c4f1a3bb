package apps

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
)

// RequestsConfig configures the request loop.
type RequestsConfig struct {
	URL      string
	Interval time.Duration // between two request starts
	Timeout  time.Duration // bound of one request
	Duration time.Duration // how long requests are started
}

// AddFlags binds the config to flags.
func (c *RequestsConfig) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.URL, "url", "", "whereami URL to request")
	fs.DurationVar(&c.Interval, "interval", 50*time.Millisecond, "time between two request starts")
	fs.DurationVar(&c.Timeout, "timeout", 2*time.Second, "bound of one request")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "how long requests are started (0: until SIGINT or SIGTERM)")
}

// RunRequests starts a GET of c.URL every c.Interval for c.Duration (0:
// until ctx ends), each on its own connection and without waiting for
// the previous one, and writes one line per request as it ends: "<unix
// ns of its start> <cluster that answered>", or "<unix ns> FAIL
// <error>" — lines of overlapping requests may come out of start order.
// When ctx ends no request is started any more; those running finish
// (each bounded by c.Timeout) and are written.
func RunRequests(ctx context.Context, c RequestsConfig, out io.Writer) error {
	if c.URL == "" || c.Interval <= 0 {
		return fmt.Errorf("requests: --url and a positive --interval are required")
	}
	client := &http.Client{Timeout: c.Timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	var (
		mu     sync.Mutex
		outErr error
		wg     sync.WaitGroup
	)
	reqCtx := context.WithoutCancel(ctx)
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	end := time.Now().Add(c.Duration)
	for c.Duration == 0 || time.Now().Before(end) {
		start := time.Now()
		wg.Go(func() {
			line := fmt.Sprintf("%d %s", start.UnixNano(), request(reqCtx, client, c.URL))
			mu.Lock()
			defer mu.Unlock()
			if _, err := fmt.Fprintln(out, line); err != nil && outErr == nil {
				outErr = err
			}
		})
		select {
		case <-ctx.Done():
			wg.Wait()
			return outErr
		case <-t.C:
		}
	}
	wg.Wait()
	return outErr
}

// Request is one line of RunRequests' output.
type Request struct {
	At time.Time
	// Cluster answered; empty when the request failed (Err says why).
	Cluster, Err string
}

// ParseRequest reads one line of RunRequests' output; false when the
// line is not one.
func ParseRequest(line string) (Request, bool) {
	at, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	ns, err := strconv.ParseInt(at, 10, 64)
	if err != nil || rest == "" {
		return Request{}, false
	}
	r := Request{At: time.Unix(0, ns)}
	if why, failed := strings.CutPrefix(rest, "FAIL"); failed {
		r.Err = strings.TrimSpace(why)
		if r.Err == "" {
			r.Err = "failed"
		}
	} else {
		r.Cluster = rest
	}
	return r, true
}

// request is the cluster that answered url, or "FAIL <why>".
func request(ctx context.Context, client *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "FAIL " + err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return "FAIL " + err.Error()
	}
	defer resp.Body.Close()
	var id Identity
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&id); err != nil || id.Cluster == "" {
		return fmt.Sprintf("FAIL %s: not a whereami answer (%v)", resp.Status, err)
	}
	return id.Cluster
}
