package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/utils/ptr"

	"github.com/causeway-net/causeway/api/v1alpha1"
	"github.com/causeway-net/causeway/pkg/addrpolicy"
	"github.com/causeway-net/causeway/pkg/cable"
	"github.com/causeway-net/causeway/pkg/clusterset"
	"github.com/causeway-net/causeway/pkg/globalnet"
	"github.com/causeway-net/causeway/pkg/nat"
)

// activeTerm is the state of one term as the active gateway.
type activeTerm struct {
	driver     cable.Driver
	prober     prober
	forwarding bool
	// nodeNets are the networks of the gateway's public and private
	// addresses (read once per term): no remote may claim them.
	nodeNets    []netip.Prefix
	desired     Desired
	endpoints   map[string]v1alpha1.EndpointSpec // programmed remotes' specs
	setAt       map[string]time.Time             // when a remote was first programmed
	lastStatus  gatewayStatus
	lastWritten time.Time
	steps       []any // the last sync's steps: name, time since its start
	// global is this cluster's global CIDR split into its parts, once
	// claimed (globalnet only).
	global *globalnet.Layout
	// natSkipped is what the last NAT sync left out (logged on change).
	natSkipped string
	// untracked are the remote subnets whose conntrack entries this term
	// removed once its rules were in place (see nat.DeleteConntrack).
	untracked map[netip.Prefix]bool
	// adopted: the globalnet table was in the kernel when the term's
	// first NAT sync ran (a restarted active of this node: its
	// connections were tracked under these rules and are kept).
	adopted *bool
	// keyInUse says why this node's tunnel key is not this cluster's in
	// the broker (ErrKeyInUse); empty once claimed.
	keyInUse string
	// unreachable are the remotes the last judgeReach found unreachable.
	unreachable map[string]bool
	// resetAt is, per silent remote, when its tunnel session may be
	// reset again (resetSilentSessions).
	resetAt map[string]time.Time
}

var errLeaseNotFresh = errors.New("gateway lease not renewed for its duration: holding back publish and mirror")

// apiTimeout bounds the API writes of one sync (publish and mirror) and
// of one status write: an API server that does not answer (frozen,
// partitioned: a request would hang for as long) must not hold the
// active loop, which keeps programming the cable from the broker cache
// meanwhile (fail static). The writes are idempotent and retried.
const apiTimeout = 5 * time.Second

