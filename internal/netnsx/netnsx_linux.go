// Package netnsx runs code inside a network namespace given by path, and
// opens netlink handles there. An empty path means the caller's current
// namespace.
package netnsx

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Do runs fn on an OS thread switched into the namespace at path and
// returns its error. The thread is switched back and handed back to the
// scheduler afterwards; if switching back fails it stays locked, so the
// runtime discards it and no goroutine ever runs in the wrong namespace.
// Sockets and devices created by fn stay in that namespace; goroutines fn
// starts do not run in it.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- fmt.Errorf("get current netns: %w", err)
			return // thread discarded
		}
		defer orig.Close()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open netns %s: %w", path, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return // thread discarded: a failed setns may leave it anywhere
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", path, err))
			return // thread discarded
		}
		runtime.UnlockOSThread()
		errc <- ferr
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
