package gateway

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// elector elects one holder of a coordination.k8s.io Lease, with the
// semantics of client-go's leaderelection (same Lease fields, so
// kubectl and other tools read it the same way) but WATCHING the Lease
// instead of polling it:
//
//   - a candidate notes the local time at which it first saw each
//     version of the Lease (from the watch, or from a read after a
//     conflict) and may take it over once leaseDurationSeconds have
//     passed since without a new version, or at once when the holder
//     released it (empty holder) or when the holder is itself (a
//     restarted process adopting its own term). A timer fires at the
//     expiry, so takeover does not wait for a poll; a released Lease is
//     seen at the next watch event. With candidate probes (holders), a
//     holder that answers none and has written no new version for quiet
//     is taken over before the expiry, and a holder that answers them
//     is not taken over at all: an expired Lease whose holder answers
//     is left to it (it is alive and in its term, only not reaching
//     the API server; it renews when it does).
//   - every write is conditional on the resourceVersion last seen, so
//     two candidates can never both win; the loser re-reads.
//   - the holder renews every retry period (each attempt bounded by
//     renewDeadline) and steps down only when a successful read shows
//     another holder (fencing by holderIdentity). Renewals that fail are
//     retried without end: the holder fails static, keeping its term
//     (and the node its tunnel) through an API outage. A candidate that
//     could not write the Lease restarts its expiry clock when it next
//     reads the same version, so an outage alone hands nothing over.
//
// Only local elapsed time is compared, never clocks of different nodes.
type elector struct {
	leases   coordclient.LeaseInterface // for the watch (no request timeout)
	writes   coordclient.LeaseInterface // reads and writes, request timeout ≤ renewDeadline
	name     string
	identity string
	duration time.Duration
	deadline time.Duration // renew deadline
	retry    time.Duration
	log      *slog.Logger
	// onNewLeader is called, on a goroutine of its own, whenever the
	// observed holder changes to a non-empty identity.
	onNewLeader func(identity string)

	// onRenewedAgain is called (on renew's goroutine, must not block)
	// when a renewal succeeds after the lease had gone unrenewed for its
	// duration.
	onRenewedAgain func()
	// onRenewed, when set, is told the send time of every successful
	// write of the Lease (acquire or renewal); it must not block.
	onRenewed func(sent time.Time)

	// Candidate probes (optional): probeIP and probeToken are written
	// to the Lease's ProbeIPAnnotation and ProbeTokenAnnotation with
	// every acquisition; holders is aimed at the observed holder's, and
	// a holder it reports down is taken over once no new version has
	// come for quiet (before the lease expires).
	probeIP    netip.Addr
	probeToken string
	holders    *holderProbe
	quiet      time.Duration

	// deferred is the resourceVersion of the expired Lease last left to
	// its answering holder (logged once per version); only the acquire
	// loop's goroutine uses it.
	deferred string

	// probedAt is when a candidate's probe was last answered by this
	// holder (Unix ns; zero: never): a passive candidate is watching.
	probedAt atomic.Int64

	mu         sync.Mutex
	renewed    time.Time // send time of this term's last successful write; zero: no term
	synced     bool
	observed   *coordinationv1.Lease // nil: no Lease (or not synced yet)
	observedAt time.Time             // when this version was first seen here
	leader     string                // last holder reported to onNewLeader
	changed    chan struct{}         // capacity 1: observed changed
	listed     chan struct{}         // closed once synced
}

func newElector(watchClient, writeClient coordclient.LeasesGetter, namespace, name, identity string, duration, deadline, retry time.Duration, log *slog.Logger, onNewLeader func(string)) *elector {
	return &elector{
		leases: watchClient.Leases(namespace), writes: writeClient.Leases(namespace),
		name: name, identity: identity, duration: duration, deadline: deadline, retry: retry,
		log: log, onNewLeader: onNewLeader, changed: make(chan struct{}, 1), listed: make(chan struct{}),
	}
}

