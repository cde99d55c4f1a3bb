// Package testserve runs throwaway TCP servers for tests.
package testserve

import (
	"net"
	"testing"
)

// Serve accepts connections on ln until the test ends (ln is closed then)
// and handles each in its own goroutine, closing it when handle returns.
func Serve(tb testing.TB, ln net.Listener, handle func(c net.Conn)) {
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
}