// runActive is one term as the active gateway: it ends when lctx ends
// (leadership lost or shutdown; runCtx tells which).
func (e *Engine) runActive(lctx, runCtx context.Context) {
	e.driverMu.Lock()
	defer e.driverMu.Unlock()
	e.setRole(v1alpha1.HAStatusActive)
	e.m.leaderChanges.Inc()
	start := time.Now()
	e.log.Info("became the active gateway")
	t := &activeTerm{prober: noProber{}, endpoints: map[string]v1alpha1.EndpointSpec{}, setAt: map[string]time.Time{}, untracked: map[netip.Prefix]bool{}, resetAt: map[string]time.Time{}}
	defer e.endTerm(t, lctx, runCtx)

	if !e.bcache.WaitForCacheSync(lctx) {
		return
	}
	resync := time.NewTicker(e.cfg.ResyncPeriod)
	defer resync.Stop()
	status := time.NewTicker(e.cfg.StatusInterval)
	defer status.Stop()
	judge := time.NewTicker(e.cfg.HealthInterval)
	defer judge.Stop()
	var retry <-chan time.Time
	backoff := 100 * time.Millisecond
	first := true
	for {
		err := e.sync(lctx, t)
		if lctx.Err() != nil {
			return
		}
		if err != nil {
			e.m.syncFailures.Inc()
			e.log.Error("sync failed, retrying", "err", err, "in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, 5*time.Second)
		} else {
			retry = nil
			backoff = 100 * time.Millisecond
			e.m.lastSync.SetToCurrentTime()
			if first {
				first = false
				e.log.Info("active gateway programmed", append([]any{"took", time.Since(start).Round(time.Millisecond), "connections", len(t.desired.Connections)}, t.steps...)...)
				sctx, cancel := context.WithTimeout(lctx, apiTimeout)
				e.writeStatus(sctx, t, true)
				cancel()
			}
		}
	wait:
		select {
		case <-lctx.Done():
			return
		case <-e.trigger:
		case <-resync.C:
			// The canary catches an outside flush of the globalnet
			// table, not a single element removed or altered behind
			// our back: the periodic resync rewrites the table whole.
			e.nat.RequestFull()
		case <-retry:
		case <-status.C:
			sctx, cancel := context.WithTimeout(lctx, apiTimeout)
			e.writeStatus(sctx, t, false)
			cancel()
			goto wait
		case <-judge.C:
			e.judgeReach(lctx, t)
			goto wait
		}
	}
}

// endTerm tears the term down: on shutdown without a successor (lctx's
// cause is not errHandedOver) the driver is closed (kernel state stays for a restarted gateway to
// adopt); when another candidate holds the Lease (the other ways a term
// ends: an unreachable API server ends none) the tunnel and the
// translation are removed, since a passive candidate holds none.
func (e *Engine) endTerm(t *activeTerm, lctx, runCtx context.Context) {
	keep := runCtx.Err() != nil && !errors.Is(context.Cause(lctx), errHandedOver)
	e.setRole(v1alpha1.HAStatusPassive)
	e.m.active.Set(0)
	e.view.clear()
	t.prober.Close()
	e.cfg.Reach.Set(nil) // a passive candidate judges nothing
	e.m.unreachable.Set(0)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), 5*time.Second)
	defer cancel()
	if t.driver != nil {
		var err error
		if keep {
			err = t.driver.Close()
		} else {
			err = t.driver.Cleanup(ctx)
		}
		if err != nil {
			e.log.Warn("stop cable driver", "err", err)
		}
	}
	if t.global != nil && !keep {
		// A passive candidate translates nothing; on shutdown the rules
		// stay for a restarted gateway to adopt, like the tunnel.
		e.dropTranslation(ctx)
	}
	for id := range t.endpoints {
		e.m.connStatus.DeleteLabelValues(id, string(v1alpha1.Connecting))
		e.m.connStatus.DeleteLabelValues(id, string(v1alpha1.Connected))
		e.m.connStatus.DeleteLabelValues(id, string(v1alpha1.ConnError))
	}
	if runCtx.Err() == nil {
		if err := e.writeGateway(ctx, gatewayStatus{role: v1alpha1.HAStatusPassive}); err != nil {
			e.log.Warn("write gateway status", "err", err)
		}
	}
	e.log.Info("no longer the active gateway")
}

// announced are the subnets this cluster is reached through: for IPv4 its
// global CIDR under globalnet, else its IPv4 pod and service CIDRs; its
// IPv6 pod and service CIDRs as they are (globalnet translates IPv4 only;
// every cable driver carries IPv6 subnets over an IPv4 WAN).
func (e *Engine) announced(t *activeTerm) []netip.Prefix {
	var out []netip.Prefix
	if t.global != nil {
		out = append(out, t.global.CIDR)
	}
	return append(out, e.directCIDRs(t)...)
}

// healthIP is the health-check address: the global CIDR's under
// globalnet, else the configured one (invalid: none).
func (e *Engine) healthIP(t *activeTerm) netip.Addr {
	if t.global != nil {
		return t.global.HealthCheck
	}
	return e.cfg.HealthCheckIP
}

// localEndpoint is the Endpoint this gateway publishes while active.
func (e *Engine) localEndpoint(t *activeTerm, key cable.Key) v1alpha1.EndpointSpec {
	spec := v1alpha1.EndpointSpec{
		ClusterID:   e.cfg.ClusterID,
		Hostname:    e.cfg.NodeName,
		CableDriver: v1alpha1.CableDriver(e.cfg.CableDriver),
		PublicIP:    e.cfg.PublicIP.String(),
		Port:        int32(e.cfg.Port),
		Subnets:     prefixStrings(e.announced(t)),
	}
	if e.cfg.PrivateIP.IsValid() {
		spec.PrivateIP = e.cfg.PrivateIP.String()
	}
	if !key.IsZero() {
		spec.PublicKey = key.String()
	}
	if hc := e.healthIP(t); hc.IsValid() {
		spec.HealthCheckIP = hc.String()
	}
	return spec
}

