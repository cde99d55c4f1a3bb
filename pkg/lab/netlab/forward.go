package netlab

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer in.Close()
			out, err := dial(ctx)
			if err != nil {
				log.Warn("forward: dial failed", "from", in.RemoteAddr().String(), "err", err)
				return
			}
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
		}()
	}
}
