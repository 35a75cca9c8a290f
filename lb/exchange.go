package lb

import (
	"net"
	"sync/atomic"
	"time"

	"pdlb/lb/wire"

	"github.com/valyala/fasthttp"
)

// exchange is one attempt at answering a request: the bodies sent and the
// calls that send them. A PD exchange has two calls; a single one (to a
// fallback worker, or a decode prefilling locally) uses the decode call
// alone. Exchanges are pooled, and counted (refs) by who holds one, each
// letting go of its own reference in one place:
//   - the handler, from newExchange until serve returns: servePD and
//     serveDecodeOnly let go right after it, whatever the outcome;
//   - each call it runs, until the call ends (call.end);
//   - a writer that answers after the handler has returned, the stream
//     relay or a large answer's answerBody, from when it is set as the
//     response's body (hold) until fasthttp closes it (CloseWithError).
//
// The last to let go returns the exchange to the pool (unref), so neither
// call waits for the other once the client has its answer.
type exchange struct {
	s         *Server
	rt        *route
	start     time.Time
	refs      atomic.Int32
	requestID []byte
	// rid is the raw value of the request's "rid", as the workers read it
	// (bootstrap.Request.RID): empty without one, or when longer than
	// maxKeptRID.
	rid string
	// slot is x's place in Server.flight, -1 when it is not there; guarded
	// by Server.flightMu. finished is set once the client has its answer
	// (finish), by the request side.
	slot     int
	finished bool
	// client is the client's connection, which a shutdown closes when the
	// answer is still not written once its grace has passed (dropClients).
	client net.Conn

	// held is the body memory taken for body and prefillBody (rewriteSize),
	// given back when the exchange is released.
	held int
	// body is the client body with the bootstrap fields spliced in, as the
	// decode gets it; prefillBody is the prefill's when a DP-rank plan makes
	// it differ, else empty. The calls send them with SetBodyRaw, so they
	// must stay untouched until both calls have finished: the reference
	// count guarantees that.
	body        []byte
	prefillBody []byte
	rooms       []uint64
	// plan is the request's prefill DP-rank placement.
	plan dpPlan
	// coldRetry allows one more attempt when the decode says it has not
	// cached the prefill's info (see warm.go); rankRetry, when a worker
	// refuses its DP rank (see servePD); mayRetry, when a worker cannot be
	// reached.
	coldRetry bool
	rankRetry bool
	mayRetry  bool
	// abortedByClient is set by a POST /abort_request naming the request's
	// rid (or abort_all): the workers' aborted answers are then the
	// client's wish, not failures to try again (markAborted).
	abortedByClient atomic.Bool
	// single marks an exchange with one call, the decode leg: to a fallback
	// worker, or to a decode that prefills locally (local).
	single bool
	local  bool
	// batch marks a /generate batch (isBatch).
	batch bool
	// permit is the request's admission slot, released by finish.
	permit bool
	// merge is set when the client asked for logprobs (or routed experts)
	// that only the prefill computes, and the answers must be merged.
	merge bool
	// prefillWaited records that the request side has taken the prefill
	// call's done signal (see waitPrefill).
	prefillWaited bool
	// decodeStreams is set once the decode's stream is relayed: a prefill
	// failing after that does not cancel it (see serveStream).
	decodeStreams atomic.Bool

	prefill call
	decode  call
	// runPrefill is prefill.run, bound once: "go x.prefill.run()" would
	// allocate a closure for each request.
	runPrefill func()
	relay      relay
	// watcher watches the client of a non-stream request that waits long.
	watcher wire.Watcher
	// scratch holds a merged answer, scratchHeld the body memory taken
	// for it.
	scratch     []byte
	scratchHeld int
	// answer writes a large non-stream answer, so that the request is
	// accounted once it is out (answerBody).
	answer answerBody
}

