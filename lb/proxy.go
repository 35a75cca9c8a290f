package lb

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// exchange is one attempt at answering a request: the bodies sent and the
// calls that send them. A PD exchange has two calls; a single one (to a
// fallback worker, or a decode prefilling locally) uses the decode call
// alone. Exchanges are pooled. The request side (handler, then the stream
// relay) and each call hold one; the last to let go returns it to the pool,
// so neither call waits for the other once the client has its answer.
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
	watcher watcher
	// scratch holds a merged answer, scratchHeld the body memory taken
	// for it.
	scratch     []byte
	scratchHeld int
	// answer writes a large non-stream answer, so that the request is
	// accounted once it is out (answerBody).
	answer answerBody
}

// call is one leg of an exchange: a request to one backend. Its peer is the
// other leg; a call that fails cancels its peer at once.
type call struct {
	x       *exchange
	peer    *call
	backend *Backend
	// req is taken from fasthttp's pool for the call and given back as
	// soon as the call's Do returns, so a stream holds only its responses
	// (an exchange with both requests inside took 4 KiB, without 2 KiB).
	// body is what req sends, kept for abort.
	req  *fasthttp.Request
	body []byte
	resp fasthttp.Response
	// answer holds the body of resp, read whole (readAnswer), or of a
	// streamed answer that is not an event stream (respondBufferedStream).
	answer bodyBuffer
	cancel canceller
	// deadline bounds the whole call, body included; firstByteBy, when
	// set, bounds the wait for a stream's first byte.
	deadline    time.Time
	firstByteBy time.Time
	// stream hands the response body to the relay instead of buffering it;
	// broke is set by the relay to why that body broke off, if it did; on
	// a prefill, to errFailureIn200 if its 200 answer holds a failure.
	stream bool
	broke  error
	err    error
	// again is set when the worker already failed this client request on
	// an earlier attempt: failing it again is no news for the worker's
	// breaker, which counts failed requests, not attempts.
	again bool
	// endedEarly is set on a prefill whose 200 answer says the request
	// ended without handing its KV cache over (an abort, an error event):
	// its decode would wait for that cache until its own timeout. early
	// says how. broke is set too when it is the prefill's failure rather
	// than the request's (errFailureIn200).
	endedEarly bool
	early      earlyEnd
	// respBody is a streamed answer's body, once its headers are in: the
	// chunked one decoded by chunked (its usual form), else fasthttp's.
	respBody io.Reader
	chunked  chunkedBody

	// releaseBody, set while a streamed body is being consumed, gives the
	// call's connection back (see endStream). done gets a value when the
	// call has finished.
	releaseBody func(clean bool)
	done        chan struct{}
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
	x.watcher.init(x.clientLeft, s.cfg.Now)
	return x
}

func (s *Server) acquireExchange() *exchange {
	if v := s.exchanges.Get(); v != nil {
		return v.(*exchange)
	}
	return newExchange(s)
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
		c.body, c.respBody = nil, nil
		c.chunked = chunkedBody{}
		c.resp.Reset()
		c.answer.release(x.s.memory)
		c.cancel.reset()
		c.err = nil
		c.stream, c.broke, c.again, c.endedEarly, c.early = false, nil, false, false, earlyEnd{}
		c.firstByteBy = time.Time{}
		if c.releaseBody != nil {
			panic("BUG: an exchange was released with a stream still open")
		}
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
	x.unref()
	return outcome{}
}

// orphanPrefillGrace is how long a prefill may still take once its decode
// has finished.
const orphanPrefillGrace = 2 * time.Second

// maxPooledBuffer is the largest buffer a pooled exchange keeps.
const maxPooledBuffer = 1 << 20