func (e *Engine) localCluster(t *activeTerm) v1alpha1.ClusterSpec {
	spec := v1alpha1.ClusterSpec{
		ClusterID:    e.cfg.ClusterID,
		PodCIDRs:     prefixStrings(e.cfg.PodCIDRs),
		ServiceCIDRs: prefixStrings(e.cfg.ServiceCIDRs),
	}
	if t.global != nil {
		spec.GlobalCIDRs = []string{t.global.CIDR.String()}
	}
	return spec
}

// sync is one full pass: node prerequisites, cable, publish, mirror.
func (e *Engine) sync(ctx context.Context, t *activeTerm) (err error) {
	start := time.Now()
	defer func() { e.m.syncDuration.Observe(time.Since(start).Seconds()) }()
	t.steps = t.steps[:0]
	step := func(name string) { t.steps = append(t.steps, name, time.Since(start).Round(time.Millisecond)) }

	// The ClusterSet's policy bounds every remote (and this cluster's
	// global CIDR): from the broker cache, like the remotes.
	pol, err := clusterset.Read(ctx, e.broker)
	if err != nil {
		return err
	}
	if !t.forwarding {
		if err := enableForwarding(e.cfg.Netns, slices.ContainsFunc(e.announced(t), func(p netip.Prefix) bool { return p.Addr().Is6() })); err != nil {
			return err
		}
		t.forwarding = true
		nets, err := nodeNetworks(e.cfg.Netns, e.cfg.PublicIP, e.cfg.PrivateIP)
		if err != nil {
			return fmt.Errorf("node networks: %w", err)
		}
		t.nodeNets = nets
	}
	if e.cfg.Globalnet && t.global == nil {
		// Before the driver: the tunnel carries the global CIDR.
		cidr, err := globalnet.ClaimCIDR(ctx, e.broker, e.broker, pol, e.cfg.subnets(), e.cfg.ClusterID)
		if err != nil {
			// Nothing is programmed or published without it; the
			// Gateway object says why (the sync retries with backoff).
			gw := &v1alpha1.Gateway{}
			if e.local.Get(ctx, client.ObjectKey{Namespace: e.cfg.Namespace, Name: e.cfg.NodeName}, gw) == nil {
				e.recorder.Event(gw, corev1.EventTypeWarning, "GlobalCIDRUnavailable", err.Error())
			}
			return fmt.Errorf("global CIDR: %w", err)
		}
		l, err := globalnet.ClusterLayout(cidr)
		if err != nil {
			return fmt.Errorf("global CIDR %s: %w", cidr, err)
		}
		t.global = &l
		e.nat.RequestFull()
		e.log.Info("global CIDR", "cidr", cidr, "healthCheck", l.HealthCheck, "ingress", l.Ingress, "egress", l.Egress)
		step("global-cidr")
	}
	if t.driver == nil {
		d, err := e.newDriver(ctx, e.announced(t))
		if err != nil {
			return err
		}
		t.driver = d
		e.view.setDriver(d)
		step("driver")
	}
	if hc := e.healthIP(t); hc.IsValid() {
		if err := ensureHealthAddr(e.cfg.Netns, e.cfg.device(), hc); err != nil {
			return err
		}
		if _, ok := t.prober.(noProber); ok {
			p, err := newICMPProber(e.cfg.Netns, hc, e.cfg.HealthInterval, e.log, e.observeProbe)
			if err != nil {
				return err
			}
			t.prober = p
		}
	}

	// Dataplane first: decide from the broker cache and program the
	// cable, then publish and mirror (API round trips) — on a failover
	// the tunnel is up before anything is written.
	remotes, err := e.readBroker(ctx)
	if err != nil {
		return err
	}
	// This cluster's own objects are the ones this gateway publishes:
	// take them from the local spec rather than from the broker's echo,
	// so that the local mirror (which the route agents follow) names the
	// new active gateway without waiting for the broker round trip.
	ownEP, ownCl := e.localEndpoint(t, t.driver.PublicKey()), e.localCluster(t)
	remotes = withOwn(remotes, e.cfg.ClusterID, ownEP, ownCl)
	// Overlaps between remotes are settled by the broker's record of
	// who claimed a CIDR first.
	cidrClaims, err := e.readCIDRClaims(ctx)
	if err != nil {
		return err
	}
	local := Local{ClusterID: e.cfg.ClusterID, Subnets: e.cfg.subnets(), NodeCIDRs: t.nodeNets, CableDriver: e.cfg.CableDriver, Port: e.cfg.Port, Policy: pol,
		CIDRClaims: cidrClaims}
	if t.global != nil {
		// A remote's global CIDRs must be its own claims in the broker.
		claims, err := globalnet.ClaimedCIDRs(ctx, e.broker, pol)
		if err != nil {
			return err
		}
		local.GlobalCIDRs, local.GlobalClaims = []netip.Prefix{t.global.CIDR}, claims
	}
	if e.cfg.keyed() {
		// A remote's key must be its own claim in the broker.
		if local.KeyOwners, err = e.keyOwners(ctx); err != nil {
			return err
		}
	}
	d := Compute(local, remotes)
	var errs []error
	if err := t.driver.Set(ctx, d.Connections); err != nil {
		var verr *cable.ValidationError
		if !errors.As(err, &verr) {
			e.m.driverSetFails.Inc()
			errs = append(errs, fmt.Errorf("program cable: %w", err))
		} else {
			e.log.Warn("cable driver refused connections", "err", err)
		}
	}
	t.prober.SetTargets(d.HealthTargets)
	step("cable")
	if t.global != nil {
		// Before anything is published: the conntrack entries syncNAT
		// deletes once its rules are in place must be gone before the
		// remotes send this node translated traffic (a packet between
		// the two would be tracked with a clashing reply tuple, its
		// source port remapped, its connection reset).
		if err := e.syncNAT(ctx, t, d); err != nil {
			errs = append(errs, err)
		}
		step("nat")
	}

	// Fencing of the API claims: a term that is not certain (the Lease
	// not renewed for a lease duration: another candidate may hold it
	// by now) keeps its kernel state, programmed above from the caches,
	// but publishes and mirrors nothing — an old active cut off from its
	// own API server but not from the broker would otherwise overwrite
	// the new active's Endpoint on every retry, and the two would take
	// turns re-pointing every remote gateway. The renewal that makes the
	// term certain again kicks a sync.
	if e.leaseFresh() {
		// The key is claimed before the Endpoint announcing it is
		// published; a key that is not ours is not published at all.
		var claimErr error
		if e.cfg.keyed() {
			claimErr = e.claimKey(ctx, ownEP.PublicKey)
			inUse := ""
			if errors.Is(claimErr, ErrKeyInUse) {
				inUse = claimErr.Error()
			}
			e.noteKeyInUse(ctx, t, inUse)
		}
		errs = append(errs, claimErr)
		errs = append(errs, e.publishAndMirror(ctx, pol, remotes, d, e.directCIDRs(t), ownEP, ownCl, claimErr == nil, step)...)
	} else {
		errs = append(errs, errLeaseNotFresh)
	}

	now := time.Now()
	programmed := map[string]v1alpha1.EndpointSpec{}
	for _, r := range remotes {
		for _, c := range d.Connections {
			if c.ClusterID == r.ClusterID {
				programmed[r.ClusterID] = *r.Endpoint
				if old, ok := t.endpoints[r.ClusterID]; !ok || !reflect.DeepEqual(old, *r.Endpoint) {
					t.setAt[r.ClusterID] = now
				}
			}
		}
	}
	for id := range t.endpoints {
		if _, ok := programmed[id]; !ok {
			delete(t.setAt, id)
			for _, s := range []v1alpha1.ConnectionStatus{v1alpha1.Connecting, v1alpha1.Connected, v1alpha1.ConnError} {
				e.m.connStatus.DeleteLabelValues(id, string(s))
			}
		}
	}
	t.endpoints = programmed
	t.desired = d
	e.view.setRefused(refusals(e.cfg.ClusterID, d))
	invalid := 0
	for _, c := range d.Clusters {
		if c.Endpoint != nil && !c.Endpoint.Valid {
			invalid++
		}
	}
	e.m.remotes.WithLabelValues("valid").Set(float64(len(d.Connections)))
	e.m.remotes.WithLabelValues("invalid").Set(float64(invalid))
	return errors.Join(errs...)
}

