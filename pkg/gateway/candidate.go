package gateway

import (
	"net/netip"
	"time"
)

// ProbeIPAnnotation on the gateway Lease is the node address of its
// holder, where the holder answers candidate probes (on every
// candidate's --candidate-probe-port). The holder writes it with every
// acquisition; passive candidates probe it.
const ProbeIPAnnotation = "causeway.dev/probe-ip"

// ProbeTokenAnnotation on the gateway Lease is its holder's probe
// token, random (crypto/rand.Text) and new with every process: passive candidates send it
// as their probes' data. The holder answers every probe while it holds
// the Lease, but counts a passive candidate as watching (a stop then
// tears down before it releases the Lease) only when a probe carries
// its token: what else can reach the probe port (a pod, another node)
// cannot read the Lease, so it cannot make a stopping single candidate
// throw away the state its next start would adopt.
const ProbeTokenAnnotation = "causeway.dev/probe-token"

// Candidate probe defaults: a passive candidate sends an echo to the
// Lease holder every DefaultCandidateProbeInterval and counts it dead
// after DefaultCandidateProbeMisses in a row without an answer.
const (
	DefaultCandidateProbePort     = 9535
	DefaultCandidateProbeInterval = 100 * time.Millisecond
	DefaultCandidateProbeMisses   = 5
)

// candidateQuiet is how long a passive candidate must have seen no new
// Lease version, besides the holder answering none of its last misses
// probes, before it takes an unexpired Lease over: three quarters of
// the lease duration (0.75 s by default, 7 renewal periods), at least
// the misses' own span. A holder renews every retry period and answers
// every probe, so only a holder whose process is dead, or stalled for
// that long, is silent on both; a shorter stall (CPU starvation on a
// loaded node, a long pause) keeps its term. Half a lease duration was
// not enough on a loaded 2-core machine: a holder stalled for more
// than 0.5 s was replaced without any fault.
func candidateQuiet(lease time.Duration, misses int, interval time.Duration) time.Duration {
	return max(lease*3/4, time.Duration(misses)*interval)
}

// holderProbe tells a passive candidate whether the Lease holder still
// answers it directly: a UDP echo prober (the tunnel health checks'
// prober, over the node network) aimed at the holder's probe IP, and a
// holder counted down after misses unanswered echoes in a row. A
// candidate answers only while it holds its term (elector.holding). It
// decides nothing by itself: the elector takes a Lease over early only
// when the holder is down AND no new Lease version has come for as long,
// and leaves an expired Lease to a holder that answers (see
// elector.tryAcquire); the active candidate never looks at it.
type holderProbe struct {
	p      candidateProber // target: holder identity → its probe IP
	misses int
	// silence is how long no answer at all, late ones included, must
	// have come besides misses lost echoes in a row: the misses' span.
	silence time.Duration
	// onDown is called whenever an echo to a down holder is lost (the
	// elector looks again).
	onDown func()
}

// candidateProber is the prober of a holderProbe: its echoes carry the
// holder's probe token.
type candidateProber interface {
	prober
	SetPayload(data []byte)
}

// watch aims the probes at holder's addr with its token (an invalid
// addr or empty holder: probe nobody).
func (h *holderProbe) watch(holder string, addr netip.Addr, token string) {
	targets := map[string]netip.Addr{}
	if holder != "" && addr.IsValid() {
		targets[holder] = addr
	}
	h.p.SetPayload([]byte(token))
	h.p.SetTargets(targets)
}

// down reports whether holder left its last misses probes unanswered
// and sent no answer at all, not even a late one to an echo already
// counted as lost, for silence: a holder whose answers come late (a
// loaded node) is slow, not down.
func (h *holderProbe) down(holder string) bool {
	s := h.p.Stats()[holder]
	return s.LostInARow >= h.misses && time.Since(s.LastReply) >= h.silence
}

// gone reports whether holder's kernel refused a probe since its last
// answer: nothing listens on its probe port, its process is gone (a
// live holder, stalled or not, keeps the port open).
func (h *holderProbe) gone(holder string) bool {
	return h.p.Stats()[holder].Refused
}

// answering reports whether holder answered at least one of its last
// misses probes, or any probe (late too) within silence, and refused
// none since (a holder never answered, or not probed — no probe IP on
// the Lease —, is not answering).
func (h *holderProbe) answering(holder string) bool {
	s, ok := h.p.Stats()[holder]
	return ok && !s.LastReply.IsZero() && !s.Refused && (s.LostInARow < h.misses || time.Since(s.LastReply) < h.silence)
}

// result is the prober's report of one echo.
func (h *holderProbe) result(target string, rtt time.Duration) {
	if rtt < 0 && h.onDown != nil && (h.down(target) || h.gone(target)) {
		h.onDown()
	}
}
