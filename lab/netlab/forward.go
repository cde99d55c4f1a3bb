package netlab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
)

// Forward accepts connections on ln and splices each to a connection from
// dial, until ctx is done (then ln is closed and Forward returns after the
// open connections end). With ln opened inside a node namespace (Host.Listen)
// and dial connecting from the caller's namespace, processes in the node
// reach servers of the root namespace, e.g. the kube-apiserver on
// 127.0.0.1.
func Forward(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error), log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return serve(ctx, ln, func(in net.Conn) {
		out, err := dial(ctx)
		if err != nil {
			log.Warn("forward: dial failed", "from", in.RemoteAddr().String(), "err", err)
			return
		}
		splice(ctx, in, out)
	})
}

// ForwardConnect is an HTTP CONNECT proxy on ln: each connection names its
// target in one CONNECT request ("CONNECT 172.18.1.11:10250 HTTP/1.1"),
// which dial connects to; on success the proxy answers 200 and splices the
// two, otherwise it answers 502 (dial failed) or 405 (another method) and
// closes. With dial connecting from inside a node namespace, a kube-apiserver
// of the root namespace reaches the lab's nodes through its egress selector
// (HTTPConnect over a Unix socket). It runs until ctx is done, like Forward.
func ForwardConnect(ctx context.Context, ln net.Listener, dial func(ctx context.Context, address string) (net.Conn, error), log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return serve(ctx, ln, func(in net.Conn) {
		br := bufio.NewReader(in)
		req, err := http.ReadRequest(br)
		if err != nil {
			log.Warn("connect proxy: bad request", "err", err)
			return
		}
		if req.Method != http.MethodConnect {
			fmt.Fprintf(in, "HTTP/1.1 405 Method Not Allowed\r\nConnection: close\r\n\r\n")
			return
		}
		out, err := dial(ctx, req.Host)
		if err != nil {
			log.Warn("connect proxy: dial failed", "to", req.Host, "err", err)
			fmt.Fprintf(in, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n%v\n", err)
			return
		}
		if _, err := io.WriteString(in, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			out.Close()
			return
		}
		// The client waits for the answer before it speaks, but keep
		// whatever it sent early.
		if n := br.Buffered(); n > 0 {
			early, _ := br.Peek(n)
			if _, err := out.Write(early); err != nil {
				out.Close()
				return
			}
		}
		splice(ctx, in, out)
	})
}

// serve accepts connections on ln and handles each on its own goroutine
// (handle closes nothing; serve closes the accepted connection after it),
// until ctx is done or ln fails; it returns after every handler returned.
func serve(ctx context.Context, ln net.Listener, handle func(net.Conn)) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		in, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Go(func() {
			defer in.Close()
			handle(in)
		})
	}
}

// splice copies both ways between in and out until both directions end
// (or ctx is done), then closes out.
func splice(ctx context.Context, in, out net.Conn) {
	defer out.Close()
	closeOnDone := context.AfterFunc(ctx, func() { in.Close(); out.Close() })
	defer closeOnDone()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if c, ok := dst.(interface{ CloseWrite() error }); ok {
			c.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}