// watch keeps the observed Lease current until ctx ends.
func (el *elector) watch(ctx context.Context) {
	sel := fields.OneTermEqualSelector("metadata.name", el.name).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return el.leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return el.leases.Watch(ctx, o)
		},
	}
	_, ctrl := toolscache.NewInformerWithOptions(toolscache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &coordinationv1.Lease{},
		Handler: toolscache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { el.observe(obj) },
			UpdateFunc: func(_, obj any) { el.observe(obj) },
			DeleteFunc: func(any) { el.observe(nil) },
		},
	})
	go func() {
		if toolscache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
			el.mu.Lock()
			el.synced = true
			el.mu.Unlock()
			close(el.listed)
			el.notify()
		}
	}()
	ctrl.RunWithContext(ctx)
}

// waitSynced waits until the Lease watch has listed the Lease once; false
// when ctx ended first.
func (el *elector) waitSynced(ctx context.Context) bool {
	select {
	case <-el.listed:
		return true
	case <-ctx.Done():
		return false
	}
}

// observe records a version of the Lease (nil: deleted).
func (el *elector) observe(obj any) {
	l, _ := obj.(*coordinationv1.Lease)
	el.mu.Lock()
	if l != nil && l.Name != el.name {
		el.mu.Unlock()
		return
	}
	same := (l == nil && el.observed == nil) || (l != nil && el.observed != nil && l.ResourceVersion == el.observed.ResourceVersion)
	var report string
	if !same {
		el.observed, el.observedAt = l, time.Now()
		h := holderOf(l)
		if h != "" && h != el.leader {
			el.leader, report = h, h
		}
		if el.holders != nil {
			if h == el.identity {
				h = "" // the holder does not probe itself
			}
			el.holders.watch(h, probeIPOf(l), probeTokenOf(l))
		}
	}
	el.mu.Unlock()
	if report != "" && el.onNewLeader != nil {
		go el.onNewLeader(report) // may block (leftover removal): not on the watch
	}
	if !same {
		el.notify()
	}
}

func (el *elector) notify() {
	select {
	case el.changed <- struct{}{}:
	default:
	}
}

// probeIPOf is the holder's probe IP written on l (invalid: none).
func probeIPOf(l *coordinationv1.Lease) netip.Addr {
	if l == nil {
		return netip.Addr{}
	}
	a, _ := netip.ParseAddr(l.Annotations[ProbeIPAnnotation])
	return a
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// acquire blocks until this candidate holds the Lease or ctx ends (nil).
// It returns the Lease as written and when that write was sent.
func (el *elector) acquire(ctx context.Context) (*coordinationv1.Lease, time.Time) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	unreachable := false // the last write failed other than by a conflict
	for {
		if unreachable {
			if err := el.recheck(ctx); err != nil {
				el.log.Debug("re-read gateway lease", "err", err)
			} else {
				unreachable = false
			}
		}
		el.mu.Lock()
		synced, cur, at := el.synced, el.observed, el.observedAt
		el.mu.Unlock()
		wait := el.retry
		if synced && !unreachable {
			sent := time.Now()
			l, expiresIn, err := el.tryAcquire(ctx, cur, at)
			switch {
			case l != nil:
				el.setRenewed(sent)
				return l, sent
			case err != nil:
				el.log.Warn("acquire gateway lease", "err", err)
				unreachable = true
			case expiresIn > 0:
				wait = expiresIn
			default:
				wait = 0 // re-read after a conflict: try again at once
			}
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return nil, time.Time{}
			case <-el.changed:
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return nil, time.Time{}
		}
	}
}

// recheck reads the Lease after this candidate could not write it, and
// restarts the expiry clock when the version is the one already seen:
// while the API server did not answer this candidate it probably did not
// answer the holder either, whose renewals failed, and which keeps its
// term through the outage (fail static, see renew). Counting the outage
// as expiry would hand the Lease over at the moment the API server comes
// back and tear down a working tunnel. A holder that really died is
// taken over one lease duration after the API server answered again.
func (el *elector) recheck(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, el.deadline)
	defer cancel()
	l, err := el.writes.Get(rctx, el.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		l = nil
	case err != nil:
		return fmt.Errorf("get lease: %w", err)
	}
	el.mu.Lock()
	if (l == nil) == (el.observed == nil) && (l == nil || l.ResourceVersion == el.observed.ResourceVersion) {
		el.observedAt = time.Now()
	}
	el.mu.Unlock()
	el.observe(l)
	return nil
}

