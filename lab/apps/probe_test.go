package apps

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func probeLines(t *testing.T, out string) map[string][]string {
	t.Helper()
	lines := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			lines[f[0]] = f[1:]
		}
	}
	return lines
}

// freePort returns a loopback address nothing listens on (for now).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestRunProbe: a target that starts listening only after a while is
// reported once it accepts, with a success time after it started
// listening.
func TestRunProbe(t *testing.T) {
	late := freePort(t)
	pr, pw := io.Pipe()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- RunProbe(context.Background(), ProbeConfig{Interval: 5 * time.Millisecond, AttemptTimeout: time.Second, Timeout: time.Minute}, pr, &out)
	}()
	if _, err := io.WriteString(pw, "late "+late+"\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // refused attempts meanwhile
	listening := time.Now()
	l, err := net.Listen("tcp", late)
	if err != nil {
		t.Fatalf("listen again on %s: %v", late, err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("RunProbe: %v", err)
	}
	f := probeLines(t, out.String())["late"]
	if len(f) != 2 || f[0] != "ok" {
		t.Fatalf("late target: %q, want ok <time>\n%s", f, out.String())
	}
	if ns, err := strconv.ParseInt(f[1], 10, 64); err != nil || time.Unix(0, ns).Before(listening) {
		t.Errorf("late target succeeded at %s (%v), before it listened (%s)", f[1], err, listening)
	}
}

// TestRunProbeFails: a target that never listens is reported as failed,
// with the last error, after the timeout; a malformed line gets a fail
// line too.
func TestRunProbeFails(t *testing.T) {
	never := freePort(t)
	var out bytes.Buffer
	in := strings.NewReader("never " + never + "\nbogus\n")
	if err := RunProbe(context.Background(), ProbeConfig{Interval: 5 * time.Millisecond, AttemptTimeout: time.Second, Timeout: 2 * time.Second}, in, &out); err != nil {
		t.Fatalf("RunProbe: %v", err)
	}
	lines := probeLines(t, out.String())
	if f := lines["never"]; len(f) < 2 || f[0] != "fail" || !strings.Contains(strings.Join(f, " "), "refused") {
		t.Errorf("never-listening target: %q, want fail with connection refused", f)
	}
	if f := lines["bogus"]; len(f) < 1 || f[0] != "fail" {
		t.Errorf("malformed line: %q, want fail", f)
	}
	if err := RunProbe(context.Background(), ProbeConfig{}, strings.NewReader(""), &out); err == nil {
		t.Error("RunProbe accepted a zero config")
	}
}
