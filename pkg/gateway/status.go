package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/cable"
)

// gatewayStatus is the plain value written to this node's Gateway.
type gatewayStatus struct {
	role  v1alpha1.HAStatus
	local *v1alpha1.EndpointSpec
	conns []v1alpha1.Connection
	// keyInUse, when set, says why the tunnel key is not published
	// (ErrKeyInUse): Ready is False with ReasonKeyInUse.
	keyInUse string
}

// connStatus decides a connection's state from the driver and the health
// checks. It is pure: with a health-check target, the tunnel is connected
// while echoes come back (an answer within timeout), in error when
// answers stopped for longer or none came for as long as echoes were
// sent, connecting before the first answer; without one the driver's
// view decides.
func connStatus(drv cable.Status, hasTarget bool, ps probeStats, now time.Time, interval, timeout time.Duration) (v1alpha1.ConnectionStatus, string) {
	if !hasTarget {
		if drv.Connected {
			return v1alpha1.Connected, "tunnel up (no health-check IP published)"
		}
		return v1alpha1.Connecting, "waiting for the tunnel handshake"
	}
	switch {
	case ps.LastReply.IsZero() && time.Duration(ps.Lost)*interval >= timeout:
		return v1alpha1.ConnError, fmt.Sprintf("no health-check answer in %d echoes", ps.Lost)
	case ps.LastReply.IsZero():
		return v1alpha1.Connecting, "waiting for the first health-check answer"
	case now.Sub(ps.LastReply) > timeout:
		return v1alpha1.ConnError, fmt.Sprintf("no health-check answer for %s", now.Sub(ps.LastReply).Round(time.Millisecond))
	}
	return v1alpha1.Connected, fmt.Sprintf("health checks answered, %d%% loss", ps.LossPercent())
}

// reachableAgainAfter is how many health-check answers in a row bring an
// unreachable remote back.
const reachableAgainAfter = 3

// unreachable is the verdict on one probed remote for the route agents
// (pure): a remote becomes unreachable when its connection is in error
// (connStatus: its echoes unanswered for the timeout), and is reachable
// again after reachableAgainAfter answers in a row — so a remote that
// answers one echo in a while does not flap its backends in and out of
// every VIP.
func unreachable(was bool, status v1alpha1.ConnectionStatus, ps probeStats) bool {
	if was {
		return ps.AnsweredInARow < reachableAgainAfter
	}
	return status == v1alpha1.ConnError
}

// judgeReach publishes the probed remotes that are unreachable on the
// board the route agents follow (Config.Reach), and restarts the tunnel
// session of every probed remote whose connection is in error
// (resetSilentSessions). Remotes without a health-check target are
// never unreachable: nothing measures them.
func (e *Engine) judgeReach(ctx context.Context, t *activeTerm) {
	now := time.Now()
	was := t.unreachable
	t.unreachable = map[string]bool{}
	var ids, silent []string
	for id, ps := range t.prober.Stats() {
		st, _ := connStatus(cable.Status{}, true, ps, now, e.cfg.HealthInterval, e.cfg.HealthTimeout)
		if unreachable(was[id], st, ps) {
			t.unreachable[id] = true
			ids = append(ids, id)
		}
		if st == v1alpha1.ConnError {
			silent = append(silent, id)
		}
	}
	if e.cfg.Reach.Set(ids) {
		slices.Sort(ids)
		e.log.Info("unreachable remotes (health checks)", "unreachable", ids)
	}
	e.m.unreachable.Set(float64(len(ids)))
	e.resetSilentSessions(ctx, t, silent, now)
}

// sessionResetInterval is the least time between two session resets of
// one remote's tunnel; a random part of a second is added so that two
// gateways resetting the tunnel between them do not keep meeting.
const sessionResetInterval = time.Second

// resetSilentSessions restarts the session of the tunnels to the remotes
// in silent (health checks unanswered for the timeout) when the driver
// keeps one (cable.SessionResetter), at most once per
// sessionResetInterval each. A WireGuard session can end up with one
// side sending under keys the other no longer accepts (seen after a
// gateway node that died came back and took over again: the path stayed
// silent until WireGuard's own new handshake, 15 s after the first
// unanswered packet); a new handshake ends it. A remote that is down
// costs a handshake attempt per reset.
func (e *Engine) resetSilentSessions(ctx context.Context, t *activeTerm, silent []string, now time.Time) {
	r, ok := t.driver.(cable.SessionResetter)
	if !ok {
		return
	}
	for id := range t.resetAt {
		if !slices.Contains(silent, id) {
			delete(t.resetAt, id) // answering again: the next silence resets at once
		}
	}
	for _, id := range silent {
		next, again := t.resetAt[id]
		if now.Before(next) {
			continue
		}
		t.resetAt[id] = now.Add(sessionResetInterval + rand.N(time.Second))
		if err := r.ResetSession(ctx, id); err != nil {
			e.log.Warn("reset the tunnel session of a silent remote", "remote", id, "err", err)
			continue
		}
		e.m.sessionResets.WithLabelValues(id).Inc()
		// Once per silence at Info: a remote that stays down is reset
		// every second or two (counted in the metric).
		level := slog.LevelInfo
		if again {
			level = slog.LevelDebug
		}
		e.log.Log(ctx, level, "tunnel silent: session reset, a new handshake starts", "remote", id)
	}
}

