package netlab

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"github.com/causeway-net/causeway/internal/netnsx"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsfsMagic is the f_type of a bound network namespace file.
const nsfsMagic = 0x6e736673

// netnsPath is where a named namespace is bound.
func (h *Host) netnsPath(name string) string { return filepath.Join(h.netnsDir, name) }

// isBoundNetns tells whether path is a mounted namespace file.
func isBoundNetns(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == nsfsMagic
}

// prepareNetnsDir makes the namespace directory a shared mount point, as
// `ip netns add` does, so that a namespace unbound here is also unbound in
// mount namespaces created later (e.g. by `ip netns exec`).
func (h *Host) prepareNetnsDir() error {
	if err := os.MkdirAll(h.netnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", h.netnsDir, err)
	}
	err := unix.Mount("", h.netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		if err := unix.Mount(h.netnsDir, h.netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on itself: %w", h.netnsDir, err)
		}
		err = unix.Mount("", h.netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s a shared mount: %w", h.netnsDir, err)
	}
	return nil
}

// EnsureNetns creates the named network namespace unless it exists, bound
// at <netns dir>/<name> like `ip netns add`. Loopback is brought up.
func (h *Host) EnsureNetns(name string) error {
	if strings.ContainsAny(name, "/\x00") || name == "" || name == "." || name == ".." {
		return fmt.Errorf("invalid namespace name %q", name)
	}
	path := h.netnsPath(name)
	if isBoundNetns(path) {
		return nil
	}
	h.prepareOnce.Do(func() { h.prepareErr = h.prepareNetnsDir() })
	if h.prepareErr != nil {
		return h.prepareErr
	}
	// A file that is not a namespace is the rest of a failed attempt.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", path, err)
	}
	err := onThrowawayThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
		if err != nil {
			return err
		}
		f.Close()
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			os.Remove(path)
			return fmt.Errorf("bind %s: %w", path, err)
		}
		return nil
	})
	if errors.Is(err, os.ErrExist) && isBoundNetns(path) {
		return nil // created concurrently
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// DeleteNetns unbinds and removes the named namespace; missing is fine.
// Links in it go when the last reference to the namespace does (processes
// still running in it keep it alive: kill them first).
func (h *Host) DeleteNetns(name string) error {
	path := h.netnsPath(name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// ListNetns returns the names of bound namespaces starting with prefix,
// sorted.
func (h *Host) ListNetns(prefix string) ([]string, error) {
	ents, err := os.ReadDir(h.netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// openNetns returns a handle on the named namespace; close it.
func (h *Host) openNetns(name string) (netns.NsHandle, error) {
	ns, err := netns.GetFromPath(h.netnsPath(name))
	if err != nil {
		return netns.None(), fmt.Errorf("open namespace %s: %w", name, err)
	}
	return ns, nil
}

// Do runs fn on an OS thread switched into the named namespace. Sockets fn
// opens stay in that namespace; goroutines fn starts do not run in it.
// An empty name runs fn in the caller's namespace.
func (h *Host) Do(name string, fn func() error) error {
	if name == "" {
		return fn()
	}
	return netnsx.Do(h.netnsPath(name), fn)
}

// onThrowawayThread runs fn on a locked OS thread that is discarded
// afterwards, for work that changes the thread's namespaces for good.
func onThrowawayThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		done <- fn()
	}()
	return <-done
}

// Listen opens a listening socket inside the named namespace; it keeps
// serving there whatever thread accepts on it.
func (h *Host) Listen(name, network, address string) (net.Listener, error) {
	var l net.Listener
	err := h.Do(name, func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s in %s: %w", network, address, name, err)
	}
	return l, nil
}

// ListenPacket is Listen for datagram sockets.
func (h *Host) ListenPacket(name, network, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := h.Do(name, func() error {
		var err error
		c, err = net.ListenPacket(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s %s in %s: %w", network, address, name, err)
	}
	return c, nil
}

// Dial opens a connection from inside the named namespace.
func (h *Host) Dial(name, network, address string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(name, func() error {
		var err error
		c, err = net.Dial(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s %s from %s: %w", network, address, name, err)
	}
	return c, nil
}

// NodeNetns is the path of a node's network namespace.
func (h *Host) NodeNetns(cluster, node string) string {
	return h.netnsPath(h.names.Node(cluster, node))
}
