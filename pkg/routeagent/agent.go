package routeagent

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/causeway-net/causeway/api/v1alpha1"
)

// EndpointLister returns the mirrored Endpoints of causeway-system.
type EndpointLister interface {
	ListEndpoints(ctx context.Context) ([]v1alpha1.Endpoint, error)
}

// AgentConfig wires an Agent.
type AgentConfig struct {
	Node      Node
	Params    Params
	Endpoints EndpointLister
	Dataplane Dataplane
	Metrics   *Metrics
	Logger    *slog.Logger
	Clock     clock.Clock
}

// Agent computes the node's desired state from the Endpoints and hands it
// to the Dataplane. Sync is what the Runner calls; Changed is what the
// Endpoint informer calls.
type Agent struct {
	cfg AgentConfig
	log *slog.Logger
	clk clock.Clock

	mu           sync.Mutex
	pendingSince time.Time     // first event not yet applied
	applied      *DesiredState // last state Set successfully
	gateway      *Gateway
	synced       bool
	// remotes are the remote subnets of the last sync's inputs (known
	// once a sync has read them); forget is set when the gateway Lease
	// left this node and its flows are not yet forgotten (see
	// GatewayLeaseMoved).
	remotes      []netip.Prefix
	remotesKnown bool
	forget       bool
}

// NewAgent returns an Agent.
func NewAgent(cfg AgentConfig) *Agent {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Agent{cfg: cfg, log: cfg.Logger, clk: cfg.Clock}
}

// Changed records that an input changed (for the latency metric); the
// caller also kicks the Runner.
func (a *Agent) Changed() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pendingSince.IsZero() {
		a.pendingSince = a.clk.Now()
	}
}

// Sync computes the desired state and applies it. A partial sync whose
// desired state equals the last applied one does nothing; a full sync
// always lets the Dataplane compare with the node (repairing outside
// changes).
func (a *Agent) Sync(ctx context.Context, full bool) error {
	start := a.clk.Now()
	a.mu.Lock()
	pending := a.pendingSince
	a.pendingSince = time.Time{}
	a.mu.Unlock()
	err := a.sync(ctx, full)
	mode := "partial"
	if full {
		mode = "full"
	}
	m := a.cfg.Metrics
	m.SyncDuration.WithLabelValues(mode).Observe(a.clk.Since(start).Seconds())
	if err != nil {
		m.SyncFailures.Inc()
		a.mu.Lock()
		if a.pendingSince.IsZero() || (!pending.IsZero() && pending.Before(a.pendingSince)) {
			a.pendingSince = pending
		}
		a.mu.Unlock()
		a.log.Error("sync failed", "full", full, "err", err)
		return err
	}
	m.LastSuccess.Set(float64(a.clk.Now().UnixNano()) / 1e9)
	if !pending.IsZero() {
		m.ProgrammingLatency.Observe(a.clk.Since(pending).Seconds())
	}
	return nil
}

func (a *Agent) sync(ctx context.Context, full bool) error {
	eps, err := a.cfg.Endpoints.ListEndpoints(ctx)
	if err != nil {
		return fmt.Errorf("list endpoints: %w", err)
	}
	in, notes := InputsFromEndpoints(a.cfg.Node, eps, a.cfg.Params)
	a.mu.Lock()
	a.remotes, a.remotesKnown = remoteSubnets(in.Remotes), true
	a.mu.Unlock()
	if err := a.forgetFlows(ctx); err != nil {
		return err
	}
	d := Compute(in)
	a.mu.Lock()
	unchanged := a.applied != nil && a.applied.Equal(d)
	prevGW := a.gateway
	firstSync := !a.synced
	a.mu.Unlock()
	if unchanged && !full {
		return nil
	}
	if firstSync || !sameGateway(prevGW, in.Gateway) {
		if !firstSync {
			a.cfg.Metrics.GatewayChanges.Inc()
		}
		a.log.Info("active gateway", "from", describeGateway(prevGW), "to", describeGateway(in.Gateway))
	}
	rep, err := a.cfg.Dataplane.Set(ctx, d)
	if len(rep.Changes) > 0 {
		a.log.Info("node state changed", "changes", rep.Changes)
	}
	if rep.OutsideFlush && !firstSync {
		a.cfg.Metrics.OutsideFlushes.Inc()
		a.log.Warn("our iptables chains were removed from outside; restored", "canary", ChainCanary)
	}
	if err != nil {
		return fmt.Errorf("apply desired state: %w", err)
	}
	skipped := slices.Concat(notes, d.Skipped)
	if !unchanged && len(skipped) > 0 {
		a.log.Warn("inputs left out", "reasons", skipped)
	}
	routes := 0
	for _, r := range d.Routes {
		if r.Via.IsValid() {
			routes++
		}
	}
	a.cfg.Metrics.RoutesProgrammed.Set(float64(routes))
	a.cfg.Metrics.SkippedSubnets.Set(float64(len(skipped)))
	a.mu.Lock()
	a.applied, a.gateway, a.synced = &d, in.Gateway, true
	a.mu.Unlock()
	return nil
}