// +kubebuilder:rbac:groups=causeway.dev,resources=clustersetpolicies,verbs=get;create;update

// publishAndMirror publishes this cluster to its broker namespace (its
// claims on the direct CIDRs, then the Endpoint remote gateways wait for;
// only when publish is set) while mirroring into the local cluster (its
// own Endpoint first: the route agents wait for it). The two talk to
// different API servers. Both are bounded by apiTimeout.
func (e *Engine) publishAndMirror(ctx context.Context, pol addrpolicy.Policy, remotes []Remote, d Desired, direct []netip.Prefix, ownEP v1alpha1.EndpointSpec, ownCl v1alpha1.ClusterSpec, publish bool, step func(string)) []error {
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	var errs []error
	var pubErr error
	var wg sync.WaitGroup
	if publish {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pubErr = e.publish(actx, direct, ownEP, ownCl)
		}()
	}
	if err := e.mirror(actx, remotes, d); err != nil {
		errs = append(errs, err)
	}
	// The route agents, which have no broker identity, read the
	// ClusterSet's policy from this mirror.
	if err := clusterset.Store(actx, e.local, pol); err != nil {
		errs = append(errs, fmt.Errorf("mirror the ClusterSet policy: %w", err))
	}
	step("mirrored")
	wg.Wait()
	step("published")
	if pubErr != nil {
		errs = append(errs, pubErr)
	}
	return errs
}

