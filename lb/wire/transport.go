package wire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// Call is what Transport needs of a request it sends: the call's Leg (a
// Call embeds one, which gives it the leg method) and two decisions that
// belong to the caller.
type Call interface {
	leg() *Leg
	// ReadAnswer reads the whole body of resp, at most limit bytes, into
	// memory the caller accounts for, and makes it resp's body: a
	// worker's answer is as large as a client asks it to be.
	ReadAnswer(resp *fasthttp.Response, limit int) error
	// Dropped is told that the pooled connection the request went out on
	// was closed by the worker before any answer (err). It returns nil to
	// have the request resent once on a fresh connection, or the call's
	// error instead.
	Dropped(hc *fasthttp.HostClient, err error) error
}

// callKey is the Request user-value key under which a Call reaches
// Transport.
type callKey struct{}

// Bind makes Transport send req as c's leg.
func Bind(req *fasthttp.Request, c Call) { req.SetUserValue(callKey{}, c) }

// Leg is the transport's part of one call to a worker: its deadlines, its
// cancellation, and a streamed answer's body, which outlives the round
// trip. The zero value is ready to use; Reset readies it for another call.
type Leg struct {
	// Deadline bounds the whole call, body included; FirstByteBy, when
	// set, bounds the wait for a stream's first byte.
	Deadline    time.Time
	FirstByteBy time.Time
	// Stream hands the answer's body to the caller (Body) instead of
	// reading it whole (Call.ReadAnswer).
	Stream bool
	Cancel Canceller

	body    io.Reader
	chunked chunkedBody
	// release, set while a streamed body is consumed, gives the
	// connection back.
	release func(clean bool)
}

func (l *Leg) leg() *Leg { return l }

// Body is a streamed answer's body once its headers are in: a chunked one
// (an event stream's) decoded in place, straight from the socket, else
// fasthttp's.
func (l *Leg) Body() io.Reader { return l.body }

// Streaming reports whether the leg holds a streamed body, and with it its
// connection, until EndBody.
func (l *Leg) Streaming() bool { return l.release != nil }

// EndBody gives the connection of a streamed answer back, reusable when
// clean (the body was read to its end).
func (l *Leg) EndBody(clean bool) {
	l.release(clean)
	l.release = nil
}

// Reset readies the leg for another call. A streamed body must have been
// ended.
func (l *Leg) Reset() {
	if l.release != nil {
		panic("BUG: a leg was reset with a stream still open")
	}
	l.Deadline, l.FirstByteBy, l.Stream, l.body = time.Time{}, time.Time{}, false, nil
	l.chunked = chunkedBody{}
	l.Cancel.Reset()
}

// Transport is the RoundTripper of every worker HostClient. It is
// fasthttp's own round trip plus what a pairing proxy needs:
//   - a call can be cancelled from another goroutine (Leg.Cancel): its
//     connection is closed, which unblocks any read or write at once
//     (fasthttp's Do cannot be interrupted otherwise);
//   - a streamed body outlives RoundTrip: the leg keeps the connection
//     until its consumer ends the stream (Leg.EndBody), with no goroutine
//     waiting on it;
//   - a request that dies on a reused connection before any response byte
//     is reported as ErrStaleConn, which RetryStaleConn resends once,
//     unless the Call's Dropped says otherwise;
//   - deadlines are rounded up to Steps, so that a pooled connection
//     keeps the one it has.
//
// Requests bound to no Call (Bind) take fasthttp's default path unchanged.
type Transport struct{ Steps Steps }

func (t Transport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	c, _ := req.UserValue(callKey{}).(Call)
	if c == nil {
		return fasthttp.DefaultTransport.RoundTrip(hc, req, resp)
	}
	l := c.leg()
	wait := time.Until(l.Deadline)
	if wait <= 0 {
		return false, fasthttp.ErrTimeout
	}
	cc, err := hc.AcquireConn(wait, false)
	if err != nil {
		return false, acquireFailed(err)
	}
	if err := l.arm(cc.Conn(), t.Steps); err != nil {
		hc.CloseConn(cc)
		return false, err
	}
	reused := !cc.LastUseTime().IsZero()
	if err := send(hc, cc.Conn(), req); err != nil {
		l.Cancel.detach()
		hc.CloseConn(cc)
		return l.failed(c, hc, err, reused)
	}
	br, err := readHeader(hc, cc.Conn(), resp)
	reusable := err == nil && !resp.ConnectionClose()
	if err == nil && l.Stream && resp.BodyStream() != nil {
		// The consumer reads the body, then gives the connection back,
		// clean when it read to the end.
		l.startBody(hc, resp, cc.Conn(), br)
		l.release = func(clean bool) {
			clean = l.stopBody(hc, resp, br, clean)
			// A cancel may have closed the connection as the body ended.
			if closed := l.Cancel.detach(); clean && reusable && !closed {
				hc.ReleaseConn(cc)
			} else {
				hc.CloseConn(cc)
			}
		}
		return false, nil
	}
	if err == nil {
		// Once the answer began, the worker has the request: a failure
		// now is no stale connection, and the request is not sent again.
		err, reused = c.ReadAnswer(resp, hc.MaxResponseBodySize), false
	}
	// A cancel may have closed the connection just as the answer was read:
	// the answer stands, but the connection must not go back to the pool.
	closed := l.Cancel.detach()
	hc.ReleaseReader(br)
	if err == nil && reusable && !closed {
		hc.ReleaseConn(cc)
		return false, nil
	}
	hc.CloseConn(cc)
	if err != nil {
		return l.failed(c, hc, err, reused)
	}
	return false, nil
}