// tryAcquire takes the Lease over if cur (seen since at) allows it. It
// returns the written Lease on success; otherwise how long until cur
// expires (0 after a conflict, when the caller should look again).
func (el *elector) tryAcquire(ctx context.Context, cur *coordinationv1.Lease, at time.Time) (*coordinationv1.Lease, time.Duration, error) {
	now := metav1.NewMicroTime(time.Now())
	if cur == nil {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: el.name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(el.identity), LeaseDurationSeconds: ptr.To(el.durationSeconds()),
				AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](0),
			},
		}
		el.annotate(l)
		l, err := el.writes.Create(ctx, l, metav1.CreateOptions{})
		if err == nil {
			el.observe(l)
			return l, 0, nil
		}
		if apierrors.IsAlreadyExists(err) {
			return nil, 0, el.reread(ctx)
		}
		return nil, 0, fmt.Errorf("create lease: %w", err)
	}
	holder := holderOf(cur)
	if holder != "" && holder != el.identity {
		left := time.Until(at.Add(leaseDuration(cur, el.duration)))
		switch {
		case el.holders == nil:
		case el.holders.gone(holder):
			// Its probe port is closed: the holder's process is gone
			// (its node is up). Nothing to wait for.
			if left > 0 {
				left = 0
				el.log.Info("the gateway lease holder's probe port is closed: taking the lease over before it expires",
					"holder", holder, "sinceLastVersion", time.Since(at).Round(time.Millisecond))
			}
		case el.holders.down(holder):
			// The holder answers no probes: once no new version has
			// come for quiet either, it is dead, not slow to renew.
			if left > 0 {
				if left = min(left, time.Until(at.Add(el.quiet))); left <= 0 {
					el.log.Info("the gateway lease holder answers no probes: taking the lease over before it expires",
						"holder", holder, "sinceLastVersion", time.Since(at).Round(time.Millisecond))
				}
			}
		case left <= 0 && el.holders.answering(holder):
			// Expired, but the holder is alive and in its term: it
			// cannot reach the API server (or not in time). Taking over
			// would move the active role and its traffic for nothing,
			// and a takeover write sent now may be queued in a frozen
			// API server or etcd and executed at the thaw ahead of the
			// holder's renewals. Wait: a new version, the holder going
			// down (its prober wakes this loop) or a release decides.
			if cur.ResourceVersion != el.deferred {
				el.deferred = cur.ResourceVersion
				el.log.Info("the gateway lease expired but its holder answers the candidate probes: leaving it the lease",
					"holder", holder, "sinceLastVersion", time.Since(at).Round(time.Millisecond))
			}
			return nil, el.duration, nil
		}
		if left > 0 {
			return nil, left, nil
		}
	}
	l := cur.DeepCopy()
	transitions := ptr.Deref(l.Spec.LeaseTransitions, 0)
	if holder != el.identity {
		transitions++
		l.Spec.AcquireTime = &now
	}
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &now
	}
	l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To(el.identity), &now
	l.Spec.LeaseDurationSeconds, l.Spec.LeaseTransitions = ptr.To(el.durationSeconds()), &transitions
	el.annotate(l)
	l, err := el.writes.Update(ctx, l, metav1.UpdateOptions{})
	if err == nil {
		el.observe(l)
		return l, 0, nil
	}
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, 0, el.reread(ctx)
	}
	return nil, 0, fmt.Errorf("update lease: %w", err)
}

