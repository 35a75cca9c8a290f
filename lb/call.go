package lb

import (
	"bytes"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/lb/wire"
)

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
	// answer holds the body of resp, read whole (ReadAnswer), or of a
	// streamed answer that is not an event stream (respondBufferedStream).
	answer bodyBuffer
	// Leg is the call on the wire: its deadlines, its cancellation, and a
	// streamed answer's body (Leg.Stream hands it to the relay instead of
	// buffering it).
	wire.Leg
	// broke is set by the relay to why a streamed body broke off, if it
	// did; on a prefill, to errFailureIn200 if its 200 answer holds a
	// failure.
	broke error
	err   error
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

	// done gets a value when the call has finished.
	done chan struct{}
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
	c.Deadline = deadline
	c.body = body
	req := c.request()
	req.Header.SetMethod(fasthttp.MethodPost)
	b.setURI(req, uri)
	req.Header.SetContentTypeBytes(contentTypeJSON)
	req.Header.SetBytesKV(headerRequestID, requestID)
	req.Header.SetHost(b.addr)
	b.authorize(&req.Header)
	req.SetBodyRaw(body)
	wire.Bind(req, c)
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
	if !c.Streaming() {
		c.end()
	}
}

// endStream gives the connection of a streamed answer back, reusable when
// clean (the body was read to its end), and ends the call.
func (c *call) endStream(clean bool) {
	c.EndBody(clean)
	c.end()
}

// end accounts the finished call and, if it failed, cancels its peer: a
// prefill that failed will never send the KV cache the decode waits for,
// and a decode that failed will never claim the KV cache the prefill holds.
// A decode whose stream is relayed has the cache already (or has failed
// on its own), and is left be.
func (c *call) end() {
	b := c.backend
	c.Cancel.End()
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
		c.peer.Cancel.CapRead(orphanPrefillGrace, errGaveUp)
	}
	// A refused key is pdlb's fault, not the worker's, and so is a call
	// pdlb lacked the descriptors or memory for (issue 19), or one it did
	// not resend for fear of a restart (redial); an abort a client asked
	// for (/abort_request), which SGLang answers as a failed KV transfer,
	// is the client's.
	own := c.Cancel.Err() == nil && !c.x.abortedByClient.Load() && (c.err == nil || !notTheWorkers(c.err))
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

// orphanPrefillGrace is how long a prefill may still take once its decode
// has finished.
const orphanPrefillGrace = 2 * time.Second

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
	if !c.Cancel.Cancel(reason) {
		return
	}
	if isCut(reason) {
		// The workers see the connection closed, and abort the request
		// themselves; and cutInflight and cutCalls, which cut it, hold
		// the flight lock that abortsOne takes.
		return
	}
	if rid, ok := abortRID(c.x.rid); ok && c.x.s.abortsOne(rid) {
		c.x.s.abortRequest(c.backend, rid)
	}
}

// cause is what ended c's answer early: err, unless pdlb cut the call at
// shutdown, which closed its connection under the read that failed.
func (c *call) cause(err error) error {
	if reason := c.Cancel.Err(); isCut(reason) {
		return reason
	}
	return err
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

// ReadAnswer reads the body of the call's answer resp, if it has one, into
// c.answer, at most limit bytes, taking its memory from the body memory:
// a worker's answer is as large as a client asks it to be (max_new_tokens,
// n, return_logprob), and sixteen answers of 190 MB ran pdlb out of
// memory. It becomes the response's body, which the exchange reads.
func (c *call) ReadAnswer(resp *fasthttp.Response, limit int) error {
	stream := resp.BodyStream()
	if stream == nil {
		return nil // none: a HEAD, a 204
	}
	declared := resp.Header.ContentLength()
	if declared < 0 {
		declared = -1 // chunked, or until the connection closes
	}
	if declared > limit {
		_ = resp.CloseBodyStream()
		return fasthttp.ErrBodyTooLarge
	}
	// A worker's length is its answer's, not a hostile client's claim: the
	// buffer takes it at once, and leaves no garbage of buffers outgrown,
	// which a burst of large answers would pile up faster than the
	// collector frees it.
	if declared > minPooledBody && !c.answer.growTo(declared, c.x.s.memory) {
		_ = resp.CloseBodyStream()
		return errNoBodyMemory
	}
	err := c.answer.fill(stream, declared, limit, c.x.s.memory, nil)
	_ = resp.CloseBodyStream()
	if err != nil {
		return err
	}
	resp.SetBodyRaw(c.answer.buf)
	return nil
}
