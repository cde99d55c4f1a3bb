package controller

import (
	"sync"
	"time"
)

// LivenessLeaseName is the Lease each cluster's MCS controller renews in
// its broker namespace.
const LivenessLeaseName = "causeway-liveness"

// liveness decides which member clusters are dead from the changes of
// their liveness Leases, as observed here: a Lease that has not changed
// (resourceVersion) for duration+deadAfter of the local clock marks its
// cluster dead. Observing changes locally, rather than comparing the
// remote renewTime with the local clock, makes the decision immune to
// clock skew between clusters.
//
// While this cluster cannot renew its own Lease, or does not see its own
// renewals come back through the watch, the broker (or the way to it) is
// the problem, not the other clusters: nobody is declared dead then, so a
// broker outage never withdraws endpoints. Nor does its end: the time
// this cluster was blind does not count against the others, whose
// Leases get the whole duration+deadAfter from the moment it sees again
// to change (their controllers come back from the outage later than
// this one, after their own retries).
//
// A cluster never seen is alive: records are written only after the
// Lease, and this avoids withdrawing everything while the caches fill.
type liveness struct {
	own       string
	duration  time.Duration
	deadAfter time.Duration
	now       func() time.Time

	mu        sync.Mutex
	seen      map[string]observation
	dead      map[string]bool
	lastRenew time.Time
	// healthySince is when this cluster last became healthy (renewing
	// and seeing its renewals); zero while it is not.
	healthySince time.Time
}

type observation struct {
	version   string
	changedAt time.Time
}

func newLiveness(own string, duration, deadAfter time.Duration, now func() time.Time) *liveness {
	return &liveness{own: own, duration: duration, deadAfter: deadAfter, now: now,
		seen: map[string]observation{}, dead: map[string]bool{}}
}

// observe records the current resourceVersion of a cluster's Lease.
func (l *liveness) observe(cluster, version string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.seen[cluster]; ok && o.version == version {
		return
	}
	l.seen[cluster] = observation{version: version, changedAt: l.now()}
}

// forget records that a cluster's Lease was deleted: it stops changing,
// so the cluster times out like one that stopped renewing.
func (l *liveness) forget(cluster string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if o, ok := l.seen[cluster]; ok {
		o.version = ""
		l.seen[cluster] = o
	}
}

// renewed records a successful renewal of the own Lease.
func (l *liveness) renewed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastRenew = l.now()
}

// alive tells whether a cluster's endpoints should be served.
func (l *liveness) alive(cluster string) bool {
	if cluster == l.own {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.dead[cluster]
}

// check re-evaluates every cluster and returns those whose state changed,
// and the number of clusters alive and dead.
func (l *liveness) check() (changed []string, alive, dead int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	limit := l.duration + l.deadAfter
	own, ok := l.seen[l.own]
	healthy := !l.lastRenew.IsZero() && now.Sub(l.lastRenew) < l.duration &&
		ok && now.Sub(own.changedAt) < limit
	switch {
	case !healthy:
		l.healthySince = time.Time{}
	case l.healthySince.IsZero():
		l.healthySince = now
	}
	for c, o := range l.seen {
		if c == l.own {
			continue
		}
		isDead := l.dead[c]
		if healthy {
			isDead = now.Sub(later(o.changedAt, l.healthySince)) > limit
		}
		if isDead != l.dead[c] {
			changed = append(changed, c)
			if isDead {
				l.dead[c] = true
			} else {
				delete(l.dead, c)
			}
		}
		if isDead {
			dead++
		} else {
			alive++
		}
	}
	return changed, alive + 1, dead
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