// acquireFailed is the error of a call that got no connection: the pool's
// own limits as they are, any other failure as the worker unreachable.
func acquireFailed(err error) error {
	if errors.Is(err, fasthttp.ErrNoFreeConns) || errors.Is(err, fasthttp.ErrTimeout) {
		return err
	}
	return &UnreachableError{err}
}

// Redial dials a fresh connection for hc within the time left to l, and
// leaves it idle in the pool: what a caller does instead of resending a
// request on a pooled connection found closed, when the worker may have
// restarted. It returns nil once the connection is made.
func (l *Leg) Redial(hc *fasthttp.HostClient) error {
	wait := time.Until(l.Deadline)
	if wait <= 0 {
		return fasthttp.ErrTimeout
	}
	cc, err := hc.AcquireConn(wait, false)
	if err != nil {
		return acquireFailed(err)
	}
	hc.ReleaseConn(cc)
	return nil
}

// arm gives the leg's connection its deadlines and its cancellation.
func (l *Leg) arm(conn net.Conn, steps Steps) error {
	deadline := steps.Round(l.Deadline)
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	readBy := deadline
	if !l.FirstByteBy.IsZero() {
		// The relay extends it for each event once the stream flows.
		readBy = l.FirstByteBy
	}
	// Cancelled before it began, or a connection whose deadline cannot be
	// set: rare either way, and closing is right for both.
	return l.Cancel.attach(conn, readBy)
}

// send writes req to conn.
func send(hc *fasthttp.HostClient, conn net.Conn, req *fasthttp.Request) error {
	wc, _ := conn.(*workerConn)
	if wc != nil {
		wc.stageRequest(true)
	}
	bw := hc.AcquireWriter(conn)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if wc != nil {
		wc.stageRequest(false)
	}
	return err
}

// readHeader reads the answer's header from conn into resp, its body left
// to stream: a whole answer is read by Call.ReadAnswer, within the
// caller's memory, not by fasthttp, which would allocate the length it
// declares at once. The reader holds what came after the header.
func readHeader(hc *fasthttp.HostClient, conn net.Conn, resp *fasthttp.Response) (*bufio.Reader, error) {
	resp.StreamBody = true
	if hc.DisableHeaderNamesNormalizing {
		resp.Header.DisableNormalizing()
	}
	br := hc.AcquireReader(conn)
	return br, resp.ReadLimitBody(br, hc.MaxResponseBodySize)
}

// startBody makes the streamed body of resp the leg's body: a chunked one
// (an event stream's) decoded by l.chunked, straight from conn once br is
// drained; any other by fasthttp, from br. stopBody ends it, and reports
// whether the connection is clean for reuse (and clean was).
func (l *Leg) startBody(hc *fasthttp.HostClient, resp *fasthttp.Response, conn net.Conn, br *bufio.Reader) {
	if resp.Header.ContentLength() == -1 {
		_ = resp.CloseBodyStream()
		l.chunked.start(conn, br, hc)
		l.body = &l.chunked
		return
	}
	l.body = resp.BodyStream()
}

func (l *Leg) stopBody(hc *fasthttp.HostClient, resp *fasthttp.Response, br *bufio.Reader, clean bool) bool {
	if l.body == &l.chunked {
		clean = clean && l.chunked.done()
		l.chunked.releaseReader()
		return clean
	}
	_ = resp.CloseBodyStream()
	hc.ReleaseReader(br)
	return clean
}

// failed turns a round-trip error on hc into the one the caller should see.
func (l *Leg) failed(c Call, hc *fasthttp.HostClient, err error, reused bool) (bool, error) {
	if reason := l.Cancel.Err(); reason != nil {
		return false, reason
	}
	if IsTimeout(err) {
		if reason := l.Cancel.capPassed(); reason != nil {
			return false, reason // the caller gave up on the call
		}
	}
	if reused && IsConnDrop(err) {
		if err := c.Dropped(hc, err); err != nil {
			return false, err
		}
		return true, fmt.Errorf("%w: %w", ErrStaleConn, err)
	}
	if IsTimeout(err) {
		return false, fasthttp.ErrTimeout
	}
	return false, err
}
