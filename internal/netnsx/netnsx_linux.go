// Package netnsx runs code inside a network namespace given by path, and
// opens netlink handles there. An empty path means the caller's current
// namespace.
package netnsx

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Do runs fn on an OS thread switched into the namespace at path and
// returns its error. The thread is discarded afterwards (never unlocked),
// so no goroutine can later run in the wrong namespace. Sockets and
// devices created by fn stay in that namespace.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Intentionally no UnlockOSThread: the runtime terminates the
		// thread when this goroutine exits.
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", path, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Handle returns a netlink handle whose sockets live in the namespace at
// path (the current one if empty).
func Handle(path string) (*netlink.Handle, error) {
	if path == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, fmt.Errorf("open netlink: %w", err)
		}
		return h, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("open netlink in %s: %w", path, err)
	}
	return h, nil
}
