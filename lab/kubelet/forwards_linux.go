package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/causeway-net/causeway/lab/netlab"
)

// Forwards are the node's connections to the root namespace that every
// lab node serves, whichever kubelet runs it (this package's, or a real
// kubelet with containerd): the API server and broker forwarders inside
// the node namespace and the API server's egress socket.
type Forwards struct {
	Host *netlab.Host
	// NodeNS is the node's network namespace.
	NodeNS string
	// APIServer, when set ("127.0.0.1:PORT" in the root namespace), is
	// served on 0.0.0.0:APIServerPort inside NodeNS: every connection is
	// spliced to it, so that processes in the node reach the API server
	// at https://127.0.0.1:6443 (and pods at netlab.APIAddress:6443).
	APIServer string
	// Broker does the same for the broker's API server on BrokerPort.
	Broker string
	// EgressSocket, when set, serves the cluster's API server egress on
	// this Unix socket: an HTTP CONNECT proxy dialling from inside NodeNS,
	// through which the API server reaches every node's kubelet API.
	EgressSocket string
	Log          *slog.Logger
}

// Serve starts the forwarders in bg, running until ctx ends; it returns
// once they all listen.
func (f Forwards) Serve(ctx context.Context, bg *sync.WaitGroup) error {
	for port, target := range map[int]string{APIServerPort: f.APIServer, BrokerPort: f.Broker} {
		if target == "" {
			continue
		}
		ln, err := f.Host.Listen(f.NodeNS, "tcp", net.JoinHostPort("0.0.0.0", strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("forwarder on port %d: %w", port, err)
		}
		bg.Go(func() {
			var d net.Dialer
			err := netlab.Forward(ctx, ln, func(ctx context.Context) (net.Conn, error) {
				return d.DialContext(ctx, "tcp", target)
			}, f.Log)
			if err != nil {
				f.Log.Error("forwarder stopped", "port", port, "to", target, "err", err)
			}
		})
	}
	if f.EgressSocket == "" {
		return nil
	}
	ln, err := listenUnix(f.EgressSocket)
	if err != nil {
		return fmt.Errorf("API server egress: %w", err)
	}
	bg.Go(func() {
		if err := netlab.ForwardConnect(ctx, ln, func(ctx context.Context, addr string) (net.Conn, error) {
			return dialIn(ctx, f.Host, f.NodeNS, "tcp", addr)
		}, f.Log); err != nil {
			f.Log.Error("API server egress stopped", "socket", f.EgressSocket, "err", err)
		}
	})
	return nil
}

// dialIn connects from inside a namespace.
func dialIn(ctx context.Context, h *netlab.Host, netns, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(netns, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// listenUnix listens on a Unix socket at path (owner only), replacing a
// socket left by an earlier process.
func listenUnix(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