// +kubebuilder:rbac:groups=causeway.dev,resources=globalingresses;globalegresses,verbs=get;list;watch

// syncNAT makes the globalnet translation match the cluster's
// GlobalIngresses and GlobalEgresses and the remote subnets just
// programmed into the cable.
func (e *Engine) syncNAT(ctx context.Context, t *activeTerm, d Desired) error {
	var list v1alpha1.GlobalIngressList
	if err := e.lcache.List(ctx, &list); err != nil {
		return fmt.Errorf("list GlobalIngresses: %w", err)
	}
	var egresses v1alpha1.GlobalEgressList
	if err := e.lcache.List(ctx, &egresses); err != nil {
		return fmt.Errorf("list GlobalEgresses: %w", err)
	}
	if t.adopted == nil {
		// A passive node holds no table (dropTranslation), so one
		// found here was left by this node's previous active run.
		t.adopted = ptr.To(e.nat.Present(ctx))
	}
	var remote []netip.Prefix
	for _, c := range d.Connections {
		remote = append(remote, c.Subnets...)
	}
	cfg, skipped := globalnet.Rules(*t.global, list.Items, egresses.Items, remote)
	cfg.Device = e.cfg.device() // a table this node leaves behind when killed goes inert with the device
	if s := strings.Join(skipped, "; "); s != t.natSkipped {
		t.natSkipped = s
		if s != "" {
			e.log.Warn("GlobalIngress or GlobalEgress entries not translated", "skipped", skipped)
		}
	}
	if _, err := e.nat.Sync(ctx, cfg); err != nil {
		return fmt.Errorf("globalnet rules: %w", err)
	}
	// Flows this node forwarded while passive are tracked without this
	// gateway's translation: drop their entries, once per remote subnet
	// and term, now that the rules are in place.
	var fresh []netip.Prefix
	for _, p := range remote {
		if !t.untracked[p] && !*t.adopted {
			fresh = append(fresh, p)
		}
	}
	n, err := nat.DeleteConntrack(e.cfg.Netns, fresh)
	if err != nil {
		return err
	}
	for _, p := range fresh {
		t.untracked[p] = true
	}
	if n > 0 {
		e.log.Info("removed conntrack entries of flows tracked before this term's translation", "entries", n, "remotes", fresh)
	}
	return nil
}

