package lb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"pdlb/lb/wire"

	"github.com/valyala/fasthttp"
)

// serveStream answers a "stream": true request. The client's status is held
// back until the decode's first bytes: a failure before them (a dead
// prefill, a decode error) still gets a proper HTTP error, and only once
// tokens flow is the client committed to a 200 event stream, relayed by
// relay after the handler returns. Unless it answered, it has written
// nothing and says why the request should be tried again.
func (x *exchange) serveStream(ctx *fasthttp.RequestCtx) outcome {
	d := &x.decode
	x.startStream(ctx)
	if !d.Streaming() {
		x.watcher.Disarm()
		return x.answerUnstreamed(ctx)
	}
	if d.resp.StatusCode() != fasthttp.StatusOK || !isEventStream(d.resp.Header.ContentType()) {
		x.watcher.Disarm()
		return x.respondBufferedStream(ctx)
	}
	err := x.relay.prime(d.Body())
	x.watcher.Disarm()
	if err != nil {
		return x.failBeforeFirstEvent(ctx, err)
	}
	// SGLang streams some failures as the first event of a 200 stream
	// (isFailureEvent); nothing has reached the client yet, so it may
	// still be tried again. Out of retries, the worker's events are relayed
	// as they are, but for a refusal without a room, which pdlb explains.
	if first, failed := x.relay.firstEventFailure(); failed {
		if out, over := x.firstEventFailed(ctx, first); over {
			return out
		}
	}
	x.commitStream(ctx)
	return outcome{}
}

// startStream sends both calls and returns once the decode's headers are
// in, or its call has failed, with the client watched meanwhile.
func (x *exchange) startStream(ctx *fasthttp.RequestCtx) {
	d := &x.decode
	d.Stream = true
	d.FirstByteBy = earliest(d.Deadline, x.s.cfg.Now().Add(x.s.cfg.FirstByteTimeout))
	x.relay.client = ctx.Conn()
	if cc, ok := x.relay.client.(*wire.ClientConn); ok {
		// Its wrapping is for reads; the relay only writes.
		x.relay.client, x.relay.cc = cc.Conn, cc
	}
	if !x.single {
		go x.runPrefill()
	}
	// The first event may be long in coming (a busy worker queues the
	// request), and a client that leaves meanwhile must not leave both
	// workers generating: it is watched until then, as a non-stream
	// request's client is. Once events flow, a failed write tells.
	x.watcher.Arm(ctx.Conn(), x.start)
	// Until the headers are in; a prefill that fails meanwhile closes the
	// decode's connection, which ends the wait at once.
	d.run()
}

// answerUnstreamed answers a stream request whose decode call is over with
// no body to stream: it failed, or its answer was read whole.
func (x *exchange) answerUnstreamed(ctx *fasthttp.RequestCtx) outcome {
	d := &x.decode
	<-d.done
	if x.clientGone() {
		return x.leave(ctx)
	}
	if out := x.decide(callFailed, d.resp.Body()); out.retry != answered {
		return out
	}
	x.respond(ctx)
	return outcome{}
}

// failBeforeFirstEvent answers a stream request whose decode's event stream
// broke off (err) before its first event: tried again, or the failure told
// as an HTTP error, as nothing has reached the client.
func (x *exchange) failBeforeFirstEvent(ctx *fasthttp.RequestCtx, err error) outcome {
	d := &x.decode
	if d.Cancel.Err() == nil {
		d.broke = fmt.Errorf("the stream broke off before its first event: %w", err)
	}
	d.endStream(false)
	<-d.done
	if x.clientGone() {
		return x.leave(ctx)
	}
	if out := x.decide(callFailed, nil); out.retry != answered { // no answer: the stream broke
		return out
	}
	if c := x.culprit(); c != d {
		x.respondFailed(ctx, c)
	} else {
		status, r, msg := classify(d.cause(err), d.backend.role, d.backend.addr)
		if r == reasonBackendFailed && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || wire.IsConnDrop(err)) {
			// Its headers came: it answered, and then sent no event.
			msg = "decode backend " + d.backend.addr + " answered 200 and ended its event stream before the first event"
		}
		x.logFailure(d, msg)
		x.s.writeError(ctx, status, r, msg)
	}
	x.finish(ctx.Response.StatusCode())
	return outcome{}
}

