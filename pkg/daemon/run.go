package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Runtime is what a running daemon gets from this package.
type Runtime struct {
	// Log is the daemon's structured logger.
	Log *slog.Logger
	// Metrics is the registry served on /metrics.
	Metrics *prometheus.Registry
	// Addr is the address /metrics, /healthz and /readyz listen on, once
	// bound; empty when the listener is off.
	Addr string
	// HealthAddr is the address of the separate /healthz and /readyz
	// listener, once bound; empty when there is none.
	HealthAddr string

	// health is the health listener's mux (also behind the metrics
	// listener's).
	health *http.ServeMux

	mu       sync.Mutex
	notReady map[string]string // check name -> reason
}

// HandleHealth serves h at pattern beside /healthz and /readyz: on the
// health listener (--health-addr, every interface by default) and on the
// metrics listener. For what other nodes read of this daemon (the
// gateway's reachability verdict); never for anything secret.
func (r *Runtime) HandleHealth(pattern string, h http.Handler) {
	r.health.Handle(pattern, h)
}

// SetReady records the state of one readiness check; /readyz answers 200
// only when every check that was ever set is ready. Each change is logged
// (a check becoming not ready or changing its reason, and ready again), so
// a daemon that waits says what for.
func (r *Runtime) SetReady(check string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	was, notReady := r.notReady[check]
	if err == nil {
		if notReady {
			delete(r.notReady, check)
			r.Log.Info("ready", "check", check)
		}
		return
	}
	if msg := err.Error(); !notReady || msg != was {
		r.notReady[check] = msg
		r.Log.Info("not ready", "check", check, "reason", msg)
	}
}

func (r *Runtime) readiness() (bool, map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]string, len(r.notReady))
	for k, v := range r.notReady {
		out[k] = v
	}
	return len(out) == 0, out
}

// ShutdownTimeout bounds how long a daemon may take to stop after SIGTERM.
const ShutdownTimeout = 10 * time.Second

// Run validates opts, takes the cluster ID from the About API when
// --cluster-id is empty, sets up logging and the HTTP listener, and calls
// work with a context that ends on SIGTERM or SIGINT. Run returns work's
// error; a context.Canceled caused by the signal counts as a clean stop.
// The readiness check "startup" is not ready until work clears it.
func Run(component string, opts *Options, work func(ctx context.Context, rt *Runtime) error) error {
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid flags:\n%w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return RunContext(ctx, component, opts, work)
}

// RunContext is Run with a caller-owned context instead of signals.
func RunContext(ctx context.Context, component string, opts *Options, work func(ctx context.Context, rt *Runtime) error) error {
	if err := opts.ResolveClusterID(ctx); err != nil {
		return err
	}
	if _, set := os.LookupEnv("GOGC"); !set && opts.GCPercent > 0 {
		debug.SetGCPercent(opts.GCPercent)
	}
	log := opts.NewLogger(component)
	// client-go and controller-runtime log through klog and logr: send
	// both to the same structured handler.
	klog.SetSlogLogger(log)
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))

	rt := &Runtime{Log: log, Metrics: NewRegistry(), notReady: map[string]string{"startup": "not started"}}
	rt.health = rt.healthMux()

	// Metrics (and pprof) on one listener, by default on loopback only: a
	// host-network daemon's metrics listener is otherwise open on every
	// interface of the node. Health on its own for the kubelet's probes.
	srvErr := make(chan error, 2)
	var srvs []*http.Server
	serve := func(what, addr string, h http.Handler) (string, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return "", fmt.Errorf("listen for %s on %s: %w", what, addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		srvs = append(srvs, srv)
		go func() { srvErr <- fmt.Errorf("%s server: %w", what, srv.Serve(ln)) }()
		log.Info("serving "+what, "addr", ln.Addr().String())
		return ln.Addr().String(), nil
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		for _, srv := range srvs {
			_ = srv.Shutdown(sctx)
		}
	}()
	if on(opts.MetricsAddr) {
		addr, err := serve("metrics and health", opts.MetricsAddr, rt.mux(opts.Profiling))
		if err != nil {
			return err
		}
		rt.Addr = addr
	}
	if on(opts.HealthAddr) && opts.HealthAddr != opts.MetricsAddr {
		addr, err := serve("health", opts.HealthAddr, rt.health)
		if err != nil {
			return err
		}
		rt.HealthAddr = addr
	}

	log.Info("starting", "pid", os.Getpid())
	workErr := make(chan error, 1)
	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { workErr <- work(workCtx, rt) }()

	var err error
	select {
	case err = <-workErr:
	case err = <-srvErr:
		cancel()
		<-workErr
	case <-ctx.Done():
		log.Info("shutting down", "cause", context.Cause(ctx))
		cancel()
		select {
		case err = <-workErr:
		case <-time.After(ShutdownTimeout):
			err = fmt.Errorf("did not stop within %s", ShutdownTimeout)
		}
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	if err != nil {
		log.Error("stopped with error", "err", err)
		return err
	}
	log.Info("stopped")
	return nil
}

func on(addr string) bool { return addr != "" && addr != "0" }

// NewRegistry returns the registry a daemon serves on /metrics: the Go
// runtime's and the process's collectors, to which the daemon adds its
// own.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// mux serves /metrics, what the health mux serves and, with profiling,
// pprof.
func (r *Runtime) mux(profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/", r.health)
	mux.Handle("/metrics", promhttp.HandlerFor(r.Metrics, promhttp.HandlerOpts{Registry: r.Metrics}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// healthMux serves /healthz and /readyz (and what HandleHealth adds).
func (r *Runtime) healthMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, failing := r.readiness()
		if ok {
			fmt.Fprintln(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		for check, reason := range failing {
			fmt.Fprintf(w, "%s: %s\n", check, reason)
		}
	})
	return mux
}
