package lb

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// errStaleConn marks a request that died on a reused pooled connection before
// any response byte arrived: the worker had closed the idle connection. Such
// a request never reached the worker, so it is resent once on a fresh one.
var errStaleConn = errors.New("pooled connection was closed by the worker")

// unreachableError is the error of a call that could not connect to its
// worker: the request never reached it and may go to another worker.
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// isUnreachable reports whether err is a call's failure to connect.
func isUnreachable(err error) bool {
	var u *unreachableError
	return errors.As(err, &u)
}

// Moving a connection's deadline costs two clock reads and a runtime timer
// update, and each request set a read and a write deadline on each of its
// two connections: with clock reads, 2 % of pdlb's CPU in the non-stream
// profile. A pooled connection serves request after request, each with a
// deadline of its own a few milliseconds after the last. So the deadline a
// connection is given is the request's rounded up to deadlineStep, the same
// for all the requests of one step, and workerConn skips setting the
// deadline a connection has already: with 64 clients, 92 % of them. A
// request may then run up to deadlineStep past its timeout.
const deadlineStep = 100 * time.Millisecond

// wireDeadline is t rounded up to the next of the steps counted from
// deadlineEpoch. It is measured on the monotonic clock, as deadlines are:
// rounded on the wall clock, deadlines of one step were often apart by the
// nanoseconds between the two clock reads of a time.Now, so not equal. No
// deadline (the zero time) stays none.
func wireDeadline(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	d := t.Sub(deadlineEpoch)
	if rem := d % deadlineStep; rem > 0 {
		d += deadlineStep - rem
	}
	return deadlineEpoch.Add(d)
}

var deadlineEpoch = time.Now()

// callKey is the Request user-value key under which a *call reaches transport.
type callKey struct{}

// transport is the RoundTripper of every backend HostClient. It is fasthttp's
// own round trip plus what a pairing proxy needs:
//   - a call can be cancelled from another goroutine: its connection is
//     closed, which unblocks any read or write at once (fasthttp's Do cannot
//     be interrupted otherwise);
//   - a streamed body outlives RoundTrip: the call keeps the connection
//     until its consumer ends the stream (call.endStream), with no goroutine
//     waiting on it;
//   - a request that dies on a reused connection before any response byte is
//     reported as errStaleConn, which retryStaleConn resends once (but for
//     a decode call that tells a prefill DP rank: redial).
//
// Requests that carry no *call (the fan-out routes) take fasthttp's default
// path unchanged.
type transport struct{}

