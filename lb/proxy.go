package lb

import (
	"bytes"
	"errors"
	"slices"
	"strconv"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// The P/D flow of one attempt (an exchange): inject the bootstrap fields,
// send both calls, then answer with the decode's (serveBuffered, or
// serveStream in stream.go), or with the failure that ended it.

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

// preparePD readies x's calls for q on prefill p and decode d: the bodies
// with the bootstrap fields in, the DP-rank header the prefill sees, and
// whether each worker failed q before (call.again).
func (x *exchange) preparePD(q *clientRequest, p, d *Backend) {
	x.merge = q.info.HasReturnLogprob || q.info.HasReturnRoutedExperts
	x.inject(q.body, q.info, p)
	x.prefill.prepare(q.ctx, p, x.prefillSends(), q.deadline, q.id)
	if x.plan.hint && q.ctx.Request.Header.PeekBytes(headerDPRank) != nil {
		x.prefill.req.Header.SetBytesK(headerDPRank, strconv.Itoa(x.plan.rank))
	}
	x.decode.prepare(q.ctx, d, x.body, q.deadline, q.id)
	x.prefill.again, x.decode.again = slices.Contains(q.failed, p), slices.Contains(q.failed, d)
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

// clientGone reports whether the exchange's calls were cancelled because
// its client went away.
func (x *exchange) clientGone() bool {
	return errors.Is(x.decode.Cancel.Err(), errClientGone)
}

// serveBuffered answers a non-stream request: the decode call runs on the
// handler's goroutine, the prefill call beside it. Unless it answered, it
// has written nothing and says why the request should be tried again.
func (x *exchange) serveBuffered(ctx *fasthttp.RequestCtx) outcome {
	if !x.single {
		go x.runPrefill()
	}
	x.watcher.Arm(ctx.Conn(), x.start)
	x.decode.run()
	x.watcher.Disarm()
	<-x.decode.done
	d := &x.decode
	if x.clientGone() {
		return x.leave(ctx)
	}
	if d.err != nil || d.resp.StatusCode() >= fasthttp.StatusBadRequest {
		// The decode's failure has cancelled the prefill already.
		if out := x.decide(decodeAnswered, d.resp.Body()); out.retry != answered {
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
// is none, then accounts the request: at once, or for a large answer once
// it is written (answerBody).
func (x *exchange) respond(ctx *fasthttp.RequestCtx) {
	if !x.writeAnswer(ctx) {
		x.finish(ctx.Response.StatusCode())
	}
}

// writeAnswer is respond's writing. It reports whether the answer's body
// accounts the request once it is written, holding x until then.
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
			x.hold()
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
// (client_gone), not a 200. Its reference to the exchange, which holds the
// bytes (hold), is let go then too. The last few KiB may still sit in
// fasthttp's buffer at that point: an answer cut off there counts as
// written.
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
	if !x.single && errors.As(x.decode.Cancel.Err(), &peer) && peer.role == rolePrefill {
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

func (x *exchange) logFailure(c *call, msg string) {
	if isCut(c.Cancel.Err()) {
		return // Shutdown and drain log their cuts at once
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
		line.Bool("stream", x.decode.Stream).Msg("request")
	}
}