// publish writes this cluster's claims on its direct CIDRs, its
// Endpoint, then its Cluster, to its broker namespace: the importers
// route a direct CIDR only once it is claimed.
func (e *Engine) publish(ctx context.Context, direct []netip.Prefix, ep v1alpha1.EndpointSpec, cl v1alpha1.ClusterSpec) error {
	ns := brokerNamespace(e.cfg.ClusterID)
	if err := e.claimCIDRs(ctx, direct); err != nil {
		return fmt.Errorf("publish CIDR claims: %w", err)
	}
	if err := upsertEndpoint(ctx, e.broker, ns, e.cfg.ClusterID, ep, nil); err != nil {
		return fmt.Errorf("publish endpoint: %w", err)
	}
	if err := upsertCluster(ctx, e.broker, ns, e.cfg.ClusterID, cl, nil); err != nil {
		return fmt.Errorf("publish cluster: %w", err)
	}
	return nil
}

// withOwn returns remotes with the own cluster's Endpoint and Cluster
// replaced by (or, before the first publication, set to) ep and cl; the
// broker's creation times are kept.
func withOwn(remotes []Remote, own string, ep v1alpha1.EndpointSpec, cl v1alpha1.ClusterSpec) []Remote {
	out := slices.Clone(remotes)
	i := slices.IndexFunc(out, func(r Remote) bool { return r.ClusterID == own })
	if i < 0 {
		out = append(out, Remote{ClusterID: own})
		i = len(out) - 1
	}
	out[i].Endpoint, out[i].Cluster = &ep, &cl
	return out
}

func (e *Engine) observeProbe(cluster string, rtt time.Duration) {
	if rtt < 0 {
		e.m.probesLost.WithLabelValues(cluster).Inc()
		return
	}
	e.m.rtt.WithLabelValues(cluster).Observe(rtt.Seconds())
}

// readBroker collects every cluster's Cluster and Endpoint from the broker
// cache. Objects outside a cluster namespace or not named after the
// namespace's cluster are ignored.
func (e *Engine) readBroker(ctx context.Context) ([]Remote, error) {
	var eps v1alpha1.EndpointList
	if err := e.broker.List(ctx, &eps); err != nil {
		return nil, fmt.Errorf("list broker endpoints: %w", err)
	}
	var cls v1alpha1.ClusterList
	if err := e.broker.List(ctx, &cls); err != nil {
		return nil, fmt.Errorf("list broker clusters: %w", err)
	}
	byID := map[string]*Remote{}
	get := func(obj metav1.Object) *Remote {
		id, ok := clusterIDFromNamespace(obj.GetNamespace())
		if !ok || obj.GetName() != id {
			return nil
		}
		if byID[id] == nil {
			byID[id] = &Remote{ClusterID: id}
		}
		return byID[id]
	}
	for i := range eps.Items {
		if r := get(&eps.Items[i]); r != nil {
			r.Endpoint = &eps.Items[i].Spec
			r.EndpointCreated = eps.Items[i].CreationTimestamp.Time
		}
	}
	for i := range cls.Items {
		if r := get(&cls.Items[i]); r != nil {
			r.Cluster = &cls.Items[i].Spec
			r.ClusterCreated = cls.Items[i].CreationTimestamp.Time
		}
	}
	out := make([]Remote, 0, len(byID))
	for _, r := range byID {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClusterID < out[j].ClusterID })
	return out, nil
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// kind says how upsert reaches the spec and status of one of the two kinds
// the gateway publishes and mirrors (Cluster, Endpoint).
type kind[T client.Object, S any] struct {
	name   string
	new    func() T
	spec   func(T) *S
	status func(T) (conds *[]metav1.Condition, observed *int64)
	id     func(S) string // cluster ID, for the label
}