func (transport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	c, _ := req.UserValue(callKey{}).(*call)
	if c == nil {
		return fasthttp.DefaultTransport.RoundTrip(hc, req, resp)
	}
	wait := time.Until(c.deadline)
	if wait <= 0 {
		return false, fasthttp.ErrTimeout
	}
	cc, err := hc.AcquireConn(wait, false)
	if err != nil {
		if errors.Is(err, fasthttp.ErrNoFreeConns) || errors.Is(err, fasthttp.ErrTimeout) {
			return false, err
		}
		return false, &unreachableError{err}
	}
	if err := c.arm(cc.Conn()); err != nil {
		hc.CloseConn(cc)
		return false, err
	}
	reused := !cc.LastUseTime().IsZero()
	if err := send(hc, cc.Conn(), req); err != nil {
		c.cancel.detach()
		hc.CloseConn(cc)
		return c.failed(hc, err, reused)
	}
	// A whole answer is read by readAnswer, within the body memory, not
	// by fasthttp, which would allocate the length it declares at once.
	resp.StreamBody = true
	if hc.DisableHeaderNamesNormalizing {
		resp.Header.DisableNormalizing()
	}
	br := hc.AcquireReader(cc.Conn())
	err = resp.ReadLimitBody(br, hc.MaxResponseBodySize)
	reusable := err == nil && !resp.ConnectionClose()
	if err == nil && c.stream && resp.BodyStream() != nil {
		// The consumer reads the body, then gives the connection back,
		// clean when it read to the end.
		c.startBody(hc, cc.Conn(), br)
		c.releaseBody = func(clean bool) {
			clean = c.stopBody(hc, br, clean)
			// A cancel may have closed the connection as the body ended.
			if closed := c.cancel.detach(); clean && reusable && !closed {
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
		err, reused = c.readAnswer(hc.MaxResponseBodySize), false
	}
	// A cancel may have closed the connection just as the answer was read:
	// the answer stands, but the connection must not go back to the pool.
	closed := c.cancel.detach()
	hc.ReleaseReader(br)
	if err == nil && reusable && !closed {
		hc.ReleaseConn(cc)
		return false, nil
	}
	hc.CloseConn(cc)
	if err != nil {
		return c.failed(hc, err, reused)
	}
	return false, nil
}

// arm gives the call's connection its deadlines and its cancellation.
func (c *call) arm(conn net.Conn) error {
	deadline := wireDeadline(c.deadline)
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return err
	}
	readBy := deadline
	if !c.firstByteBy.IsZero() {
		// The relay extends it for each event once the stream flows.
		readBy = c.firstByteBy
	}
	// Cancelled before it began, or a connection whose deadline cannot be
	// set: rare either way, and closing is right for both.
	return c.cancel.attach(conn, readBy)
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

// startBody makes the streamed body of the call's answer c.respBody: a
// chunked one (an event stream's) decoded by c.chunked, straight from conn
// once br is drained; any other by fasthttp, from br. stopBody ends it,
// and reports whether the connection is clean for reuse (and clean was).
func (c *call) startBody(hc *fasthttp.HostClient, conn net.Conn, br *bufio.Reader) {
	if c.resp.Header.ContentLength() == -1 {
		_ = c.resp.CloseBodyStream()
		c.chunked.start(conn, br, hc)
		c.respBody = &c.chunked
		return
	}
	c.respBody = c.resp.BodyStream()
}

func (c *call) stopBody(hc *fasthttp.HostClient, br *bufio.Reader, clean bool) bool {
	if c.respBody == &c.chunked {
		clean = clean && c.chunked.done()
		c.chunked.releaseReader()
		return clean
	}
	_ = c.resp.CloseBodyStream()
	hc.ReleaseReader(br)
	return clean
}

// failed turns a round-trip error on hc into the one the caller should see.
func (c *call) failed(hc *fasthttp.HostClient, err error, reused bool) (bool, error) {
	if reason := c.cancel.err(); reason != nil {
		return false, reason
	}
	if isTimeout(err) && c.cancel.limitPassed() {
		// pdlb gave up on the call (capRead): not the worker's failure.
		return false, errGaveUp
	}
	if reused && isConnDrop(err) {
		// The worker closed a pooled connection: it has closed the other
		// idle ones too (its keep-alive expired, or it restarted), so the
		// resend must not take another of them.
		suspectRestart(c.backend)
		if c.tellsPrefillRank() {
			return false, c.redial(hc, err)
		}
		return true, fmt.Errorf("%w: %w", errStaleConn, err)
	}
	if isTimeout(err) {
		return false, fasthttp.ErrTimeout
	}
	return false, err
}

// isConnDrop reports whether err is the peer closing or resetting the
// connection before any response byte.
func isConnDrop(err error) bool {
	return err == io.EOF || errors.Is(err, fasthttp.ErrConnectionClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// retryStaleConn is the HostClient.RetryIfErr: only a request that never
// reached the worker is resent, and only once. Every other failure goes back
// to the exchange, which knows whether a retry is safe.
func retryStaleConn(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	return false, attempts == 1 && errors.Is(err, errStaleConn)
}

// canceller lets one goroutine abort a call running in another by closing the
// call's connection. The zero value is ready to use.
type canceller struct {
	mu     sync.Mutex
	conn   net.Conn
	reason error
	// over is set once the call has finished; cancelling it is then a no-op,
	// so reason only ever names what interrupted a running call.
	over bool
	// limit, when set, is a last read deadline that no later one overrides
	// (capRead).
	limit time.Time
}

// attach records conn as the call's connection and gives it its read
// deadline (held to limit), or returns the reason if the call was cancelled
// already. Setting the deadline here, under the lock, keeps a capRead that
// comes while the call connects from being lost.
func (cl *canceller) attach(conn net.Conn, readBy time.Time) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.reason != nil {
		return cl.reason
	}
	if err := conn.SetReadDeadline(cl.limited(readBy)); err != nil {
		return err
	}
	cl.conn = conn
	return nil
}

func (cl *canceller) limited(t time.Time) time.Time {
	if !cl.limit.IsZero() && cl.limit.Before(t) {
		return cl.limit
	}
	return t
}

// detach forgets the call's connection, and reports whether a cancel has
// closed it meanwhile: a connection is attached only to a call not
// cancelled yet, and a cancel closes the one attached.
func (cl *canceller) detach() (closed bool) {
	cl.mu.Lock()
	closed = cl.conn != nil && cl.reason != nil
	cl.conn = nil
	cl.mu.Unlock()
	return closed
}

// cancel aborts the call with reason; only the first reason is kept. It
// reports whether the call had its connection, so the worker may have
// started on the request.
func (cl *canceller) cancel(reason error) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.reason != nil || cl.over {
		return false
	}
	cl.reason = reason
	if cl.conn == nil {
		return false
	}
	_ = cl.conn.Close()
	return true
}

// end marks the call finished.
func (cl *canceller) end() {
	cl.mu.Lock()
	cl.over = true
	cl.mu.Unlock()
}

// readBy moves the read deadline of the call's connection, if it has one,
// held to the limit.
func (cl *canceller) readBy(t time.Time) {
	cl.mu.Lock()
	if cl.conn != nil {
		_ = cl.conn.SetReadDeadline(cl.limited(t))
	}
	cl.mu.Unlock()
}

// capRead gives the call, unless it is over, a last read deadline d from
// now, at once or once it connects. (The clock is read only when needed:
// the call is usually over.)
func (cl *canceller) capRead(d time.Duration) {
	cl.mu.Lock()
	if !cl.over {
		cl.limit = time.Now().Add(d)
		if cl.conn != nil {
			_ = cl.conn.SetReadDeadline(cl.limit)
		}
	}
	cl.mu.Unlock()
}

// limitPassed reports whether the capRead deadline has passed.
func (cl *canceller) limitPassed() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return !cl.limit.IsZero() && !time.Now().Before(cl.limit)
}

// err returns why the call was cancelled, or nil.
func (cl *canceller) err() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.reason
}