// annotate writes this candidate's probe IP and token on l (or removes
// a previous holder's).
func (el *elector) annotate(l *coordinationv1.Lease) {
	if !el.probeIP.IsValid() {
		delete(l.Annotations, ProbeIPAnnotation)
		delete(l.Annotations, ProbeTokenAnnotation)
		return
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[ProbeIPAnnotation] = el.probeIP.String()
	l.Annotations[ProbeTokenAnnotation] = el.probeToken
}

// probeTokenOf is the holder's probe token written on l ("": none).
func probeTokenOf(l *coordinationv1.Lease) string {
	if l == nil {
		return ""
	}
	return l.Annotations[ProbeTokenAnnotation]
}

// reread fetches the Lease after a conflict (the watch may lag).
func (el *elector) reread(ctx context.Context) error {
	l, err := el.writes.Get(ctx, el.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		el.observe(nil)
		return nil
	case err != nil:
		return fmt.Errorf("get lease: %w", err)
	}
	el.observe(l)
	return nil
}

// renew keeps the Lease held until ctx ends or a successful read shows
// another holder: errLeaseLost, the only way a term ends while running.
// Renewals that fail (API server unreachable, frozen, slow or erroring)
// are retried for as long as it takes — the holder fails static: it
// keeps its term without renewing, since no other candidate can take
// the Lease over without writing it, and a write by another holder is
// what the next successful read shows. When the API server answers
// again the renewal, conditional on the holder's last written version,
// succeeds if nobody wrote the Lease meanwhile (expired or not), and
// conflicts — then the read finds the new holder — if somebody did.
// A watch event naming another holder triggers a renewal at once (the
// watch may replay an older version: the conditional write decides).
// renew returns the last version written; the term has ended then (see
// holding).
func (el *elector) renew(ctx context.Context, l *coordinationv1.Lease, renewed time.Time) *coordinationv1.Lease {
	defer el.setRenewed(time.Time{}) // no term: nothing is fresh, no probe answered
	tick := time.NewTicker(el.retry)
	defer tick.Stop()
	failing, overdue := false, false
	for {
		select {
		case <-ctx.Done():
			return l
		case <-tick.C:
		case <-el.changed:
			if !el.observedOther() {
				continue
			}
		}
		for {
			sent := time.Now()
			rctx, cancel := context.WithTimeout(ctx, el.deadline)
			next, err := el.renewOnce(rctx, l)
			cancel()
			if ctx.Err() != nil {
				return l
			}
			if err == nil {
				fresh := el.fresh()
				el.setRenewed(sent)
				if failing {
					el.log.Info("renewed the gateway lease again", "sinceLastRenewal", sent.Sub(renewed).Round(time.Millisecond))
				}
				if !fresh && el.onRenewedAgain != nil {
					el.onRenewedAgain()
				}
				l, renewed, failing, overdue = next, sent, false, false
				break
			}
			if errors.Is(err, errLeaseLost) {
				el.log.Warn("gateway lease taken by another candidate", "holder", holderOf(next))
				return l
			}
			switch {
			case !failing:
				el.log.Warn("renew gateway lease", "err", err)
			case !overdue && time.Since(renewed) > el.deadline:
				el.log.Warn("gateway lease not renewed within the renew deadline: staying active (fail static) until another holder is seen",
					"renewDeadline", el.deadline, "err", err)
				overdue = true
			default:
				el.log.Debug("renew gateway lease", "err", err)
			}
			failing = true
			wait := el.retry / 2 // try to renew within the deadline
			if overdue {
				wait = el.retry
			}
			select {
			case <-ctx.Done():
				return l
			case <-time.After(wait):
			}
		}
	}
}

func (el *elector) setRenewed(at time.Time) {
	el.mu.Lock()
	el.renewed = at
	el.mu.Unlock()
	if !at.IsZero() && el.onRenewed != nil {
		el.onRenewed(at)
	}
}

// fresh reports whether this candidate's term is certain: its last
// successful write of the Lease was sent less than a lease duration ago
// — with candidate probes less than quiet ago, since a candidate to
// which this one looks dead may take over that early —, so no other
// candidate can have taken the Lease over since. A holder failing
// static (renewals failing) keeps its term but is no longer fresh; the
// engine then makes no API claims (see sync).
func (el *elector) fresh() bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	window := el.duration
	if el.holders != nil && el.quiet < window {
		window = el.quiet
	}
	return !el.renewed.IsZero() && time.Since(el.renewed) < window
}

