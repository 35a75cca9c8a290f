package lb

import (
	"bytes"
	"errors"

	"pdlb/lb/wire"

	"github.com/valyala/fasthttp"
)

// An attempt that fails before anything has reached the client may be made
// again, on a warmed pair or other workers: decide says whether from how it
// failed, and servePD (request.go) or serveDecodeOnly (fallback.go) acts on
// what it returns.

// outcome is how an exchange ended: answered, or to be tried again.
type outcome struct {
	retry retryKind
	// backend is the worker that failed, and why; peer, when set, a worker
	// the failure also points at (see pairFailed).
	backend, peer *Backend
	why           string
}

type retryKind int

const (
	answered retryKind = iota
	// retryCold: the decode had not cached the prefill's info.
	retryCold
	// retryUnreachable: a worker could not be reached; try another.
	retryUnreachable
	// retryFailed: a worker failed before anything reached the client
	// (5xx, reset); try a fresh pair.
	retryFailed
	// retryRefusedNoRoom: a decode refused a local-prefill request.
	retryRefusedNoRoom
	// retryStaleRank: a worker refused its DP rank as out of range.
	retryStaleRank
)

// failure is what the request side saw of an attempt that failed with
// nothing written to the client, which decide reads it by.
type failure int

const (
	// decodeAnswered: the decode's call is over, with its answer (an
	// error status) or its call's error.
	decodeAnswered failure = iota
	// callFailed: a call failed, or the decode's stream broke, and only
	// the failure itself is read, not the decode's status.
	callFailed
	// failureEvent: the decode's 200 stream began with a failure event
	// (isFailureEvent).
	failureEvent
)

// decide is the one place that says whether an attempt that failed (f),
// nothing having reached the client, is made again, and how: on a warmed
// pair (a cold decode), after a DP-rank recheck (a stale rank), elsewhere
// (a worker unreachable or failed, a refused local prefill), or not at all
// (answered: the caller answers with the failure). body is what the decode
// sent, its error answer or its first event, when it sent one.
func (x *exchange) decide(f failure, body []byte) outcome {
	switch f {
	case decodeAnswered:
		if x.decode.err == nil {
			if out := x.decodeRefused(x.decode.resp.StatusCode(), body); out.retry != answered {
				return out
			}
		}
	case failureEvent:
		if bytes.Contains(body, noRoomMarker) {
			return x.decodeRefused(fasthttp.StatusBadRequest, body)
		}
		if out := x.decodeRefused(fasthttp.StatusInternalServerError, body); out.retry != answered {
			return out
		}
		return x.failedEvent(body)
	}
	return x.failedCall(body)
}

// decodeRefused is decide's step for a decode's error answer (status,
// body) that another attempt may fix: a cold pair, or a decode without
// local prefill.
func (x *exchange) decodeRefused(status int, body []byte) outcome {
	switch {
	case x.abortedByClient.Load():
		return outcome{}
	case status >= fasthttp.StatusInternalServerError && x.coldPair(body):
		return outcome{retry: retryCold}
	case status == fasthttp.StatusBadRequest && x.local && x.mayRetry && bytes.Contains(body, noRoomMarker):
		return outcome{retry: retryRefusedNoRoom, backend: x.decode.backend}
	}
	return outcome{}
}

