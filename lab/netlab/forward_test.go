package netlab

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/causeway-net/causeway/internal/testserve"
)

// echoUpper serves on loopback, answering each line upper-cased.
func echoUpper(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testserve.Serve(t, l, func(c net.Conn) {
		s := bufio.NewScanner(c)
		for s.Scan() {
			io.WriteString(c, strings.ToUpper(s.Text())+"\n")
		}
	})
	return l
}

func runForward(t *testing.T, ln net.Listener, target string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var d net.Dialer
		done <- Forward(ctx, ln, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", target) }, nil)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Forward: %v", err)
		}
	})
}

func roundTrip(t *testing.T, c net.Conn, msg string) string {
	t.Helper()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

func TestForwardLoopback(t *testing.T) {
	srv := echoUpper(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	runForward(t, ln, srv.Addr().String())
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := roundTrip(t, c, "hello"); got != "HELLO" {
		t.Errorf("got %q", got)
	}
}

// TestForwardConnect: an HTTP CONNECT on a Unix socket (as the API
// server's egress selector sends it) reaches the named target; a target
// that cannot be dialled gets 502, another method 405.
func TestForwardConnect(t *testing.T) {
	srv := echoUpper(t)
	ln, err := net.Listen("unix", t.TempDir()+"/egress.sock")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	dialed := make(chan string, 10)
	go func() {
		done <- ForwardConnect(ctx, ln, func(ctx context.Context, addr string) (net.Conn, error) {
			dialed <- addr
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}, nil)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ForwardConnect: %v", err)
		}
	})
	request := func(req string) (net.Conn, *bufio.Reader, string) {
		t.Helper()
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		status, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		for {
			l, err := br.ReadString('\n')
			if err != nil || l == "\r\n" {
				break
			}
		}
		return c, br, strings.TrimSpace(status)
	}
	target := srv.Addr().String()
	c, br, status := request("CONNECT " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if status != "HTTP/1.1 200 Connection established" {
		t.Fatalf("CONNECT answered %q", status)
	}
	if _, err := io.WriteString(c, "through\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "THROUGH\n" {
		t.Errorf("through the tunnel: %q, %v", line, err)
	}
	if got := <-dialed; got != target {
		t.Errorf("dialled %s, want %s", got, target)
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := free.Addr().String()
	free.Close()
	if _, _, status := request("CONNECT " + closed + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); !strings.HasPrefix(status, "HTTP/1.1 502") {
		t.Errorf("CONNECT to a closed port answered %q, want 502", status)
	}
	if _, _, status := request("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); !strings.HasPrefix(status, "HTTP/1.1 405") {
		t.Errorf("GET answered %q, want 405", status)
	}
}
