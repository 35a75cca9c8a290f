package fake

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/valyala/fasthttp"
)

// eventStream is the SSE body of a streamed generate request. fasthttp calls
// WriteTo on the connection's goroutine once the handler has returned and
// the headers are out; every event is one Write, which fasthttp sends as its
// own flushed chunk. So events reach the client one by one, paced by
// TokenDelay or TokenGate, and no goroutine outlives the connection. The
// connection stays watched for the client going away up to [DONE]: a
// client may leave once it has that.
type eventStream struct {
	s    *Server
	r    *request
	c    *call
	conn net.Conn // nil when Handler is called without a connection

	w      io.Writer
	buf    []byte
	n      int64
	events int        // events written
	hold   holder     // FaultStall's state
	busy   bool       // counted busy on conn: until its last event is written
	watch  *watchConn // the request's watched connection, nil if none
	err    error      // the first write error (the client is gone), or errCut
	rest   *bytes.Reader
	once   sync.Once
}

// errCut ends a stream that FaultCut broke.
var errCut = errors.New("stream cut by a fault")

// startStream answers r with an SSE stream. The stream untracks c, and
// ends the watch of w (nil if none), when fasthttp closes it.
func (s *Server) startStream(ctx *fasthttp.RequestCtx, r *request, c *call, w *watchConn) {
	ctx.SetContentType(contentSSE)
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.ImmediateHeaderFlush = true
	markBusy(ctx.Conn())
	es := &eventStream{s: s, r: r, c: c, conn: ctx.Conn(), busy: true, watch: w}
	ctx.Response.SetBodyStream(es, -1)
}

// SupportsBodyWriteTo tells fasthttp to call WriteTo rather than Read.
func (es *eventStream) SupportsBodyWriteTo() bool { return true }

// WriteTo runs the request and writes its events to w.
func (es *eventStream) WriteTo(w io.Writer) (int64, error) {
	es.w = w
	es.buf = es.s.getBuf()
	defer es.idle()
	defer es.watch.unwatch()
	es.run()
	return es.n, es.err
}

// idle stops counting the stream as busy on its connection: its events
// are out, though fasthttp has still to write the chunked terminator.
// WriteTo and Close, which call it, run one after the other.
func (es *eventStream) idle() {
	if es.busy {
		es.busy = false
		markIdle(es.conn)
	}
}

// Read serves a reader that does not use WriteTo (a body buffered in
// memory): it runs the whole stream first.
func (es *eventStream) Read(p []byte) (int, error) {
	if es.rest == nil {
		var b bytes.Buffer
		_, _ = es.WriteTo(&b)
		es.rest = bytes.NewReader(b.Bytes())
	}
	return es.rest.Read(p)
}

// Close ends the request's tracking; fasthttp calls it once the body is
// written, or dropped unwritten.
func (es *eventStream) Close() error {
	es.once.Do(func() {
		es.watch.unwatch()
		if es.w == nil && clientLeft(es.conn) {
			// fasthttp drops the stream unwritten when the header cannot
			// go out: the client left before the watch could tell.
			es.c.end(true)
		}
		es.idle()
		es.s.untrack(es.r, es.c)
		if es.buf != nil {
			es.s.putBuf(es.buf)
			es.buf = nil
		}
	})
	return nil
}

// run is the life of a streamed request: transfer, then one event per item
// per token step, then the closing events.
func (es *eventStream) run() {
	s, r := es.s, es.r
	if f := s.transfer(r, es.c); f != nil {
		es.fail(f)
		return
	}
	es.begin()
	n := s.steps(r)
	s.startDecoding(r)
	defer s.stopDecoding(r)
	for t := 0; t < n && es.err == nil; t++ {
		if !s.nextToken(es.c, r) {
			es.end(t, finish{kind: finishAbort, msg: abortMessage})
			return
		}
		es.step(t)
	}
	es.end(n, finish{kind: finishLength})
}

// begin writes the events before the first token: the chat role deltas, and
// on /generate the only chunk of items that generate no token.
func (es *eventStream) begin() {
	for i := range es.r.items {
		it := &es.r.items[i]
		switch {
		case es.r.route == routeChat:
			es.emitChunk(it, true, 0, finish{})
		case es.r.route == routeGenerate && es.s.tokensOf(it) == 0:
			es.emitGenerate(it, 0, finish{kind: finishLength})
		}
	}
}