// connections renders the term's connections for the Gateway status.
func (e *Engine) connections(ctx context.Context, t *activeTerm) []v1alpha1.Connection {
	var drv []cable.Status
	if t.driver != nil {
		drv, _ = t.driver.Connections(ctx)
	}
	byID := map[string]cable.Status{}
	for _, s := range drv {
		byID[s.ClusterID] = s
	}
	stats := t.prober.Stats()
	now := time.Now()
	var out []v1alpha1.Connection
	for id, spec := range t.endpoints {
		_, hasTarget := t.desired.HealthTargets[id]
		ps := stats[id]
		st, msg := connStatus(byID[id], hasTarget, ps, now, e.cfg.HealthInterval, e.cfg.HealthTimeout)
		c := v1alpha1.Connection{ClusterID: id, Endpoint: spec, Status: st, StatusMessage: msg}
		if hasTarget && ps.Sent > 0 {
			c.LatencyRTT = &v1alpha1.LatencyRTT{LossPercent: ps.LossPercent()}
			if ps.Avg > 0 {
				c.LatencyRTT.Last = roundRTT(ps.Last).String()
				c.LatencyRTT.Min = roundRTT(ps.Min).String()
				c.LatencyRTT.Max = roundRTT(ps.Max).String()
				c.LatencyRTT.Average = roundRTT(ps.Avg).String()
			}
		}
		if hs := byID[id].LastHandshake; !hs.IsZero() {
			c.LastHandshake = &metav1.Time{Time: hs.Truncate(time.Second)}
		}
		e.m.setConnStatus(id, st)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClusterID < out[j].ClusterID })
	return out
}

// writeStatus refreshes the Gateway status of an active term: written when
// a connection's state or the published endpoint changed, or when the
// last write is older than StatusMaxAge (RTT figures alone do not cause a
// write: bounded API load).
func (e *Engine) writeStatus(ctx context.Context, t *activeTerm, force bool) {
	var key cable.Key
	if t.driver != nil {
		key = t.driver.PublicKey()
	}
	ep := e.localEndpoint(t, key)
	st := gatewayStatus{role: v1alpha1.HAStatusActive, local: &ep, conns: e.connections(ctx, t), keyInUse: t.keyInUse}
	if !force && sameShape(st, t.lastStatus) && time.Since(t.lastWritten) < e.cfg.StatusMaxAge {
		return
	}
	if err := e.writeGateway(ctx, st); err != nil {
		e.log.Warn("write gateway status", "err", err)
		return
	}
	t.lastStatus, t.lastWritten = st, time.Now()
}

// sameShape compares two statuses ignoring RTT figures and messages.
func sameShape(a, b gatewayStatus) bool {
	if a.role != b.role || a.keyInUse != b.keyInUse || !reflect.DeepEqual(a.local, b.local) || len(a.conns) != len(b.conns) {
		return false
	}
	for i := range a.conns {
		x, y := a.conns[i], b.conns[i]
		if x.ClusterID != y.ClusterID || x.Status != y.Status || !reflect.DeepEqual(x.Endpoint, y.Endpoint) ||
			!reflect.DeepEqual(x.LastHandshake, y.LastHandshake) {
			return false
		}
	}
	return true
}

// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=gateways,verbs=get;create
// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=gateways/status,verbs=update

// writeGateway makes this node's Gateway object carry st.
func (e *Engine) writeGateway(ctx context.Context, st gatewayStatus) error {
	key := client.ObjectKey{Namespace: e.cfg.Namespace, Name: e.cfg.NodeName}
	gw := &v1alpha1.Gateway{}
	err := e.local.Get(ctx, key, gw)
	if apierrors.IsNotFound(err) {
		gw = &v1alpha1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{v1alpha1.LabelClusterID: e.cfg.ClusterID}}}
		if err := e.local.Create(ctx, gw); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create gateway %s: %w", key.Name, err)
		}
		err = e.local.Get(ctx, key, gw)
	}
	if err != nil {
		return fmt.Errorf("get gateway %s: %w", key.Name, err)
	}
	gw.Status.HAStatus = st.role
	gw.Status.LocalEndpoint = st.local
	gw.Status.TunnelDevice = ""
	if st.role == v1alpha1.HAStatusActive {
		gw.Status.TunnelDevice = e.cfg.TunnelDevice
	}
	gw.Status.Connections = st.conns
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Passive", Message: "standing by",
		ObservedGeneration: gw.Generation}
	switch {
	case st.role == v1alpha1.HAStatusActive && st.keyInUse != "":
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonKeyInUse, "endpoint not published: "+st.keyInUse
	case st.role == v1alpha1.HAStatusActive:
		ready.Reason, ready.Message = "Active", fmt.Sprintf("active with %d connections", len(st.conns))
	}
	meta.SetStatusCondition(&gw.Status.Conditions, ready)
	if err := e.local.Status().Update(ctx, gw); err != nil {
		return fmt.Errorf("update gateway status %s: %w", key.Name, err)
	}
	return nil
}

// roundRTT rounds d to three significant digits (1.39ms, 310µs, 12.3ms):
// what a human reads, not the nanoseconds a probe measured.
func roundRTT(d time.Duration) time.Duration {
	unit := time.Nanosecond
	for d >= 1000*unit && unit < time.Second {
		unit *= 10
	}
	return d.Round(unit)
}
