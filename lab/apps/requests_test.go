package apps

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunRequests(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%2 == 0 {
			http.Error(w, "no", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(Identity{Cluster: "c2"})
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := RunRequests(context.Background(), RequestsConfig{URL: srv.URL, Interval: 20 * time.Millisecond, Timeout: time.Second, Duration: 200 * time.Millisecond}, &out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	ok, failed := 0, 0
	for _, l := range lines {
		r, parsed := ParseRequest(l)
		switch {
		case parsed && r.Cluster == "c2" && r.Err == "" && !r.At.IsZero():
			ok++
		case parsed && r.Cluster == "" && strings.Contains(r.Err, "503"):
			failed++
		default:
			t.Errorf("line %q: %+v", l, r)
		}
	}
	if len(lines) < 5 || ok == 0 || failed == 0 {
		t.Errorf("%d lines, %d answered, %d failed:\n%s", len(lines), ok, failed, out.String())
	}
	// Duration 0: until ctx ends; what ran is written.
	out.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if err := RunRequests(ctx, RequestsConfig{URL: srv.URL, Interval: 20 * time.Millisecond, Timeout: time.Second}, &out); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n < 3 {
		t.Errorf("until cancelled: %d lines:\n%s", n, out.String())
	}
	for _, l := range []string{"", "x c2", "123", "123 "} {
		if r, ok := ParseRequest(l); ok {
			t.Errorf("ParseRequest(%q) = %+v, want not a request line", l, r)
		}
	}
	if err := RunRequests(context.Background(), RequestsConfig{}, &out); err == nil {
		t.Error("no URL: no error")
	}
}