// step writes token t of every item still generating. A /generate chunk
// carries the cumulative text, and its finish_reason on the last token.
func (es *eventStream) step(t int) {
	for i := range es.r.items {
		it := &es.r.items[i]
		n := es.s.tokensOf(it)
		switch {
		case t >= n:
		case es.r.route != routeGenerate:
			es.emitChunk(it, false, t, finish{})
		case t+1 == n:
			es.emitGenerate(it, t+1, finish{kind: finishLength})
		default:
			es.emitGenerate(it, t+1, finish{})
		}
	}
}

// end writes the closing events after t token steps (-1: before the first
// event): on /generate an abort chunk for each unfinished item, on OpenAI
// routes each choice's finish chunk and the usage chunk if asked; then
// [DONE].
func (es *eventStream) end(t int, fin finish) {
	for i := range es.r.items {
		it := &es.r.items[i]
		unfinished := t < es.s.tokensOf(it)
		switch {
		case es.r.route != routeGenerate && (unfinished || fin.kind != finishAbort):
			es.emitChunk(it, false, -1, fin)
		case es.r.route != routeGenerate:
			es.emitChunk(it, false, -1, finish{kind: finishLength}) // done before the abort
		case fin.kind == finishAbort && unfinished:
			es.emitGenerate(it, max(t, 0), fin)
		}
	}
	if es.r.route != routeGenerate && es.r.includeUsage {
		es.buf = append(es.buf[:0], "data: "...)
		es.buf = es.s.appendUsageChunk(es.buf, es.r, fin)
		es.flush()
	}
	es.done()
}

// done writes the [DONE] event that ends every stream, having stopped
// watching the client, which may go once it has it.
func (es *eventStream) done() {
	if es.err != nil || !es.pass() {
		return
	}
	es.watch.unwatch()
	es.buf = append(es.buf[:0], "data: [DONE]\n\n"...)
	es.send(es.buf)
}

// fail ends a stream whose transfer failed. An abort finishes every item
// as aborted. A failed KV transfer is, on /generate, the failed item's chunk
// with the abort finish_reason and status_code 500, as SGLang streams a
// scheduler abort; on OpenAI routes an SSE error event.
func (es *eventStream) fail(f *failure) {
	if f.aborted {
		es.end(-1, finish{kind: finishAbort, msg: f.msg})
		return
	}
	if es.r.route == routeGenerate {
		es.emitGenerate(&es.r.items[f.item], 0, finish{kind: finishAbort, msg: f.msg, status: fasthttp.StatusInternalServerError})
	} else {
		es.buf = appendStreamError(es.buf[:0], fasthttp.StatusInternalServerError, "500", f.msg)
		es.write(es.buf)
	}
	es.done()
}

func (es *eventStream) emitGenerate(it *item, k int, fin finish) {
	es.buf = append(es.buf[:0], "data: "...)
	es.buf = es.s.appendGenerateItem(es.buf, es.r, it, k, fin)
	es.flush()
}

func (es *eventStream) emitChunk(it *item, role bool, t int, fin finish) {
	es.buf = append(es.buf[:0], "data: "...)
	es.buf = es.s.appendChunk(es.buf, es.r, it, role, t, fin)
	es.flush()
}

// flush ends the event in buf and writes it.
func (es *eventStream) flush() {
	es.buf = append(es.buf, "\n\n"...)
	es.write(es.buf)
}

// write writes one event, unless an earlier write failed or a fault
// stops it.
func (es *eventStream) write(b []byte) {
	if es.err == nil && es.pass() {
		es.send(b)
	}
}

// pass meets FaultCut and FaultStall before the next event; it reports
// false when the stream was cut.
func (es *eventStream) pass() bool {
	if es.s.interrupt(es.conn, es.c, es.events, &es.hold) {
		return true
	}
	es.err = errCut
	return false
}

// send writes one event. A write that fails on a connection the server did
// not close means the client left, whether or not the watch saw it first.
func (es *eventStream) send(b []byte) {
	n, err := es.w.Write(b)
	es.n += int64(n)
	es.err = err
	es.events++
	if err != nil && clientLeft(es.conn) {
		es.c.end(true)
	}
}