func newExchange(s *Server) *exchange {
	x := &exchange{s: s, slot: -1}
	x.prefill = call{x: x, peer: &x.decode}
	x.decode = call{x: x, peer: &x.prefill}
	for _, c := range []*call{&x.prefill, &x.decode} {
		c.done = make(chan struct{}, 1)
	}
	x.runPrefill = x.prefill.run
	x.relay.x = x
	x.answer.x = x
	x.watcher.Init(x.clientLeft, s.cfg.Now)
	return x
}

// newExchange starts an exchange for q held by refs parties, the handler
// and its calls: 3 for a PD pair, 2 for a single worker.
func (s *Server) newExchange(q *clientRequest, refs int32) *exchange {
	x := s.acquireExchange()
	s.live.Add(1)
	x.refs.Store(refs)
	x.single = refs == 2
	x.rt, x.start, x.permit = q.rt, q.start, q.permit
	x.requestID = append(x.requestID[:0], q.id...)
	x.rid = ""
	if raw := q.info.RID.Of(q.body); len(raw) > 0 && len(raw) <= maxKeptRID {
		x.rid = string(raw)
	}
	return x
}

func (s *Server) acquireExchange() *exchange {
	if v := s.exchanges.Get(); v != nil {
		return v.(*exchange)
	}
	return newExchange(s)
}

// hold takes a reference for a writer that answers once the handler has
// returned; its CloseWithError lets go of it.
func (x *exchange) hold() {
	x.refs.Add(1)
}

// unref drops one holder; the last one resets x and returns it to the pool.
func (x *exchange) unref() {
	if x.refs.Add(-1) > 0 {
		return
	}
	if !x.finished { // an attempt given up for another
		x.s.untrack(x)
	}
	x.finished, x.client = false, nil
	for _, c := range []*call{&x.prefill, &x.decode} {
		c.releaseRequest()
		c.body = nil
		c.Leg.Reset()
		c.resp.Reset()
		c.answer.release(x.s.memory)
		c.err = nil
		c.broke, c.again, c.endedEarly, c.early = nil, false, false, earlyEnd{}
		drain(c.done)
	}
	x.relay.reset()
	x.prefillWaited = false
	x.decodeStreams.Store(false)
	x.single, x.local, x.merge, x.permit, x.batch = false, false, false, false, false
	x.coldRetry, x.rankRetry, x.mayRetry = false, false, false // a decode-only exchange sets only mayRetry
	x.abortedByClient.Store(false)
	x.requestID = x.requestID[:0]
	x.s.memory.give(x.held + x.scratchHeld)
	x.held, x.scratchHeld = 0, 0
	// A rare huge request must not pin its buffers in the pool.
	if cap(x.body) > maxPooledBuffer {
		x.body = nil
	}
	if cap(x.prefillBody) > maxPooledBuffer {
		x.prefillBody = nil
	}
	if cap(x.scratch) > maxPooledBuffer {
		x.scratch = nil
	}
	x.s.exchanges.Put(x)
	x.s.live.Add(-1)
}

// leave ends the exchange of a client that went away: nobody is left to
// answer (499 is nginx's word for it), and its connection is closed with
// nothing written (dropClient).
func (x *exchange) leave(ctx *fasthttp.RequestCtx) outcome {
	dropClient(ctx)
	x.finish(statusClientGone)
	return outcome{}
}

// maxPooledBuffer is the largest buffer a pooled exchange keeps.
const maxPooledBuffer = 1 << 20

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// cutShort cancels both calls: pdlb is shutting down (Server.cutInflight).
// The decode goes first, so that its failure names the shutdown rather than
// its cancelled prefill.
func (x *exchange) cutShort() {
	x.decode.abort(errShutdown)
	x.prefill.abort(errShutdown)
}

// clientLeft aborts both calls of x: nobody is left to read their answers.
func (x *exchange) clientLeft() {
	x.s.errorsByReason[reasonClientGone].Inc()
	x.decode.abort(errClientGone)
	x.prefill.abort(errClientGone)
}
