package lb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

const (
	// relayBufSize is the relay's starting buffer; it grows for larger
	// events up to maxEventSize, past which bytes are passed on as they come.
	relayBufSize = 2 << 10
	maxEventSize = 4 << 20
	// The relay frames each chunk it writes in its own buffer: the size
	// line goes in the chunkHeadroom bytes kept before the events (room
	// for any size a buffer can hold), what follows them in the
	// chunkTailroom bytes kept after the last one read: the chunk's
	// "\r\n", and after the last chunk the body's end.
	chunkHeadroom = 16
	chunkTailroom = len(chunkEnd) + len(lastChunk)
)

// chunkEnd ends a chunk's data; lastChunk ends a chunked body that has no
// trailers.
const (
	chunkEnd  = "\r\n"
	lastChunk = "0\r\n\r\n"
)

// serveStream answers a "stream": true request. The client's status is held
// back until the decode's first bytes: a failure before them (a dead
// prefill, a decode error) still gets a proper HTTP error, and only once
// tokens flow is the client committed to a 200 event stream, relayed by
// relay after the handler returns. Unless it answered, it has written
// nothing and says why the request should be tried again.
func (x *exchange) serveStream(ctx *fasthttp.RequestCtx) outcome {
	d := &x.decode
	d.stream = true
	d.firstByteBy = earliest(d.deadline, x.s.cfg.Now().Add(x.s.cfg.FirstByteTimeout))
	x.relay.client = ctx.Conn()
	if cc, ok := x.relay.client.(*clientConn); ok {
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
	x.watcher.arm(ctx.Conn(), x.start)
	// Until the headers are in; a prefill that fails meanwhile closes the
	// decode's connection, which ends the wait at once.
	d.run()
	if d.releaseBody == nil {
		x.watcher.disarm()
		<-d.done
		if x.clientGone() {
			return x.leave(ctx)
		}
		if out := x.retryOnFailure(d.resp.Body()); out.retry != answered {
			x.unref()
			return out
		}
		x.respond(ctx)
		return outcome{}
	}
	if d.resp.StatusCode() != fasthttp.StatusOK || !isEventStream(d.resp.Header.ContentType()) {
		x.watcher.disarm()
		return x.respondBufferedStream(ctx)
	}
	err := x.relay.prime(d.respBody)
	x.watcher.disarm()
	if err != nil {
		if d.cancel.err() == nil {
			d.broke = fmt.Errorf("the stream broke off before its first event: %w", err)
		}
		d.endStream(false)
		<-d.done
		if x.clientGone() {
			return x.leave(ctx)
		}
		if out := x.retryOnFailure(nil); out.retry != answered { // no answer: the stream broke
			x.unref()
			return out
		}
		if c := x.culprit(); c != d {
			x.respondFailed(ctx, c)
		} else {
			status, r, msg := classify(d.cause(err), d.backend.role, d.backend.addr)
			if r == reasonBackendFailed && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnDrop(err)) {
				// Its headers came: it answered, and then sent no event.
				msg = "decode backend " + d.backend.addr + " answered 200 and ended its event stream before the first event"
			}
			x.logFailure(d, msg)
			x.s.writeError(ctx, status, r, msg)
		}
		x.finish(ctx.Response.StatusCode())
		x.unref()
		return outcome{}
	}
	// SGLang streams some failures as the first event of a 200 stream
	// (isFailureEvent); nothing has reached the client yet, so it may
	// still be tried again. Out of retries, the worker's events are relayed
	// as they are, but for a refusal without a room, which pdlb explains.
	first, failed := x.relay.firstEventFailure()
	if failed {
		out := x.retryFirstEvent(first)
		refused := bytes.Contains(first, noRoomMarker)
		if out.retry != answered || refused {
			d.endStream(false)
			<-d.done
			x.prefill.abort(&errPeerFailed{role: roleDecode, addr: d.backend.addr})
		}
		if out.retry != answered {
			x.unref()
			return out
		}
		if refused {
			if x.local {
				x.s.localPrefillUnsupported(d.backend)
			}
			x.refuseNoRoom(ctx)
			x.finish(ctx.Response.StatusCode())
			x.unref()
			return outcome{}
		}
		x.passOn(d) // the client gets the failure event as the worker sent it
	}
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
	ctx.Response.SetBodyStream(&x.relay, -1)
	return outcome{}
}