var (
	clusterKind = kind[*v1alpha1.Cluster, v1alpha1.ClusterSpec]{
		name: "cluster",
		new:  func() *v1alpha1.Cluster { return &v1alpha1.Cluster{} },
		spec: func(o *v1alpha1.Cluster) *v1alpha1.ClusterSpec { return &o.Spec },
		status: func(o *v1alpha1.Cluster) (*[]metav1.Condition, *int64) {
			return &o.Status.Conditions, &o.Status.ObservedGeneration
		},
		id: func(s v1alpha1.ClusterSpec) string { return s.ClusterID },
	}
	endpointKind = kind[*v1alpha1.Endpoint, v1alpha1.EndpointSpec]{
		name: "endpoint",
		new:  func() *v1alpha1.Endpoint { return &v1alpha1.Endpoint{} },
		spec: func(o *v1alpha1.Endpoint) *v1alpha1.EndpointSpec { return &o.Spec },
		status: func(o *v1alpha1.Endpoint) (*[]metav1.Condition, *int64) {
			return &o.Status.Conditions, &o.Status.ObservedGeneration
		},
		id: func(s v1alpha1.EndpointSpec) string { return s.ClusterID },
	}
)

// upsertEndpoint makes the Endpoint ns/name have spec (and, when cond is
// not nil, that Valid condition).
func upsertEndpoint(ctx context.Context, c client.Client, ns, name string, spec v1alpha1.EndpointSpec, cond *metav1.Condition) error {
	_, err := upsert(ctx, c, endpointKind, ns, name, spec, cond)
	return err
}

// upsertCluster does the same for a Cluster.
func upsertCluster(ctx context.Context, c client.Client, ns, name string, spec v1alpha1.ClusterSpec, cond *metav1.Condition) error {
	_, err := upsert(ctx, c, clusterKind, ns, name, spec, cond)
	return err
}

// The mirrored Cluster and Endpoint objects (see mirror) are read,
// written and pruned directly, never through a cache.
//
// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=clusters;endpoints,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups=causeway.dev,namespace=causeway-system,resources=clusters/status;endpoints/status,verbs=update

// upsert makes the object ns/name of kind k have spec (and, when cond is
// not nil, that condition) and reports whether the condition changed.
func upsert[T client.Object, S any](ctx context.Context, c client.Client, k kind[T, S], ns, name string, spec S, cond *metav1.Condition) (bool, error) {
	obj := k.new()
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	switch {
	case apierrors.IsNotFound(err):
		obj = k.new()
		obj.SetNamespace(ns)
		obj.SetName(name)
		obj.SetLabels(map[string]string{v1alpha1.LabelClusterID: k.id(spec)})
		*k.spec(obj) = spec
		if err := c.Create(ctx, obj); err != nil {
			return false, fmt.Errorf("create %s %s/%s: %w", k.name, ns, name, err)
		}
	case err != nil:
		return false, fmt.Errorf("get %s %s/%s: %w", k.name, ns, name, err)
	case !reflect.DeepEqual(*k.spec(obj), spec):
		*k.spec(obj) = spec
		if err := c.Update(ctx, obj); err != nil {
			return false, fmt.Errorf("update %s %s/%s: %w", k.name, ns, name, err)
		}
	}
	if cond == nil {
		return false, nil
	}
	conds, observed := k.status(obj)
	cond.ObservedGeneration = obj.GetGeneration()
	changed := setCondition(conds, *cond)
	if !changed && *observed == obj.GetGeneration() {
		return false, nil
	}
	*observed = obj.GetGeneration()
	if err := c.Status().Update(ctx, obj); err != nil {
		return false, fmt.Errorf("update %s status %s/%s: %w", k.name, ns, name, err)
	}
	return changed, nil
}

func setCondition(conds *[]metav1.Condition, c metav1.Condition) bool {
	for i, old := range *conds {
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
			return false
		}
		c.LastTransitionTime = old.LastTransitionTime
		if old.Status != c.Status {
			c.LastTransitionTime = metav1.Now()
		}
		changed := old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message
		(*conds)[i] = c
		return changed
	}
	c.LastTransitionTime = metav1.Now()
	*conds = append(*conds, c)
	return true
}