// ActiveGateway returns the node address of the active gateway the last
// applied state routes through (invalid while none).
func (a *Agent) ActiveGateway() netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gateway == nil {
		return netip.Addr{}
	}
	return a.gateway.NodeIP
}

// Applied returns the last desired state applied, if any.
func (a *Agent) Applied() (DesiredState, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.applied == nil {
		return DesiredState{}, false
	}
	return *a.applied, true
}

// GatewayLeaseMoved is told every change of the gateway Lease's holder
// (node names; "" when released or deleted). When the holder moves off
// this node, the flows the gateway translated here are forgotten at
// once, before the new active has built its tunnel (see forgetFlows);
// a failure is retried by the next sync, which kick is asked for.
func (a *Agent) GatewayLeaseMoved(ctx context.Context, from, to string, kick func()) {
	if from != a.cfg.Node.Name || to == from {
		return
	}
	a.mu.Lock()
	a.forget = true
	a.mu.Unlock()
	if err := a.forgetFlows(ctx); err != nil {
		a.log.Warn("forget the flows of the active gateway that left this node; retried by the next sync", "err", err)
		kick()
	}
}

// forgetFlows deletes the conntrack entries of the remote flows when the
// gateway Lease has left this node since they were last forgotten (once
// a sync has read the remote subnets: before, the sync does it). The
// gateway translated those flows here (globalnet DNAT of a remote client
// to a pod on this node, egress SNAT of this node's pods), so their
// entries carry its NAT; a killed gateway removes nothing. The same
// flows reach this node's pods again from the new active, already
// translated, with the reply tuple those entries hold: conntrack would
// give each new entry another source port to keep the tuples unique,
// the pod would see a segment of a connection it does not know and
// answer it with a reset (measured in the lab: the flow's next packet
// through the new active was re-tracked with another port and reset,
// 0.3 s before the mirrored Endpoint had re-pointed this node). The
// Lease moves before the new active has a tunnel, programmed peers or
// a published Endpoint, so the entries are gone before the remotes can
// send it anything. Their next packets are tracked anew (TCP mid-stream
// too, nf_conntrack_tcp_loose).
func (a *Agent) forgetFlows(ctx context.Context) error {
	a.mu.Lock()
	pending, prefixes := a.forget && a.remotesKnown, a.remotes
	a.mu.Unlock()
	if !pending {
		return nil
	}
	n, err := a.cfg.Dataplane.ForgetFlows(ctx, prefixes)
	if err != nil {
		return fmt.Errorf("forget the flows of the active gateway that left this node: %w", err)
	}
	a.mu.Lock()
	a.forget = false
	a.mu.Unlock()
	a.log.Info("the gateway lease left this node: removed the conntrack entries of remote flows", "entries", n)
	return nil
}

func remoteSubnets(remotes []Remote) []netip.Prefix {
	var out []netip.Prefix
	for _, r := range remotes {
		out = append(out, r.Subnets...)
	}
	return out
}

func sameGateway(a, b *Gateway) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func describeGateway(g *Gateway) string {
	if g == nil {
		return "none"
	}
	return fmt.Sprintf("%s (%s)", g.Hostname, g.NodeIP)
}

// lazyLister lets the informer's handlers be wired before the informer
// exists; the Runner starts only after set.
type lazyLister struct {
	mu sync.Mutex
	l  EndpointLister
}

func (z *lazyLister) set(l EndpointLister) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.l = l
}

func (z *lazyLister) ListEndpoints(ctx context.Context) ([]v1alpha1.Endpoint, error) {
	z.mu.Lock()
	l := z.l
	z.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("endpoint informer not started")
	}
	return l.ListEndpoints(ctx)
}

// loggingDataplane is --dry-run: it logs each new desired state.
type loggingDataplane struct {
	log  *slog.Logger
	last string
}

func (d *loggingDataplane) Set(_ context.Context, desired DesiredState) (Report, error) {
	if s := desired.String(); s != d.last {
		d.last = s
		d.log.Info("desired state (dry run)", "state", s)
	}
	return Report{}, nil
}

func (d *loggingDataplane) Cleanup(context.Context) error { return nil }

func (d *loggingDataplane) ForgetFlows(_ context.Context, prefixes []netip.Prefix) (uint, error) {
	d.log.Info("conntrack entries to delete (dry run)", "prefixes", prefixes)
	return 0, nil
}
