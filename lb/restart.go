package lb

import (
	"errors"
	"fmt"
	"io"

	"pdlb/lb/wire"

	"github.com/valyala/fasthttp"
)

// A worker that restarts comes back with empty caches: a decode without the
// prefill info that SGLang's first-request bug needs (warm.go). One that
// restarts faster than its health checks' Fall threshold is never seen as
// down (a decode stopped for 12 s fails two probes of three), so
// pdlb takes every sign of a restart for one: a failed probe, a refused
// connection, a connection dropped. The worker's epoch grows, which makes a
// decode's pairs cold, so that a request carrying disagg_prefill_dp_rank
// waits for a warm-up (warmer.ensure); and the first probe it answers after
// warms them at once, so that such a request seldom has to wait.
//
// A prefill's restart matters to its pairs only once the decodes have
// forgotten it, which takes them two failed heartbeats 5 s apart
// (SGLang's disaggregation/common/conn.py; bench/fake/heartbeat.go). The
// registry, which reads the prefill's bootstrap server every
// BootstrapRefresh, gives it a new generation when a read falls in the
// outage, and another when it is ready again, which makes its pairs cold and then warms them. A read can miss
// an outage shorter than BootstrapRefresh, so a prefill's failed probe has
// the registry read it at once, and so does each probe it answers after,
// until the read brings it back into selection. Probes, not failed
// requests, so that the reads stay one per probe interval.
//
// What is no sign: a timeout, as a slow worker is alive and keeps its
// caches (a busy SGLang answers late; a full accept queue lets a dial time
// out); pdlb's own shortages (descriptors, local ports, memory, its
// connection limit to the worker), as the worker was never asked; an answer
// pdlb refused (too large, malformed), as the worker did answer.

// callSaysRestart reports whether err, why a call to a worker failed or
// its stream broke off (call.broke), is a sign that the worker may have
// restarted: it could not be reached, or it dropped the connection before
// the answer ended.
func callSaysRestart(err error) bool {
	if noRestartSign(err) {
		return false
	}
	return wire.IsUnreachable(err) || wire.IsConnDrop(err) || errors.Is(err, wire.ErrStaleConn) || errors.Is(err, io.ErrUnexpectedEOF)
}

// probeSaysRestart reports whether err, why a health probe failed, is a
// sign that the worker may have restarted: any failure but those that say
// nothing of a restart (noRestartSign). A refused connection says the
// worker is gone; a 503 that SGLang is starting (it answers so until its
// warm-up is done). Probes pdlb lacked the resources to send are not
// reported (health.OutOfResources).
func probeSaysRestart(err error) bool {
	return !noRestartSign(err)
}

// noRestartSign reports whether err is nil or says nothing of a restart:
// a timeout, pdlb's own shortage or connection limit, or an answer too
// large for pdlb.
func noRestartSign(err error) bool {
	return err == nil || wire.IsTimeout(err) || errors.Is(err, fasthttp.ErrDialTimeout) || pdlbShortage(err) ||
		errors.Is(err, fasthttp.ErrNoFreeConns) || errors.Is(err, fasthttp.ErrBodyTooLarge)
}

// suspectRestart acts on a sign that b may have restarted: a decode's
// pairs are cold from now on, b's idle connections, which a restart has
// closed, are dropped rather than found dead by the next requests, and
// the prefixes cache_aware believes b holds are forgotten.
func suspectRestart(b *Backend) {
	b.epoch.Add(1)
	b.restarted.Store(true)
	b.hc.CloseIdleConnections()
	b.forgetPrefixes()
}

// probed is the health checks' report of each probe of b, err nil when b
// answered. The first probe b answers after a sign of a restart, once it is
// in selection, warms its cold pairs. A prefill's bootstrap server is read
// again on each sign, and on each probe answered after one until the
// prefill is back in selection: the read brings it back (its bootstrap
// server ready), and warms its pairs if its generation moved.
func (s *Server) probed(b *Backend, err error) {
	if err != nil {
		if probeSaysRestart(err) {
			suspectRestart(b)
			s.reread(b)
		}
		return
	}
	if !b.restarted.Load() {
		return
	}
	s.reread(b)
	if b.available() && b.restarted.Swap(false) && s.warm != nil {
		s.warm.rewarm(b)
	}
}

// reread has the registry read prefill b's bootstrap server at once.
func (s *Server) reread(b *Backend) {
	if b.role == rolePrefill {
		s.registry.Poke(b.index)
	}
}

// rewarm starts warming every cold pair of b whose other worker is in
// selection and whose prefill's bootstrap server is ready: at once, not at
// keepWarm's next round, and even if a warm-up failed within
// failedRetryAfter, as one would have while b was away. A pair whose
// warm-up runs is warmed again when it ends (startAfresh).
func (w *warmer) rewarm(b *Backend) {
	for _, pr := range w.pairsOf(b) {
		w.rewarmPair(pr)
	}
}

func (w *warmer) rewarmPair(pr *pair) {
	if !w.isWarm(pr) && w.s.registry.State(pr.p.index).Ready && pr.p.available() && pr.d.available() {
		w.startAfresh(pr)
	}
}

// errRestartSuspected ends an attempt whose decode call told the decode a
// prefill DP rank and found its pooled connection closed (redial).
var errRestartSuspected = errors.New("the decode closed a pooled connection, and may have restarted without the prefill's info")

// tellsPrefillRank reports whether c is the decode call of an attempt that
// tells the decode a prefill DP rank (disagg_prefill_dp_rank), and may
// still be tried again on a warmed pair (exchange.coldRetry).
func (c *call) tellsPrefillRank() bool {
	x := c.x
	return c == &x.decode && x.coldRetry && x.plan.hint
}

// Dropped is told that the pooled connection c's request went out on was
// found closed by the worker before any answer (drop): the worker has
// closed the other idle ones too (its keep-alive expired, or it
// restarted), so the resend must not take another of them. A decode call
// that tells the decode a prefill DP rank redials instead of resending.
func (c *call) Dropped(hc *fasthttp.HostClient, drop error) error {
	suspectRestart(c.backend)
	if c.tellsPrefillRank() {
		return c.redial(hc, drop)
	}
	return nil
}

// redial is what a decode call that tells the decode a prefill DP rank
// does instead of resending the request when its pooled connection was
// found closed (drop, the error): the decode may be a restarted one, whose
// pairs are cold now (suspectRestart), and which would fail the request
// with SGLang's first-request bug after its prefill did the work. It dials
// a new connection and sends nothing: a decode that cannot be reached is
// gone, and the call fails as unreachable (another decode is tried); one
// that can returns errRestartSuspected, and servePD tries again once the
// pair is warm, the new connection left in the pool for the warm-up. A
// worker whose keep-alive closed the connection, with no restart, costs
// the same warm-up, which the pair, cold now, needs anyway.
func (c *call) redial(hc *fasthttp.HostClient, drop error) error {
	if err := c.Redial(hc); err != nil {
		return err
	}
	if reason := c.Cancel.Err(); reason != nil {
		return reason // cancelled while it dialled: that is what ended it
	}
	return fmt.Errorf("%w: %w", errRestartSuspected, drop)
}
