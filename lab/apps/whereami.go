package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// WhereamiConfig configures the whereami server.
type WhereamiConfig struct {
	// Port is the TCP (HTTP) and UDP port; default 8080.
	Port int
	// Address to bind; "" means all addresses.
	Address string
	// Identity reported in every reply.
	Cluster   string
	Namespace string
	Pod       string
	Node      string
	// PodIP reported; "" reports the address the request arrived on.
	PodIP  string
	Logger *slog.Logger
	// Ready, if set, receives the bound TCP and UDP addresses once both
	// sockets listen.
	Ready func(tcp, udp net.Addr)
}

// AddFlags binds the configuration to flags named like the ones
// Registry.Command passes.
func (c *WhereamiConfig) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&c.Port, "port", 8080, "TCP (HTTP) and UDP port")
	fs.StringVar(&c.Address, "address", "", "address to bind (all if empty)")
	fs.StringVar(&c.Cluster, "cluster", "", "cluster name to report")
	fs.StringVar(&c.Namespace, "namespace", "", "pod namespace to report")
	fs.StringVar(&c.Pod, "pod", "", "pod name to report")
	fs.StringVar(&c.Node, "node", "", "node name to report")
	fs.StringVar(&c.PodIP, "pod-ip", "", "pod IP to report (the receiving address if empty)")
}

// Identity is whereami's reply, over HTTP and UDP alike.
type Identity struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Node      string `json:"node,omitempty"`
	PodIP     string `json:"podIP"`
	// Client is the request's source address as the server sees it
	// (after any NAT on the way).
	Client string `json:"client"`
	// Echo is the UDP payload received (UDP only).
	Echo string `json:"echo,omitempty"`
}

// RunWhereami serves until ctx is done.
func RunWhereami(ctx context.Context, cfg WhereamiConfig) error {
	if cfg.Port == 0 {
		cfg.Port = 8080
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger.With("app", "whereami")
	addr := net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("whereami: listen tcp %s: %w", addr, err)
	}
	defer ln.Close()
	// With port 0 the UDP socket takes the port the TCP one got.
	udpAddr := net.JoinHostPort(cfg.Address, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	pc, err := net.ListenPacket("udp", udpAddr)
	if err != nil {
		return fmt.Errorf("whereami: listen udp %s: %w", udpAddr, err)
	}
	defer pc.Close()

	id := func(local, remote net.Addr) Identity {
		podIP := cfg.PodIP
		if podIP == "" && local != nil {
			podIP = hostOf(local.String())
		}
		return Identity{Cluster: cfg.Cluster, Namespace: cfg.Namespace, Pod: cfg.Pod, Node: cfg.Node, PodIP: podIP, Client: remote.String()}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		remote, err := net.ResolveTCPAddr("tcp", r.RemoteAddr)
		var ra net.Addr = remote
		if err != nil {
			ra = strAddr(r.RemoteAddr)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		if err := enc.Encode(id(local, ra)); err != nil {
			log.Debug("write reply", "err", err)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	go func() { errc <- serveUDP(pc, id) }()
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr(), pc.LocalAddr())
	}
	log.Info("serving", "tcp", ln.Addr().String(), "udp", pc.LocalAddr().String(), "cluster", cfg.Cluster, "pod", cfg.Namespace+"/"+cfg.Pod)

	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		pc.Close()
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
			return nil
		}
		return fmt.Errorf("whereami: %w", err)
	}
}

// serveUDP answers each datagram with the identity, echoing the payload.
func serveUDP(pc net.PacketConn, id func(local, remote net.Addr) Identity) error {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		reply := id(pc.LocalAddr(), from)
		if a, ok := pc.LocalAddr().(*net.UDPAddr); ok && a.IP.IsUnspecified() {
			// The receiving address is unknown without IP_PKTINFO: report
			// only a configured pod IP.
			reply.PodIP = id(nil, from).PodIP
		}
		reply.Echo = string(buf[:n])
		b, err := json.Marshal(reply)
		if err != nil {
			return err
		}
		if _, err := pc.WriteTo(append(b, '\n'), from); err != nil && !errors.Is(err, net.ErrClosed) {
			continue // one unreachable client must not stop the server
		}
	}
}

func hostOf(hostport string) string {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport
	}
	return h
}

type strAddr string

func (s strAddr) Network() string { return "tcp" }
func (s strAddr) String() string  { return string(s) }