// holding reports whether this candidate is in a term: from its
// acquisition until renew returns, through failing renewals (fail
// static) too. Its candidate probe responder answers only then, so an
// answer tells a passive candidate that the holder is alive and still
// acting as the active gateway.
func (el *elector) holding() bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	return !el.renewed.IsZero()
}

// answerProbe reports whether a probe carrying data is answered (this
// candidate holds the Lease) and, when data is this holder's probe
// token, notes when (a passive candidate is watching).
func (el *elector) answerProbe(data []byte) bool {
	if !el.holding() {
		return false
	}
	if el.probeToken != "" && subtle.ConstantTimeCompare(data, []byte(el.probeToken)) == 1 {
		el.probedAt.Store(time.Now().UnixNano())
	}
	return true
}

// probedWithin reports whether a probe with this holder's token came
// within d: a passive candidate is alive and watching, ready to take
// over.
func (el *elector) probedWithin(d time.Duration) bool {
	at := el.probedAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) <= d
}

// observedOther reports whether the last version seen names a holder
// other than this candidate.
func (el *elector) observedOther() bool {
	el.mu.Lock()
	defer el.mu.Unlock()
	h := holderOf(el.observed)
	return el.observed != nil && h != "" && h != el.identity
}

var errLeaseLost = errors.New("lease held by another candidate")

// renewOnce writes one renewal of l. After a conflict it re-reads the
// Lease: another holder → that version and errLeaseLost; still ours,
// released or deleted (nobody else holds it) → it takes the Lease
// again, from the version read (the term goes on). Any other failure
// is an error to retry.
func (el *elector) renewOnce(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	next := l.DeepCopy()
	next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	got, err := el.writes.Update(ctx, next, metav1.UpdateOptions{})
	if err == nil {
		el.observe(got)
		return got, nil
	}
	if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("renew lease: %w", err)
	}
	cur, gerr := el.writes.Get(ctx, el.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(gerr):
		cur = nil
	case gerr != nil:
		return nil, fmt.Errorf("renew lease: %w (re-read: %v)", err, gerr)
	}
	el.observe(cur)
	if h := holderOf(cur); h != "" && h != el.identity {
		return cur, errLeaseLost
	}
	got, _, aerr := el.tryAcquire(ctx, cur, time.Now())
	switch {
	case aerr != nil:
		return nil, fmt.Errorf("renew lease: %w (retake: %v)", err, aerr)
	case got == nil:
		return nil, fmt.Errorf("renew lease: %w (retake: written meanwhile)", err)
	}
	return got, nil
}

// release gives the Lease up (empty holder) so that another candidate
// takes over at its next watch event instead of waiting for expiry.
func (el *elector) release(ctx context.Context, l *coordinationv1.Lease) error {
	for attempt := 0; ; attempt++ {
		if l == nil || holderOf(l) != el.identity {
			return nil
		}
		next := l.DeepCopy()
		now := metav1.NewMicroTime(time.Now())
		next.Spec.HolderIdentity, next.Spec.RenewTime, next.Spec.AcquireTime = nil, &now, &now
		next.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		_, err := el.writes.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt > 0 {
			return fmt.Errorf("release lease: %w", err)
		}
		// A renewal in flight when the term ended landed first: release
		// the version it wrote (if the Lease is still ours).
		if l, err = el.writes.Get(ctx, el.name, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("release lease: re-read: %w", err)
		}
	}
}

// successor waits, until ctx ends, for another candidate to hold the
// Lease after a release, polling it every retry period; it returns that
// candidate ("" when none took it).
func (el *elector) successor(ctx context.Context) string {
	tick := time.NewTicker(el.retry)
	defer tick.Stop()
	for {
		if l, err := el.writes.Get(ctx, el.name, metav1.GetOptions{}); err == nil {
			if h := holderOf(l); h != "" && h != el.identity {
				return h
			}
		}
		select {
		case <-ctx.Done():
			return ""
		case <-tick.C:
		}
	}
}

func (el *elector) durationSeconds() int32 {
	return int32(max(1, (el.duration+time.Second-1)/time.Second))
}

// leaseDuration is the Lease's own duration (def when unset).
func leaseDuration(l *coordinationv1.Lease, def time.Duration) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return def
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}