// firstEventFailure returns the first event the decode streamed, and
// whether it is a failure instead of tokens (isFailureEvent).
func (r *relay) firstEventFailure() ([]byte, bool) {
	first, _ := cutEvent(r.buf[r.start:r.end])
	return first, isFailureEvent(first)
}

// isFailureEvent reports whether the SSE event ev is a failure a worker
// streamed instead of tokens: an {"error": ...} object, a finish_reason of
// type "abort" with a 5xx status_code, or the refusal of a request without a
// room.
func isFailureEvent(ev []byte) bool {
	if !bytes.Contains(ev, []byte(`"error"`)) && !bytes.Contains(ev, []byte(`"abort"`)) {
		return false
	}
	data, _, ok := eventData(ev)
	if !ok {
		return false
	}
	if bytes.Contains(data, noRoomMarker) || gjson.GetBytes(data, "error.code").Int() >= fasthttp.StatusInternalServerError {
		return true
	}
	fr := gjson.GetBytes(data, "meta_info.finish_reason")
	return fr.Get("type").String() == "abort" && fr.Get("status_code").Int() >= fasthttp.StatusInternalServerError
}

// earlyEnd is how a prefill's 200 answer says its request ended without its
// KV cache being handed over (endedEarly).
type earlyEnd struct {
	item    int    // the batch item it ended, by its index or position
	status  int    // the status it gives, 0 if none
	message string // what it says, "" if nothing
	// aborted is set for an abort (not an error event): one without a
	// status is how a prefill ends what it holds when told to, by
	// /abort_request or by its own shutdown.
	aborted bool
	// failed is set when one of a stream's events, this one or a later, is
	// a failure of the prefill's own (isFailureEvent).
	failed bool
}

// prefillFailed reports whether the early end is the prefill's failure,
// which another prefill may not repeat, rather than the request's (a 4xx
// abort, an error event): a 5xx, a failure event, or an abort without a
// status, as a prefill shutting down ends what it holds (pdlb sends no
// /abort_request of its own but to a call it has given up).
func (e earlyEnd) prefillFailed() bool {
	return e.failed || e.status >= fasthttp.StatusInternalServerError || e.aborted && e.status == 0
}

// endedEarly reports whether a prefill's 200 answer says its request ended
// without its KV cache being handed over, and how: a streamed error or
// abort event of any status, or a JSON answer, or a batch item, that an
// abort finished (an /abort_request, a limit of the prefill's own), in the
// /generate shape or the OpenAI one. The first such end is the one it
// describes; a stream is read to its end for failure events. SGLang
// streams some failures so, and the fake servers answer an aborted request
// so, as SGLang does; left unseen, the decode would wait for a KV cache
// that never comes, up to its own timeout (mini_lb's hang).
func endedEarly(resp *fasthttp.Response) (earlyEnd, bool) {
	body := resp.Body()
	if resp.StatusCode() != fasthttp.StatusOK ||
		!bytes.Contains(body, []byte(`"abort"`)) && !bytes.Contains(body, []byte(`"error"`)) {
		return earlyEnd{}, false // the usual answer, told at the cost of two scans
	}
	if isEventStream(resp.Header.ContentType()) {
		var first earlyEnd
		ended, failed := false, false
		for events := body; len(events) > 0; {
			var ev []byte
			ev, events = cutEvent(events)
			failed = failed || isFailureEvent(ev)
			data, _, ok := eventData(ev)
			if ended || !ok {
				continue
			}
			event := gjson.ParseBytes(data)
			if e := event.Get("error"); e.IsObject() || e.Type == gjson.String {
				first, ended = earlyEnd{item: int(event.Get("index").Int()), status: int(e.Get("code").Int()), message: e.Get("message").String()}, true
			} else {
				first, ended = aborted(event, 0)
			}
		}
		first.failed = failed
		return first, ended || failed
	}
	answer := gjson.ParseBytes(body)
	if answer.IsArray() {
		for i, item := range answer.Array() {
			if end, ok := aborted(item, i); ok {
				return end, true
			}
		}
		return earlyEnd{}, false
	}
	return aborted(answer, 0)
}