// failedCall is decide's step for a failure that another attempt may fix:
// a worker that could not be reached, a transport failure, a 5xx, or a
// worker that refused a DP rank pdlb thought it had. Any other 4xx is the
// client's and is never retried; nor is a timeout, which has used up the
// request's time. decodeBody is the decode's answer, if it gave one.
func (x *exchange) failedCall(decodeBody []byte) outcome {
	c := x.culprit()
	if x.abortedByClient.Load() {
		return outcome{} // the abort's answer is the client's
	}
	if errors.Is(c.err, errRestartSuspected) {
		return outcome{retry: retryCold} // never sent: see redial
	}
	if x.rankRetry && x.refusedRank(c) {
		return outcome{retry: retryStaleRank, backend: c.backend}
	}
	if !x.mayRetry {
		return outcome{}
	}
	var kind retryKind
	switch {
	case pdlbShortage(c.err):
		// pdlb's own shortage, which another worker would meet too: the
		// client is told at once (classify), its worker not blamed.
		return outcome{}
	case c.err != nil && wire.IsUnreachable(c.err):
		kind = retryUnreachable
	case c.err != nil && retriable(c.err):
		kind = retryFailed
	case c.err == nil && c.resp.StatusCode() >= fasthttp.StatusInternalServerError:
		kind = retryFailed
	case c == &x.prefill && errors.Is(c.broke, errFailureIn200):
		kind = retryFailed
	default:
		return outcome{}
	}
	if !x.s.canServeAgain(c.backend) {
		// Its failure may have taken the last worker out (its breaker):
		// the client is better told what failed than that nothing is
		// left.
		return outcome{}
	}
	_, _, why := c.describe()
	out := outcome{retry: kind, backend: c.backend, why: why}
	if c == &x.decode && c.err == nil {
		out.peer = x.pairFailed(decodeBody)
	}
	return out
}

// failedEvent is decide's step for a stream whose first event, first, is
// a failure that is neither a cold pair nor a refused room.
func (x *exchange) failedEvent(first []byte) outcome {
	if !x.mayRetry || x.abortedByClient.Load() {
		return outcome{}
	}
	d := x.decode.backend
	return outcome{retry: retryFailed, backend: d, peer: x.pairFailed(first),
		why: d.role + " backend " + d.addr + " streamed an error before any token"}
}

// coldPair reports whether the decode's failure says it has not cached the
// prefill's parallel info (the first-request bug: see package bootstrap's
// documentation) while one more attempt is allowed.
func (x *exchange) coldPair(failure []byte) bool {
	return x.coldRetry && bytes.Contains(failure, coldPairMarker)
}

// canServeAgain reports whether a request that failed on b has somewhere
// to go next: a worker of b's pool in selection (b itself included), or,
// for a PD request, a fallback worker.
func (s *Server) canServeAgain(b *Backend) bool {
	pool := s.decodes
	switch b.role {
	case rolePrefill:
		pool = s.prefills
	case roleFallback:
		pool = s.fallbacks
	}
	return pool.anyAvailable() || (b.role != roleFallback && s.fallbacks.anyAvailable())
}

// rankRangeMarker is in SGLang's refusal of a routed_dp_rank the worker
// does not have: "routed_dp_rank=R out of range [0, D)" (SGLang's
// tokenizer_manager.py).
var rankRangeMarker = []byte("_dp_rank=")

// refusedRank reports whether c's worker refused the request's DP rank.
func (x *exchange) refusedRank(c *call) bool {
	body := c.resp.Body()
	return c.err == nil && c.resp.StatusCode() == fasthttp.StatusBadRequest &&
		bytes.Contains(body, rankRangeMarker) && bytes.Contains(body, []byte(" out of range [0, "))
}

// kvTransferMarker is in the error of a decode whose KV transfer failed:
// "Decode transfer failed … KVTransferError(…): Lost connection with
// prefill instance …", "Decode handshake failed … KVTransferError(…)".
var kvTransferMarker = []byte("KVTransferError")

// pairFailed returns the prefill of x when the decode's failure is a
// failed KV transfer: the pair failed, most likely the prefill (it died, or
// the decode cannot reach it), and the next attempt must avoid both. It
// returns nil for any other failure.
func (x *exchange) pairFailed(failure []byte) *Backend {
	if x.single || !bytes.Contains(failure, kvTransferMarker) {
		return nil
	}
	return x.prefill.backend
}

// retriable reports whether a call's own transport error may not recur on
// another attempt.
func retriable(err error) bool {
	var peer *errPeerFailed
	return !errors.Is(err, fasthttp.ErrTimeout) && !errors.Is(err, errClientGone) && !isCut(err) &&
		!errors.As(err, &peer) && !errors.Is(err, fasthttp.ErrBodyTooLarge)
}