func drain(ch chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// newExchange starts an exchange for q held by refs parties: 3 for a PD
// pair, 2 for a single worker.
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

// serve runs the exchange, streamed or not.
func (x *exchange) serve(q *clientRequest) outcome {
	x.client = q.ctx.Conn()
	x.s.track(x)
	x.batch = isBatch(q.rt, q.info)
	if q.info.Stream {
		x.relay.mergeLogprobs = q.info.ReturnLogprob && !x.single
		if x.batch {
			x.relay.items = q.info.Batch
		}
		return x.serveStream(q.ctx)
	}
	return x.serveBuffered(q.ctx)
}

// isBatch reports whether info, sent on rt, is a batch: a list-valued text
// or input_ids makes one on /generate only.
func isBatch(rt *route, info bootstrap.Request) bool {
	return rt.batch && info.Batch >= 0
}

// inject draws the rooms and splices the bootstrap fields, and the DP-rank
// fields of x.plan, into the bodies.
func (x *exchange) inject(body []byte, info bootstrap.Request, p *Backend) {
	batch := isBatch(x.rt, info)
	n := 1
	if batch {
		n = info.Batch
	}
	x.rooms = x.plan.rooms(x.rooms, n, x.s.newRoom)
	f := bootstrap.Fields{
		Host:  p.bootstrapHost,
		Port:  x.s.bootstrapPort(p),
		Rooms: x.rooms,
		Batch: batch,
	}
	x.prefillBody = x.prefillBody[:0]
	if x.plan.hint {
		f.PrefillDPRank = bootstrap.DPRank{Set: true, Rank: x.plan.rank}
		x.body = mustAppend(x.body[:0], body, f)
		f.RoutedDPRank = f.PrefillDPRank
		x.prefillBody = mustAppend(x.prefillBody, body, f)
		return
	}
	x.body = mustAppend(x.body[:0], body, f)
}

// mustAppend is bootstrap.Append on a body Parse has accepted, which Append
// must accept too.
func mustAppend(dst, body []byte, f bootstrap.Fields) []byte {
	out, err := bootstrap.Append(dst, body, f)
	if err != nil {
		panic("BUG: cannot inject bootstrap fields into a parsed body: " + err.Error())
	}
	return out
}

// prefillSends is the body the prefill call sends.
func (x *exchange) prefillSends() []byte {
	if len(x.prefillBody) > 0 {
		return x.prefillBody
	}
	return x.body
}

// prepare builds the call's request from the client's: same URI and
// headers (minus those not forwarded), the given body and the request ID.
func (c *call) prepare(ctx *fasthttp.RequestCtx, b *Backend, body []byte, deadline time.Time, requestID []byte) {
	req := c.request()
	ctx.Request.Header.CopyTo(&req.Header)
	stripUnforwarded(&req.Header)
	c.target(b, ctx.Request.RequestURI(), body, deadline, requestID)
}

// target points the call at b: a POST of body to uri, by deadline.
func (c *call) target(b *Backend, uri, body []byte, deadline time.Time, requestID []byte) {
	c.backend = b
	c.deadline = deadline
	c.body = body
	req := c.request()
	req.Header.SetMethod(fasthttp.MethodPost)
	b.setURI(req, uri)
	req.Header.SetContentTypeBytes(contentTypeJSON)
	req.Header.SetBytesKV(headerRequestID, requestID)
	req.Header.SetHost(b.addr)
	b.authorize(&req.Header)
	req.SetBodyRaw(body)
	req.SetUserValue(callKey{}, c)
}

// request returns the call's request, taken from the pool if it has none.
func (c *call) request() *fasthttp.Request {
	if c.req == nil {
		c.req = fasthttp.AcquireRequest()
	}
	return c.req
}

func (c *call) releaseRequest() {
	if c.req != nil {
		fasthttp.ReleaseRequest(c.req)
		c.req = nil
	}
}

var contentTypeJSON = []byte("application/json")

// run performs the call. A streamed answer returns once its headers are in,
// the call going on until its consumer calls endStream; any other call is
// over when run returns.
func (c *call) run() {
	b := c.backend
	b.inflight.Add(1)
	b.requests.Inc()
	c.err = b.hc.Do(c.req, &c.resp)
	c.releaseRequest()
	if c.releaseBody == nil {
		c.end()
	}
}

// endStream gives the connection of a streamed answer back, reusable when
// clean (the body was read to its end), and ends the call.
func (c *call) endStream(clean bool) {
	c.releaseBody(clean)
	c.releaseBody = nil
	c.end()
}

// end accounts the finished call and, if it failed, cancels its peer: a
// prefill that failed will never send the KV cache the decode waits for,
// and a decode that failed will never claim the KV cache the prefill holds.
// A decode whose stream is relayed has the cache already (or has failed
// on its own), and is left be.
func (c *call) end() {
	b := c.backend
	c.cancel.end()
	b.inflight.Add(-1)
	if c.err == nil && b.authorization != nil && c.resp.StatusCode() == fasthttp.StatusUnauthorized {
		// pdlb's own key was refused: a configuration error, which the
		// client, whose key pdlb checked, must not take for its own.
		c.err = errKeyRefused
	}
	if c == &c.x.prefill {
		c.x.plan.release()
		if c.err == nil {
			if c.early, c.endedEarly = endedEarly(&c.resp); c.endedEarly && c.early.prefillFailed() {
				c.broke = errFailureIn200 // another prefill may serve the request
			}
		}
	} else if !c.x.single {
		// The prefill answers once its KV cache is sent, before the decode
		// ends; one still silent well after is stuck (waiting for a decode
		// that never claimed the cache): give it a short last deadline.
		c.peer.cancel.capRead(orphanPrefillGrace)
	}
	// A refused key is pdlb's fault, not the worker's, and so is a call
	// pdlb lacked the descriptors or memory for (issue 19), or one it did
	// not resend for fear of a restart (redial); an abort a client asked
	// for (/abort_request), which SGLang answers as a failed KV transfer,
	// is the client's.
	own := c.cancel.err() == nil && !c.x.abortedByClient.Load() && (c.err == nil || !notTheWorkers(c.err))
	switch status := c.resp.StatusCode(); {
	case c.err == nil && status < fasthttp.StatusInternalServerError && c.broke == nil:
		b.succeeded() // a 4xx too: the worker works, the request was wrong
	case own && c.err != nil:
		b.errors.Inc()
		if !c.again {
			b.failed(c.err, 0)
		}
	case own:
		b.errors.Inc()
		if !c.again {
			b.failed(c.broke, status)
		}
	}
	if c.err != nil || c.resp.StatusCode() >= fasthttp.StatusBadRequest || c.broke != nil || c.endedEarly {
		if own && (callSaysRestart(c.err) || callSaysRestart(c.broke)) {
			// Unreachable or dropping connections, before the answer or
			// in the middle of its stream: the worker may be restarting,
			// and come back with empty caches.
			suspectRestart(b)
		}
		if c != &c.x.prefill || !c.x.decodeStreams.Load() {
			c.peer.abort(&errPeerFailed{role: b.role, addr: b.addr})
		}
	}
	c.done <- struct{}{}
	c.x.unref()
}

// notTheWorkers reports whether err, why a call failed, is pdlb's doing
// rather than its worker's failure (see call.end).
func notTheWorkers(err error) bool {
	return errors.Is(err, errGaveUp) || errors.Is(err, errKeyRefused) || pdlbShortage(err) ||
		errors.Is(err, errRestartSuspected)
}

// abort cancels the call, and when the worker may have started on it and the
// client named the request (a "rid" in its body), also asks the worker to
// abort it (POST /abort_request), freeing what it holds for the request
// (a KV cache waiting for its peer) at once rather than at its own timeout:
// one call, whatever the batch (abortRID), within the worker's abortGate.
// The caller must hold a reference to the exchange.
func (c *call) abort(reason error) {
	if !c.cancel.cancel(reason) {
		return
	}
	if errors.Is(reason, errShutdown) {
		// The workers see the connection closed, and abort the request
		// themselves; and cutInflight, which cuts it, holds the flight
		// lock that abortsOne takes.
		return
	}
	if rid, ok := abortRID(c.x.rid); ok && c.x.s.abortsOne(rid) {
		c.x.s.abortRequest(c.backend, rid)
	}
}

// maxKeptRID bounds the rid value an exchange keeps: a batch's list of
// --max-batch-size rids fits. A longer one, which no client needs, is not
// kept: pdlb then sends no abort for the request, and an /abort_request
// naming it, which still reaches the workers, does not stop pdlb's retries.
const maxKeptRID = 64 << 10

// eachRID calls f with the rid of raw, a request's rid value as the
// workers read it (exchange.rid), or each of a batch's list, until f
// returns false.
func eachRID(raw string, f func(rid string) bool) {
	switch rid := gjson.Parse(raw); {
	case rid.Type == gjson.String:
		f(rid.Str)
	case rid.IsArray():
		rid.ForEach(func(_, item gjson.Result) bool {
			return item.Type != gjson.String || f(item.Str)
		})
	}
}

// cutShort cancels both calls: pdlb is shutting down (Server.cutInflight).
// The decode goes first, so that its failure names the shutdown rather than
// its cancelled prefill.
func (x *exchange) cutShort() {
	x.decode.abort(errShutdown)
	x.prefill.abort(errShutdown)
}

// cause is what ended c's answer early: err, unless pdlb cut the call at
// shutdown, which closed its connection under the read that failed.
func (c *call) cause(err error) error {
	if reason := c.cancel.err(); errors.Is(reason, errShutdown) {
		return reason
	}
	return err
}

// clientGone reports whether the exchange's calls were cancelled because
// its client went away.
func (x *exchange) clientGone() bool {
	return errors.Is(x.decode.cancel.err(), errClientGone)
}

// serveBuffered answers a non-stream request: the decode call runs on the
// handler's goroutine, the prefill call beside it. Unless it answered, it
// has written nothing and says why the request should be tried again.
func (x *exchange) serveBuffered(ctx *fasthttp.RequestCtx) outcome {
	if !x.single {
		go x.runPrefill()
	}
	x.watcher.arm(ctx.Conn(), x.start)
	x.decode.run()
	x.watcher.disarm()
	<-x.decode.done
	d := &x.decode
	if x.clientGone() {
		return x.leave(ctx)
	}
	if d.err != nil || d.resp.StatusCode() >= fasthttp.StatusBadRequest {
		// The decode's failure has cancelled the prefill already.
		if out := x.retryAfter(d.resp.Body()); out.retry != answered {
			x.unref()
			return out
		}
	}
	if x.merge {
		x.waitPrefill()
	}
	x.respond(ctx)
	return outcome{}
}

// respond writes the decode's answer, or the error that explains why there
// is none, then accounts the request and lets go of x: at once, or for a
// large answer once it is written (answerBody).
func (x *exchange) respond(ctx *fasthttp.RequestCtx) {
	if !x.writeAnswer(ctx) {
		x.finish(ctx.Response.StatusCode())
		x.unref()
	}
}

// writeAnswer is respond's writing. It reports whether the answer's body
// accounts the request and lets go of x once it is written.
func (x *exchange) writeAnswer(ctx *fasthttp.RequestCtx) (deferred bool) {
	d := &x.decode
	if d.err == nil && d.resp.StatusCode() == fasthttp.StatusBadRequest && bytes.Contains(d.resp.Body(), noRoomMarker) {
		if x.local {
			x.s.localPrefillUnsupported(d.backend)
		}
		x.refuseNoRoom(ctx)
		return false
	}
	if d.err == nil {
		body, ok := x.mergedBody(ctx)
		if !ok {
			return false
		}
		if d.resp.StatusCode() >= fasthttp.StatusInternalServerError {
			x.passOn(d)
		}
		ctx.SetStatusCode(d.resp.StatusCode())
		ctx.Response.Header.SetContentTypeBytes(d.resp.Header.ContentType())
		if len(body) > largeAnswer {
			x.answer.Reset(body)
			x.answer.status = d.resp.StatusCode()
			ctx.Response.SetBodyStream(&x.answer, len(body))
			return true
		}
		ctx.SetBody(body)
		return false
	}
	x.respondFailed(ctx, x.culprit())
	return false
}

// mergedBody returns the decode's answer, with the prefill's logprobs
// merged in when the client asked for them (x.merge), as mini_lb merges
// them: not when the prefill failed. It returns false when pdlb could not
// merge them for want of its own memory, having answered with why: the
// client asked for logprobs, and an answer without them would say nothing
// of it.
func (x *exchange) mergedBody(ctx *fasthttp.RequestCtx) ([]byte, bool) {
	d, p := &x.decode, &x.prefill
	body := d.resp.Body()
	switch {
	case !x.merge || !x.prefillWaited || d.resp.StatusCode() != fasthttp.StatusOK:
		return body, true
	case p.err != nil && (pdlbShortage(p.err) || errors.Is(p.err, fasthttp.ErrBodyTooLarge)):
		x.respondFailed(ctx, p) // pdlb could not hold the prefill's answer
		return nil, false
	case p.err != nil || p.resp.StatusCode() != fasthttp.StatusOK:
		return body, true
	}
	// The merged answer is at most both answers long.
	if x.scratchHeld = len(p.resp.Body()) + len(body); !x.s.memory.take(x.scratchHeld) {
		x.scratchHeld = 0
		aerr := x.s.memory.exhausted()
		x.s.writeError(ctx, aerr.status, aerr.reason, aerr.msg)
		return nil, false
	}
	x.scratch = mergeAnswers(x.scratch[:0], p.resp.Body(), body)
	return x.scratch, true
}

// largeAnswer is the size above which a non-stream answer may not fit in
// the socket's buffers at once, so a client that does not read it can
// leave it half written, when the client write timeout ends its
// connection. Smaller answers are accounted as written when the handler
// returns.
const largeAnswer = 16 << 10

// answerBody is the body of a large non-stream answer. fasthttp calls
// CloseWithError once it has written the answer or failed to; the request
// is accounted then, as a stream is, so that an answer cut off is a 499
// (client_gone), not a 200. The exchange, which holds the bytes, is let go
// then too. The last few KiB may still sit in fasthttp's buffer at that
// point: an answer cut off there counts as written.
type answerBody struct {
	x *exchange
	bytes.Reader
	status int
}

func (a *answerBody) CloseWithError(err error) error {
	x := a.x
	if a.status == 0 {
		return nil // closed already
	}
	status := a.status
	if err != nil || a.Len() > 0 { // cut off, or never written
		status = statusClientGone
		x.s.errorsByReason[reasonClientGone].Inc()
	}
	a.status = 0
	a.Reset(nil)
	x.finish(status)
	x.unref()
	return nil
}

// refuseNoRoom answers for a decode that refused a request for lacking a
// bootstrap room: a configuration error, logged as one, and explained.
func (x *exchange) refuseNoRoom(ctx *fasthttp.RequestCtx) {
	msg := x.refusedNoRoom()
	x.decode.backend.log.Error().Bytes("request_id", x.requestID).Msg(msg)
	x.s.writeError(ctx, fasthttp.StatusBadGateway, reasonRefusedNoRoom, msg)
}

// culprit returns the call whose failure ended the exchange: the prefill when
// its failure cancelled the decode, else the decode. When it is the prefill,
// culprit waits for the prefill call to finish (it is about to).
func (x *exchange) culprit() *call {
	var peer *errPeerFailed
	if !x.single && errors.As(x.decode.cancel.err(), &peer) && peer.role == rolePrefill {
		x.waitPrefill()
		return &x.prefill
	}
	return &x.decode
}

// waitPrefill waits for the prefill call to finish. Only the request side
// (handler, then relay) calls it, one at a time, so a plain flag makes it
// safe to call more than once.
func (x *exchange) waitPrefill() {
	if !x.prefillWaited && !x.single {
		<-x.prefill.done
		x.prefillWaited = true
	}
}

// respondFailed answers with c's failure: its HTTP answer as it is when it
// gave one, else a JSON error naming the backend.
func (x *exchange) respondFailed(ctx *fasthttp.RequestCtx, c *call) {
	if c.endedEarly && x.batch {
		// The prefill's answer holds one token of each other item: the
		// client is told which item ended, not handed a truncated batch.
		status := c.early.status
		if status < fasthttp.StatusBadRequest || status >= fasthttp.StatusInternalServerError {
			status = fasthttp.StatusBadGateway
		}
		msg := c.backend.role + " backend " + c.backend.addr + " ended batch item " + strconv.Itoa(c.early.item) + " early"
		if c.early.message != "" {
			msg += " (" + c.early.message + ")"
		}
		x.s.writeError(ctx, status, reasonBackendFailed, msg+"; the batch was not decoded")
		return
	}
	if c.err == nil {
		if c.resp.StatusCode() >= fasthttp.StatusInternalServerError || c.broke != nil {
			x.passOn(c)
		}
		ctx.SetStatusCode(c.resp.StatusCode())
		ctx.Response.Header.SetContentTypeBytes(c.resp.Header.ContentType())
		ctx.SetBody(c.resp.Body())
		return
	}
	status, r, msg := classify(c.err, c.backend.role, c.backend.addr)
	x.logFailure(c, msg)
	x.s.writeError(ctx, status, r, msg)
}

// passOn accounts c's failed answer, which the client gets as it is. It
// is logged, as the access line names the workers but not which failed.
func (x *exchange) passOn(c *call) {
	if x.abortedByClient.Load() {
		return // the abort the client asked for, no worker's failure
	}
	x.s.errorsByReason[reasonBackendFailed].Inc()
	x.s.log.Warn().Bytes("request_id", x.requestID).Str("route", x.rt.path).Str("role", c.backend.role).
		Str("backend", c.backend.addr).Int("status", c.resp.StatusCode()).AnErr("error", c.broke).
		Msg("passing a worker's failed answer on to the client")
}

// describe returns the status and message that tell a client why c failed.
func (c *call) describe() (int, reason, string) {
	if c.err != nil {
		return classify(c.err, c.backend.role, c.backend.addr)
	}
	body := c.resp.Body()
	if len(body) > 512 {
		body = body[:512]
	}
	return fasthttp.StatusBadGateway, reasonBackendFailed, c.backend.role + " backend " + c.backend.addr +
		" answered " + strconv.Itoa(c.resp.StatusCode()) + ": " + string(bytes.TrimSpace(body))
}

func (x *exchange) logFailure(c *call, msg string) {
	if errors.Is(c.cancel.err(), errShutdown) {
		return // Shutdown logs them all at once
	}
	x.s.log.Warn().Bytes("request_id", x.requestID).Str("route", x.rt.path).
		Str("role", c.backend.role).Str("backend", c.backend.addr).Err(c.err).Msg(msg)
}

// finish accounts the request once its answer is complete, and frees its
// admission slot.
func (x *exchange) finish(status int) {
	// A prefill call may go on a little (orphanPrefillGrace), but the
	// client is answered: nothing is left for a shutdown to cut.
	x.finished = true
	x.s.untrack(x)
	if x.permit {
		x.permit = false
		x.s.releasePermit()
	}
	took := x.s.cfg.Now().Sub(x.start)
	x.rt.observe(status, took)
	if line := x.s.accessLine(x.requestID, x.rt.path, status, took); line != nil {
		if x.single { // the decode leg went to a fallback worker, or a decode
			line.Str(x.decode.backend.role, x.decode.backend.addr)
		} else {
			line.Str("prefill", x.prefill.backend.addr).Str("decode", x.decode.backend.addr)
		}
		line.Bool("stream", x.decode.stream).Msg("request")
	}
}