// firstEventFailed acts on a decode whose first event, first, is a failure
// (isFailureEvent): the attempt is given up to be made again, or pdlb
// answers a refusal without a room itself; over then reports that serveStream
// must return out. Otherwise the failure is accounted, and the stream is
// relayed to the client as the worker sent it.
func (x *exchange) firstEventFailed(ctx *fasthttp.RequestCtx, first []byte) (out outcome, over bool) {
	d := &x.decode
	out = x.decide(failureEvent, first)
	refused := bytes.Contains(first, noRoomMarker)
	if out.retry != answered || refused {
		d.endStream(false)
		<-d.done
		x.prefill.abort(&errPeerFailed{role: roleDecode, addr: d.backend.addr})
	}
	if out.retry != answered {
		return out, true
	}
	if refused {
		if x.local {
			x.s.localPrefillUnsupported(d.backend)
		}
		x.refuseNoRoom(ctx)
		x.finish(ctx.Response.StatusCode())
		return outcome{}, true
	}
	x.passOn(d) // the client gets the failure event as the worker sent it
	return outcome{}, false
}

// commitStream commits the client to a 200 event stream, which the relay
// writes once the handler has returned.
func (x *exchange) commitStream(ctx *fasthttp.RequestCtx) {
	d := &x.decode
	// The decode's stream is relayed from here on, and the decode needs
	// nothing more of the prefill: its first event is tokens, so it has the
	// KV cache, or an error it ends the stream with itself. A failing
	// prefill no longer cancels it (which would only add an error event).
	x.decodeStreams.Store(true)
	if x.relay.mergeLogprobs {
		x.waitPrefill()
		x.relay.usePrefill(&x.prefill) // without the prefill's logprobs if it failed
	}
	x.rt.ttfb.Update(x.s.cfg.Now().Sub(x.start).Seconds())
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentTypeBytes(d.resp.Header.ContentType())
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-cache")
	x.hold()
	ctx.Response.SetBodyStream(&x.relay, -1)
}

// respondBufferedStream answers a stream request that the decode answered
// with something other than an event stream (an error, typically): the body
// is read whole and passed on with the decode's status.
func (x *exchange) respondBufferedStream(ctx *fasthttp.RequestCtx) outcome {
	d := &x.decode
	err := d.answer.fill(d.Body(), -1, x.s.cfg.MaxResponseBodySize, x.s.memory, nil)
	if err == nil {
		d.resp.SetBodyRaw(d.answer.buf) // what decide reads
	}
	d.endStream(err == nil)
	<-d.done
	if err == nil {
		if out := x.decide(decodeAnswered, d.answer.buf); out.retry != answered {
			return out
		}
		err = d.err // an answer that is pdlb's failure (errKeyRefused)
	}
	var peer *errPeerFailed
	if err != nil && errors.As(d.Cancel.Err(), &peer) && peer.role == rolePrefill {
		// The prefill failed as the decode's error answer was read, and
		// closed the decode's connection under it: the prefill's failure
		// is the one to retry, or to tell, as for a non-stream request.
		if out := x.decide(callFailed, nil); out.retry != answered {
			return out
		}
		x.respondFailed(ctx, x.culprit())
	} else if err != nil {
		status, r, msg := classify(d.cause(err), d.backend.role, d.backend.addr)
		x.logFailure(d, msg)
		x.s.writeError(ctx, status, r, msg)
	} else {
		if d.resp.StatusCode() >= fasthttp.StatusInternalServerError {
			x.passOn(d)
		}
		ctx.SetStatusCode(d.resp.StatusCode())
		ctx.Response.Header.SetContentTypeBytes(d.resp.Header.ContentType())
		ctx.SetBody(d.answer.buf)
	}
	x.finish(ctx.Response.StatusCode())
	return outcome{}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
