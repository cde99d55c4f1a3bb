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