// aborted reports whether an answer, or one event of its stream, was
// finished by an abort: a /generate finish_reason of type "abort", or an
// OpenAI choice's finish_reason "abort". item is its position in a list.
func aborted(answer gjson.Result, item int) (earlyEnd, bool) {
	if fr := answer.Get("meta_info.finish_reason"); fr.Get("type").String() == "abort" {
		if i := answer.Get("index"); i.Exists() {
			item = int(i.Int())
		}
		return earlyEnd{item: item, status: int(fr.Get("status_code").Int()), message: fr.Get("message").String(), aborted: true}, true
	}
	if c := answer.Get(`choices.#(finish_reason=="abort")`); c.Exists() {
		return earlyEnd{item: int(c.Get("index").Int()), aborted: true}, true
	}
	return earlyEnd{}, false
}

// errFailureIn200 marks a prefill whose 200 answer holds a failure of its
// own instead of its token (earlyEnd.prefillFailed).
var errFailureIn200 = errors.New("it answered 200 with a failure instead of its token")

// retryFirstEvent says whether a stream whose first event is a failure is
// worth another attempt.
func (x *exchange) retryFirstEvent(first []byte) outcome {
	if bytes.Contains(first, noRoomMarker) {
		return x.retryFor(fasthttp.StatusBadRequest, first)
	}
	if out := x.retryFor(fasthttp.StatusInternalServerError, first); out.retry != answered {
		return out
	}
	if !x.mayRetry || x.abortedByClient.Load() {
		return outcome{}
	}
	d := x.decode.backend
	return outcome{retry: retryFailed, backend: d, peer: x.pairFailed(first),
		why: d.role + " backend " + d.addr + " streamed an error before any token"}
}

