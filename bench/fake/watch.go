package fake

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A started Server wraps every connection it accepts in a watchConn, for two
// things fasthttp does not offer.
//
// Noticing a client that goes away. SGLang aborts a request whose HTTP
// client disconnected, streamed or not: tokenizer_manager.py's
// _wait_one_response asks request.is_disconnected() every
// SGLANG_REQUEST_STATE_WAIT_TIMEOUT (4 s) while a non-stream request waits,
// and create_abort_task aborts a stream 2 s after its client left. fasthttp
// tells a handler nothing of the kind: RequestCtx.Done fires only on
// shutdown, and a disconnect shows up only as a failed write, which a
// request waiting for its KV cache never makes. So while a generate request
// runs, a background goroutine reads one byte from the connection, as
// net/http's connReader does (startBackgroundRead): a read error means the
// peer closed the connection, and the request is aborted at once, not
// seconds later as in SGLang, so tests need not wait. A byte that arrives instead belongs to
// the client's next, pipelined, request: it is kept and handed to fasthttp's
// next Read, so nothing is stolen, and the watch ends there (a client that
// pipelines is not gone). Ending a watch sets a read deadline in the past to
// wake the pending read, waits for it, and clears the deadline again, which
// is the deadline fasthttp leaves on a connection while a handler runs (no
// ReadTimeout). Like net/http, a client that half-closes its side after
// sending counts as gone.
//
// Telling a connection that serves a request from one whose answer is out.
// fasthttp marks a connection idle only once it has flushed the answer, a
// moment after the client may have read it, so busy counts the handlers and
// streams running on the connection, for CloseIdleConnections.

// aLongTimeAgo is a read deadline that wakes a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// watchListener wraps the connections its Listener accepts in watchConns.
type watchListener struct{ net.Listener }

func (ln watchListener) Accept() (net.Conn, error) {
	c, err := ln.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchConn{Conn: c}, nil
}

// watchConn is a server connection that can be watched for its peer going
// away. fasthttp reads it only between requests, and a watch only runs
// while a handler or a stream body runs, so the two never read at once.
type watchConn struct {
	net.Conn
	busy   atomic.Int32 // handlers and streams running on the connection
	closed atomic.Bool  // the server closed it: a read error then is no client leaving

	mu       sync.Mutex
	watched  bool  // a background read is pending or being stopped
	stopping bool  // the pending read is being woken on purpose
	hasByte  bool  // a byte read in the background, for the next Read
	b        byte  // that byte
	call     *call // the request the watch ends if the client goes
	reads    sync.WaitGroup

	// A delayed watch (Config.ClientWatchDelay) is pending until its timer,
	// made once per connection, fires.
	timer   *time.Timer
	pending *call
}

// Read returns the byte a watch read ahead, if any, before reading on.
// Once the server has closed the connection it reads nothing more, as a
// closed socket does: fasthttputil's pipe would still hand over what the
// peer sent before the close, and the server would then serve a request
// it can no longer answer, which a worker never does.
func (c *watchConn) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, net.ErrClosed
	}
	c.mu.Lock()
	if c.watched {
		c.mu.Unlock()
		panic("BUG: fake: a watched connection is read by fasthttp")
	}
	if c.hasByte && len(p) > 0 {
		p[0], c.hasByte = c.b, false
		c.mu.Unlock()
		return 1, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// Close marks the connection as closed by the server, then closes it.
func (c *watchConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

// watch starts a background read that ends cl, recording whether its
// client went away (the server did not close the connection itself), if
// the read fails before unwatch. It reports false, watching nothing, on a
// connection already watched or holding a pipelined byte. unwatch must be
// called before fasthttp reads the connection again, i.e. before the
// handler, or the stream body's WriteTo, returns.
func (c *watchConn) watch(cl *call, delay time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watched || c.hasByte || c.pending != nil {
		return false
	}
	if delay > 0 {
		// Short requests end before the timer: they never pay for the
		// background read's goroutine.
		c.pending = cl
		if c.timer == nil {
			c.timer = time.AfterFunc(delay, c.fire)
		} else {
			c.timer.Reset(delay)
		}
		return true
	}
	c.startLocked(cl)
	return true
}

// fire starts a delayed watch, unless unwatch came first.
func (c *watchConn) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.pending; cl != nil && !c.watched && !c.hasByte {
		c.pending = nil
		c.startLocked(cl)
	}
}

func (c *watchConn) startLocked(cl *call) {
	c.watched, c.stopping, c.call = true, false, cl
	c.reads.Add(1)
	go c.readAhead(cl)
}

// readAhead is the background read of a watch.
func (c *watchConn) readAhead(cl *call) {
	defer c.reads.Done()
	var b [1]byte
	n, err := c.Conn.Read(b[:])
	c.mu.Lock()
	if n > 0 {
		c.b, c.hasByte = b[0], true
	}
	stopping := c.stopping
	c.mu.Unlock()
	if n == 0 && err != nil && !(stopping && isTimeout(err)) {
		cl.end(!c.closed.Load())
	}
}

// isTimeout reports whether err is a read deadline passing, as unwatch
// makes it: on TCP os.ErrDeadlineExceeded, in memory fasthttputil's
// ErrTimeout.
func isTimeout(err error) bool {
	var te interface{ Timeout() bool } // fasthttputil's is no net.Error
	return errors.As(err, &te) && te.Timeout()
}

// unwatch wakes the pending read of the watch and waits for it to end. A
// read that fails otherwise than by the deadline meanwhile still counts:
// the client went away as the watch ended. It does nothing on a nil
// watchConn or one not watched, so it may be called more than once, from
// the goroutine serving the connection.
func (c *watchConn) unwatch() {
	if c == nil {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Lock()
	c.pending = nil
	if !c.watched || c.stopping {
		c.mu.Unlock()
		return
	}
	c.stopping = true
	c.mu.Unlock()
	_ = c.Conn.SetReadDeadline(aLongTimeAgo)
	c.reads.Wait()
	_ = c.Conn.SetReadDeadline(time.Time{})
	c.mu.Lock()
	c.watched, c.call = false, nil
	c.mu.Unlock()
}

// watch makes c end, as an abort does, when the client of conn goes away,
// recording it so that the request counts in Stats.ClientGone when it
// ends. It returns the watched connection, for unwatch, or nil when conn is
// nil or not a started server's (Handler mounted elsewhere), or already
// watched: then nothing is watched, and unwatch on nil does nothing.
func (s *Server) watch(conn net.Conn, c *call) *watchConn {
	wc, ok := conn.(*watchConn)
	if !ok || !wc.watch(c, s.cfg.ClientWatchDelay) {
		return nil
	}
	return wc
}

// markBusy and markIdle count a handler or stream running on conn.
func markBusy(conn net.Conn) {
	if wc, ok := conn.(*watchConn); ok {
		wc.busy.Add(1)
	}
}

func markIdle(conn net.Conn) {
	if wc, ok := conn.(*watchConn); ok {
		wc.busy.Add(-1)
	}
}

// clientLeft reports whether conn, broken, was a started server's that the
// server did not close: its client went away.
func clientLeft(conn net.Conn) bool {
	wc, ok := conn.(*watchConn)
	return ok && !wc.closed.Load()
}

// serving reports whether a handler or stream runs on conn.
func serving(conn net.Conn) bool {
	wc, ok := conn.(*watchConn)
	return ok && wc.busy.Load() > 0
}