func (cl *canceller) reset() {
	cl.mu.Lock()
	cl.conn, cl.reason, cl.over, cl.limit = nil, nil, false, time.Time{}
	cl.mu.Unlock()
}

// readAnswer reads the body of the call's answer, if it has one, into
// c.answer, at most limit bytes, taking its memory from the body memory:
// a worker's answer is as large as a client asks it to be (max_new_tokens,
// n, return_logprob), and sixteen answers of 190 MB ran pdlb out of
// memory. It becomes the response's body, which the exchange reads.
func (c *call) readAnswer(limit int) error {
	stream := c.resp.BodyStream()
	if stream == nil {
		return nil // none: a HEAD, a 204
	}
	declared := c.resp.Header.ContentLength()
	if declared < 0 {
		declared = -1 // chunked, or until the connection closes
	}
	if declared > limit {
		_ = c.resp.CloseBodyStream()
		return fasthttp.ErrBodyTooLarge
	}
	// A worker's length is its answer's, not a hostile client's claim: the
	// buffer takes it at once, and leaves no garbage of buffers outgrown,
	// which a burst of large answers would pile up faster than the
	// collector frees it.
	if declared > minPooledBody && !c.answer.growTo(declared, c.x.s.memory) {
		_ = c.resp.CloseBodyStream()
		return errNoBodyMemory
	}
	err := c.answer.fill(stream, declared, limit, c.x.s.memory, nil)
	_ = c.resp.CloseBodyStream()
	if err != nil {
		return err
	}
	c.resp.SetBodyRaw(c.answer.buf)
	return nil
}