// respondBufferedStream answers a stream request that the decode answered
// with something other than an event stream (an error, typically): the body
// is read whole and passed on with the decode's status.
func (x *exchange) respondBufferedStream(ctx *fasthttp.RequestCtx) outcome {
	d := &x.decode
	err := d.answer.fill(d.respBody, -1, x.s.cfg.MaxResponseBodySize, x.s.memory, nil)
	if err == nil {
		d.resp.SetBodyRaw(d.answer.buf) // what the retry decisions read
	}
	d.endStream(err == nil)
	<-d.done
	if err == nil {
		if out := x.retryAfter(d.answer.buf); out.retry != answered {
			x.unref()
			return out
		}
		err = d.err // an answer that is pdlb's failure (errKeyRefused)
	}
	var peer *errPeerFailed
	if err != nil && errors.As(d.cancel.err(), &peer) && peer.role == rolePrefill {
		// The prefill failed as the decode's error answer was read, and
		// closed the decode's connection under it: the prefill's failure
		// is the one to retry, or to tell, as for a non-stream request.
		if out := x.retryOnFailure(nil); out.retry != answered {
			x.unref()
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
	x.unref()
	return outcome{}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func isEventStream(contentType []byte) bool {
	return bytes.HasPrefix(contentType, []byte("text/event-stream"))
}

// relay streams the decode's server-sent events to the client. fasthttp
// calls WriteTo after the handler has returned, on the connection's own
// goroutine, and writes every Write as one chunk, flushed at once: each
// event reaches the client as soon as the decode has sent it. relay never
// touches the RequestCtx; the exchange it belongs to outlives the handler.
type relay struct {
	x    *exchange
	body io.Reader
	// client is the client's connection, whose write deadline events push
	// back, so a client that stops reading is let go (pushWriteDeadline).
	// writeBy and readBy are the deadlines last set on it and on the
	// decode's connection.
	client          net.Conn
	writeBy, readBy time.Time
	// cc is the client's connection as fasthttp writes to it, nil if pdlb
	// did not accept it (watchListener): the relay may then not send the
	// body's end itself.
	cc *clientConn
	// buf[start:end] holds bytes read but not yet written, between
	// chunkHeadroom bytes before and chunkTailroom after.
	buf        []byte
	start, end int
	readErr    error
	sawDone    bool
	// framing is set once fasthttp has written the headers with the first
	// chunk: the relay then frames the chunks and writes them itself.
	framing bool

	// mergeLogprobs asks for the prefill's input_token_logprobs to be
	// prepended in every event (mini_lb does it when return_logprob is
	// truthy); prefillLogprobs is that raw JSON list, nil if unavailable.
	mergeLogprobs   bool
	prefillLogprobs []byte
	merged          []byte
	// items is the number of items of a /generate batch, whose events each
	// carry their output's "index", 0 for a request that is no batch:
	// prefillLogprobs then holds every output's list, back to back, and
	// itemLogprobs[i] bounds output i's in it (empty if it has none). With
	// n > 1 samples a batch has more outputs than items (items × n).
	items        int
	itemLogprobs [][2]int

	status int
	closed bool
}

func (r *relay) reset() {
	r.body, r.readErr, r.client, r.cc = nil, nil, nil, nil
	r.writeBy, r.readBy = time.Time{}, time.Time{}
	r.start, r.end = 0, 0
	r.sawDone, r.mergeLogprobs, r.closed, r.framing, r.items = false, false, false, false, 0
	r.prefillLogprobs = r.prefillLogprobs[:0]
	r.itemLogprobs = r.itemLogprobs[:0]
	if cap(r.itemLogprobs) > 1024 {
		r.itemLogprobs = nil // a large batch's; not kept in the pool
	}
	r.status = 0
	if cap(r.buf) > 4*relayBufSize {
		// A rare huge event grew it; don't keep that in the pool.
		r.buf = nil
	}
	if cap(r.merged) > maxPooledBuffer {
		r.merged = nil
	}
}

// prime reads the stream's first bytes, so the client is only committed to
// a 200 once the decode is really sending.
func (r *relay) prime(body io.Reader) error {
	r.body = body
	if cap(r.buf) < relayBufSize {
		r.buf = make([]byte, relayBufSize)
	}
	r.buf = r.buf[:cap(r.buf)]
	r.start, r.end = chunkHeadroom, chunkHeadroom
	for r.end == r.start {
		n, err := body.Read(r.buf[r.end : len(r.buf)-chunkTailroom])
		r.end += n
		if err != nil {
			r.readErr = err
			if n == 0 {
				return err
			}
		}
	}
	return nil
}

// usePrefill takes the input_token_logprobs of the prefill's first event,
// or of a batch's, the first event of each item.
func (r *relay) usePrefill(p *call) {
	if p.err != nil || p.resp.StatusCode() != fasthttp.StatusOK {
		return
	}
	if r.items > 0 {
		r.useItemLogprobs(p.resp.Body())
		return
	}
	if lp := firstEventLogprobs(p.resp.Body()); lp != nil {
		r.prefillLogprobs = append(r.prefillLogprobs[:0], lp...)
	}
}

// maxOutputIndex bounds the "index" of a batch's stream events that
// useItemLogprobs takes, so an odd worker cannot make it grow without end.
const maxOutputIndex = 1 << 16

// useItemLogprobs takes, for each output of a batch (an item, or one of an
// item's n samples), the input_token_logprobs of the first event of the
// prefill's stream with its "index". (mini_lb puts the first output's in
// every output's events.)
func (r *relay) useItemLogprobs(stream []byte) {
	for len(stream) > 0 {
		var ev []byte
		ev, stream = cutEvent(stream)
		data, _, ok := eventData(ev)
		if !ok || bytes.Equal(data, doneData) {
			continue
		}
		i := int(gjson.GetBytes(data, "index").Int())
		lp := gjson.GetBytes(data, "meta_info.input_token_logprobs")
		if i < 0 || i >= maxOutputIndex || !lp.IsArray() {
			continue // an index no output has, from an odd worker
		}
		for len(r.itemLogprobs) <= i {
			r.itemLogprobs = append(r.itemLogprobs, [2]int{})
		}
		if r.itemLogprobs[i] == ([2]int{}) {
			start := len(r.prefillLogprobs)
			r.prefillLogprobs = append(r.prefillLogprobs, lp.Raw...)
			r.itemLogprobs[i] = [2]int{start, len(r.prefillLogprobs)}
		}
	}
}

// logprobsFor returns the prefill's logprobs to merge into the event whose
// payload is data.
func (r *relay) logprobsFor(data []byte) []byte {
	if r.items == 0 {
		return r.prefillLogprobs
	}
	i := int(gjson.GetBytes(data, "index").Int())
	if i < 0 || i >= len(r.itemLogprobs) {
		return nil
	}
	span := r.itemLogprobs[i]
	return r.prefillLogprobs[span[0]:span[1]]
}

// SupportsBodyWriteTo tells fasthttp to use WriteTo, which frames one chunk
// per event, instead of Read.
func (r *relay) SupportsBodyWriteTo() bool { return true }

// Read exists to satisfy io.Reader; fasthttp uses WriteTo.
func (r *relay) Read([]byte) (int, error) {
	return 0, errors.New("BUG: relay must be consumed through WriteTo")
}

// WriteTo writes the complete events buffered as one chunk, then, when the
// decode's stream ends without its [DONE] (it broke, or was cancelled), an
// SSE error event and [DONE] of its own, so the client always sees a proper
// end. w frames each Write as a chunk and flushes it; fasthttp writes the
// body's end once WriteTo returns, unless the relay has sent it already.
func (r *relay) WriteTo(w io.Writer) (int64, error) {
	r.status = fasthttp.StatusOK
	var written int64
	for {
		from := r.start
		if batch := r.nextBatch(); len(batch) > 0 {
			r.pushWriteDeadline()
			var (
				n   int
				err error
			)
			if r.framing && len(r.prefillLogprobs) == 0 {
				n, err = r.writeChunk(from, r.start, r.ended())
			} else {
				n, err = w.Write(batch)
				r.framing = r.client != nil
			}
			written += int64(n)
			if err != nil {
				r.writeFailed(err)
				return written, err
			}
		}
		if r.readErr != nil {
			break
		}
		r.fill()
	}
	r.pushWriteDeadline()
	if r.start < r.end {
		tail := r.buf[r.start:r.end]
		r.start = r.end
		if r.readErr == io.EOF && wholeEvent(tail) {
			// The stream ended whole, its last event without the blank
			// line that ends it: end it, so nothing runs into it.
			r.noteDone(tail)
			r.merged = append(append(r.merged[:0], tail...), "\n\n"...)
			n, err := w.Write(r.merged)
			written += int64(min(n, len(tail)))
			if err != nil {
				r.writeFailed(err)
				return written, err
			}
		}
		// Else the stream broke in the middle of an event (its connection
		// cut, or its body ended in the middle of the data): that piece
		// is dropped, as a client could not parse it, nor the error event
		// written after it.
	}
	if r.sawDone {
		// Whole for the client, even if the connection broke before the
		// body's last chunk.
		return written, nil
	}
	n, err := w.Write(r.brokenEvent())
	written += int64(n)
	if err != nil {
		r.writeFailed(err)
	}
	return written, err
}

// nextEvent returns the next complete event (through its blank line), or
// nil when none is buffered. An event larger than maxEventSize is returned
// in pieces as it comes, unmerged.
func (r *relay) nextEvent() []byte {
	pending := r.buf[r.start:r.end]
	if i := eventEnd(pending); i > 0 {
		r.start += i
		return pending[:i]
	}
	if r.start == chunkHeadroom && r.end == len(r.buf)-chunkTailroom && len(r.buf) >= maxEventSize {
		r.start = r.end
		return pending
	}
	return nil
}

// cutEvent splits the first event off a stream read whole: through its
// blank line, or all of it when no blank line ends it (a stream's last
// event may lack one).
func cutEvent(stream []byte) (ev, rest []byte) {
	n := eventEnd(stream)
	if n == 0 {
		n = len(stream)
	}
	return stream[:n], stream[n:]
}

// eventEnd returns the length of the first event in b including the blank
// line that ends it ("\n\n" or "\r\n\r\n"), or 0 if b holds no whole event.
func eventEnd(b []byte) int {
	for i := 0; i < len(b); {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return 0
		}
		k := i + j + 1
		if k < len(b) && b[k] == '\n' {
			return k + 1
		}
		if k+1 < len(b) && b[k] == '\r' && b[k+1] == '\n' {
			return k + 2
		}
		i = k
	}
	return 0
}

// Moving a deadline costs a runtime timer update; at tens of thousands of
// events a second, doing it for every event shows. So a deadline is pushed
// back only once half its timeout has passed: the time allowed is then
// between half and all of the timeout.

// pushWriteDeadline gives the client ClientStallTimeout for the next write.
// A write waits only when the socket's buffers are full: its client is
// that far behind. A stream holds its decode connection while it waits,
// so the wait is bounded by this, not by the ClientWriteTimeout of a
// non-stream answer, which holds no worker: a client that stops reading
// is let go within seconds, its stream ended through clientGone (issue 19,
// item 6). Until the buffers fill, pdlb keeps reading the decode as a
// reading client's stream would.
func (r *relay) pushWriteDeadline() {
	if r.client == nil {
		return
	}
	timeout := r.x.s.cfg.ClientStallTimeout
	if now := r.x.s.cfg.Now(); r.writeBy.Sub(now) < timeout/2 {
		r.writeBy = now.Add(timeout)
		if r.cc != nil {
			_ = r.cc.SetWriteDeadline(r.writeBy) // which remembers it
		} else {
			_ = r.client.SetWriteDeadline(r.writeBy)
		}
	}
}

// fill reads more of the decode's stream, making room first. The decode has
// StreamIdleTimeout to send it.
func (r *relay) fill() {
	d := &r.x.decode
	idle := r.x.s.cfg.StreamIdleTimeout
	if now := r.x.s.cfg.Now(); r.readBy.Sub(now) < idle/2 {
		r.readBy = earliest(d.deadline, now.Add(idle))
		d.cancel.readBy(r.readBy)
	}
	if r.start > chunkHeadroom {
		r.end = chunkHeadroom + copy(r.buf[chunkHeadroom:], r.buf[r.start:r.end])
		r.start = chunkHeadroom
	}
	if r.end == len(r.buf)-chunkTailroom {
		grown := make([]byte, 2*len(r.buf))
		copy(grown, r.buf[:r.end])
		r.buf = grown
	}
	n, err := r.body.Read(r.buf[r.end : len(r.buf)-chunkTailroom])
	r.end += n
	if err != nil {
		r.readErr = err
	}
}

// writeChunk writes buf[from:to] to the client as one chunk, framed in
// place: its size line goes in the bytes before it (written already, or
// the headroom), its "\r\n" over the bytes after it, which are put back.
// fasthttp's own writer would copy the events into the connection's
// buffer first. With last, the chunk is the body's last, and the body's
// end goes with it: one write, where fasthttp would make it a second, and
// the client a second read. It returns how many of the events' bytes
// were written.
func (r *relay) writeChunk(from, to int, last bool) (int, error) {
	var line [chunkHeadroom]byte
	size := append(strconv.AppendInt(line[:0], int64(to-from), 16), chunkEnd...)
	head := from - len(size)
	copy(r.buf[head:], size)
	after := [chunkTailroom]byte(r.buf[to:])
	tail := copy(r.buf[to:], chunkEnd)
	if last {
		tail += copy(r.buf[to+tail:], lastChunk)
	}
	n, err := r.client.Write(r.buf[head : to+tail])
	copy(r.buf[to:], after[:])
	if last && err == nil {
		r.cc.lastChunkSent()
	}
	return min(max(n-len(size), 0), to-from), err
}

// ended reports whether the events just taken are the decode's last: it
// sent its [DONE] and the body's end with them, and nothing else is left.
// The relay may then send the body's end itself, with them.
func (r *relay) ended() bool {
	return r.readErr == io.EOF && r.sawDone && r.start == r.end && r.cc != nil
}

// nextBatch returns every complete event buffered, as the client must see
// them, to be written at once: one chunk, one flush, one write to the
// client. Events that arrived together leave together; an event alone
// leaves alone, as soon as it is whole. Without a merge the batch is the
// decode's own bytes, not copied.
func (r *relay) nextBatch() []byte {
	from := r.start
	if len(r.prefillLogprobs) == 0 {
		for ev := r.nextEvent(); ev != nil; ev = r.nextEvent() {
			r.noteDone(ev)
		}
		return r.buf[from:r.start]
	}
	r.merged = r.merged[:0]
	for ev := r.nextEvent(); ev != nil; ev = r.nextEvent() {
		r.merged = r.appendMerged(r.merged, ev)
	}
	return r.merged
}

// noteDone records the decode's [DONE].
func (r *relay) noteDone(ev []byte) {
	if data, _, ok := eventData(ev); ok && bytes.Equal(data, doneData) {
		r.sawDone = true
	}
}

// appendMerged appends ev with the prefill's input logprobs merged in, or
// as it is when it has none to merge.
func (r *relay) appendMerged(dst, ev []byte) []byte {
	r.noteDone(ev)
	data, off, ok := eventData(ev)
	if !ok || bytes.Equal(data, doneData) {
		return append(dst, ev...)
	}
	lp := r.logprobsFor(data)
	if len(lp) == 0 {
		return append(dst, ev...)
	}
	if merged, ok := mergeEventLogprobs(dst, ev, off, lp); ok {
		return merged
	}
	return append(dst, ev...)
}

var doneData = []byte("[DONE]")

// eventData returns the payload of a "data:" event and its offset in ev.
func eventData(ev []byte) (data []byte, off int, ok bool) {
	rest, ok := bytes.CutPrefix(ev, []byte("data:"))
	if !ok {
		return nil, 0, false
	}
	trimmed := bytes.TrimLeft(rest, " ")
	off = len(ev) - len(trimmed)
	return bytes.TrimSpace(trimmed), off, true
}

// writeFailed ends the stream after a write to its client failed: the
// client went away, or stopped reading for ClientStallTimeout (a timeout),
// which only a debug line tells apart, as a client can make as many as it
// likes.
func (r *relay) writeFailed(err error) {
	if isTimeout(err) {
		r.x.s.log.Debug().Bytes("request_id", r.x.requestID).Str("route", r.x.rt.path).
			Dur("stall_timeout", r.x.s.cfg.ClientStallTimeout).Msg("the client stopped reading the stream: ending it")
	}
	r.clientGone()
}

// clientGone stops both calls: nobody is left to read their answers.
func (r *relay) clientGone() {
	r.status = statusClientGone
	r.x.s.errorsByReason[reasonClientGone].Inc()
	r.x.decode.abort(errClientGone)
	r.x.prefill.abort(errClientGone)
}

// wholeEvent reports whether ev, the end of a stream that lacks the blank
// line ending it, is an event whole: its data [DONE] or JSON that parses,
// or no data line at all (a comment). A body that ends in the middle of an
// event's JSON leaves only a piece of it.
func wholeEvent(ev []byte) bool {
	data, _, ok := eventData(ev)
	return !ok || bytes.Equal(data, doneData) || gjson.ValidBytes(data)
}

// errNoDone is why a stream that ended without its [DONE] broke off.
var errNoDone = errors.New("the stream ended without [DONE]")

// brokenEvent describes why the decode's stream ended early, as an SSE error
// event followed by [DONE].
func (r *relay) brokenEvent() []byte {
	x := r.x
	d := &x.decode
	status, rsn, msg := fasthttp.StatusBadGateway, reasonStreamBroken, "decode backend "+d.backend.addr+" ended the stream early"
	var peer *errPeerFailed
	switch {
	case errors.Is(d.cancel.err(), errShutdown):
		status, rsn, msg = classify(errShutdown, d.backend.role, d.backend.addr)
	case errors.As(d.cancel.err(), &peer) && peer.role == rolePrefill:
		// The prefill failed just before the decode's first event was
		// seen (after it, a prefill no longer cancels the decode); its
		// call is finishing now.
		x.waitPrefill()
		status, _, msg = x.prefill.describe()
	case r.readErr != io.EOF:
		status, _, msg = classify(r.readErr, d.backend.role, d.backend.addr)
		switch {
		case isConnDrop(r.readErr) || errors.Is(r.readErr, io.ErrUnexpectedEOF):
			msg = "decode backend " + d.backend.addr + " closed the connection in the middle of the stream"
		case isTimeout(r.readErr) && !x.s.cfg.Now().Before(d.deadline):
			// The decode was streaming; the request's time ran out.
			msg = "the stream from decode backend " + d.backend.addr + " ran past the request's time limit (--request-timeout-secs)"
		case isTimeout(r.readErr):
			msg = "decode backend " + d.backend.addr + " sent no event within " + x.s.cfg.StreamIdleTimeout.String() + " (--stream-idle-timeout-secs)"
		}
		if d.cancel.err() == nil { // counts against the decode
			d.broke = fmt.Errorf("the stream broke off: %w", r.readErr)
		}
	default:
		d.broke = errNoDone
	}
	x.s.errorsByReason[rsn].Inc()
	if rsn != reasonShutdown { // Shutdown logs those all at once
		x.s.log.Warn().Bytes("request_id", x.requestID).Str("route", x.rt.path).
			Str("backend", d.backend.addr).Err(r.readErr).Msg(msg)
	}
	r.status = status
	r.merged = appendSSEError(r.merged[:0], status, msg)
	return r.merged
}

// CloseWithError is called by fasthttp once the response is over (or could
// not be written at all): it returns the decode's connection, accounts the
// request and lets go of the exchange.
func (r *relay) CloseWithError(err error) error {
	if r.closed {
		return nil
	}
	r.closed = true
	x := r.x
	if r.status == 0 {
		// WriteTo never ran: the client was gone before the first byte.
		r.clientGone()
	}
	clean := err == nil && r.readErr == io.EOF && r.start == r.end
	x.decode.endStream(clean)
	<-x.decode.done
	x.finish(r.status)
	x.unref()
	return nil
}
