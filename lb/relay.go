package lb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"pdlb/lb/wire"

	"github.com/valyala/fasthttp"
)

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
	// did not accept it (wire.Listener): the relay may then not send the
	// body's end itself.
	cc *wire.ClientConn
	// buf[start:end] holds bytes read but not yet written, between
	// wire.ChunkHeadroom bytes before and wire.ChunkTailroom after.
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

const (
	// relayBufSize is the relay's starting buffer; it grows for larger
	// events up to maxEventSize, past which bytes are passed on as they come.
	relayBufSize = 2 << 10
	maxEventSize = 4 << 20
)

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
	r.start, r.end = wire.ChunkHeadroom, wire.ChunkHeadroom
	for r.end == r.start {
		n, err := body.Read(r.buf[r.end : len(r.buf)-wire.ChunkTailroom])
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

// firstEventFailure returns the first event the decode streamed, and
// whether it is a failure instead of tokens (isFailureEvent).
func (r *relay) firstEventFailure() ([]byte, bool) {
	first, _ := cutEvent(r.buf[r.start:r.end])
	return first, isFailureEvent(first)
}

// SupportsBodyWriteTo tells fasthttp to use WriteTo, which frames one chunk
// per event, instead of Read.
func (r *relay) SupportsBodyWriteTo() bool { return true }

// writeChunk writes buf[from:to] to the client as one chunk, framed in
// place (wire.WriteChunk); with last, the body's end goes with it.
func (r *relay) writeChunk(from, to int, last bool) (int, error) {
	n, err := wire.WriteChunk(r.client, r.buf, from, to, last)
	if last && err == nil {
		r.cc.LastChunkSent()
	}
	return n, err
}

// ended reports whether the events just taken are the decode's last: it
// sent its [DONE] and the body's end with them, and nothing else is left.
// The relay may then send the body's end itself, with them.
func (r *relay) ended() bool {
	return r.readErr == io.EOF && r.sawDone && r.start == r.end && r.cc != nil
}

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
			n, err := r.writeBatch(w, from, batch)
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
	n, err := r.writeEnd(w)
	return written + n, err
}

// writeBatch writes batch, the complete events taken from buf[from:], as
// one chunk: framed by the relay itself once fasthttp has written the
// headers and the events are as the decode sent them, else through w.
func (r *relay) writeBatch(w io.Writer, from int, batch []byte) (int, error) {
	r.pushWriteDeadline()
	if r.framing && len(r.prefillLogprobs) == 0 {
		return r.writeChunk(from, r.start, r.ended())
	}
	n, err := w.Write(batch)
	r.framing = r.client != nil
	return n, err
}

// writeEnd ends the stream once the decode's has ended: its last event,
// if whole, and unless the decode sent its [DONE], an error event and
// [DONE] of pdlb's.
func (r *relay) writeEnd(w io.Writer) (int64, error) {
	var written int64
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

// nextEvent returns the next complete event (through its blank line), or
// nil when none is buffered. An event larger than maxEventSize is returned
// in pieces as it comes, unmerged.
func (r *relay) nextEvent() []byte {
	pending := r.buf[r.start:r.end]
	if i := eventEnd(pending); i > 0 {
		r.start += i
		return pending[:i]
	}
	if r.start == wire.ChunkHeadroom && r.end == len(r.buf)-wire.ChunkTailroom && len(r.buf) >= maxEventSize {
		r.start = r.end
		return pending
	}
	return nil
}

// noteDone records the decode's [DONE].
func (r *relay) noteDone(ev []byte) {
	if data, _, ok := eventData(ev); ok && bytes.Equal(data, doneData) {
		r.sawDone = true
	}
}

// pushWriteDeadline gives the client ClientStallTimeout for the next write.
//
// A write waits only when the socket's buffers are full: its client is
// that far behind. A stream holds its decode connection while it waits,
// so the wait is bounded by this, not by the ClientWriteTimeout of a
// non-stream answer, which holds no worker: a client that stops reading
// is let go within seconds, its stream ended through clientGone (issue 19,
// item 6). Until the buffers fill, pdlb keeps reading the decode as a
// reading client's stream would.
//
// Moving a deadline costs a runtime timer update; at tens of thousands of
// events a second, doing it for every event shows. So a deadline is pushed
// back only once half its timeout has passed: the time allowed is then
// between half and all of the timeout (here and in fill).
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
		r.readBy = earliest(d.Deadline, now.Add(idle))
		d.Cancel.ReadBy(r.readBy)
	}
	if r.start > wire.ChunkHeadroom {
		r.end = wire.ChunkHeadroom + copy(r.buf[wire.ChunkHeadroom:], r.buf[r.start:r.end])
		r.start = wire.ChunkHeadroom
	}
	if r.end == len(r.buf)-wire.ChunkTailroom {
		grown := make([]byte, 2*len(r.buf))
		copy(grown, r.buf[:r.end])
		r.buf = grown
	}
	n, err := r.body.Read(r.buf[r.end : len(r.buf)-wire.ChunkTailroom])
	r.end += n
	if err != nil {
		r.readErr = err
	}
}

// writeFailed ends the stream after a write to its client failed: the
// client went away, or stopped reading for ClientStallTimeout (a timeout),
// which only a debug line tells apart, as a client can make as many as it
// likes.
func (r *relay) writeFailed(err error) {
	if wire.IsTimeout(err) {
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
	case isCut(d.Cancel.Err()):
		status, rsn, msg = classify(d.Cancel.Err(), d.backend.role, d.backend.addr)
	case errors.As(d.Cancel.Err(), &peer) && peer.role == rolePrefill:
		// The prefill failed just before the decode's first event was
		// seen (after it, a prefill no longer cancels the decode); its
		// call is finishing now.
		x.waitPrefill()
		status, _, msg = x.prefill.describe()
	case r.readErr != io.EOF:
		status, _, msg = classify(r.readErr, d.backend.role, d.backend.addr)
		switch {
		case wire.IsConnDrop(r.readErr) || errors.Is(r.readErr, io.ErrUnexpectedEOF):
			msg = "decode backend " + d.backend.addr + " closed the connection in the middle of the stream"
		case wire.IsTimeout(r.readErr) && !x.s.cfg.Now().Before(d.Deadline):
			// The decode was streaming; the request's time ran out.
			msg = "the stream from decode backend " + d.backend.addr + " ran past the request's time limit (--request-timeout-secs)"
		case wire.IsTimeout(r.readErr):
			msg = "decode backend " + d.backend.addr + " sent no event within " + x.s.cfg.StreamIdleTimeout.String() + " (--stream-idle-timeout-secs)"
		}
		if d.Cancel.Err() == nil { // counts against the decode
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
// request and lets go of the relay's reference to the exchange (hold).
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
