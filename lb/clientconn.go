package lb

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"pdlb/health"
)

// A client that goes away while pdlb waits for a non-stream answer must not
// leave both workers generating for nobody. fasthttp says nothing until it
// writes the answer, so pdlb watches the client itself, as Go's net/http
// does: a background read of one byte from the connection ends with an
// error when the client closes it. The byte it may read instead belongs to
// the client's next request and is handed back to fasthttp. Watching costs
// a goroutine, so it starts only once a request has waited watchAfter:
// short requests never pay for it.
const watchAfter = time.Second

// watchListener wraps each accepted connection in a clientConn. An accept
// that fails for want of resources (out of file descriptors, say, under a
// flood of connections) is tried again after a pause, as Go's net/http
// does: fasthttp would take it for the listener's end and stop serving.
// Each is admitted into budget first, or refused (connlimit.go).
type watchListener struct {
	net.Listener
	log    *zerolog.Logger
	budget *connBudget
}

func (l watchListener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			cc := newClientConn(c)
			if l.budget.admit(cc) {
				return cc, nil
			}
			l.budget.refuse(c)
			continue
		}
		if !acceptMayRecover(err) {
			return nil, err
		}
		pause = min(max(2*pause, 5*time.Millisecond), time.Second)
		l.log.Error().Err(err).Dur("retry_in", pause).Msg("cannot accept a connection")
		time.Sleep(pause)
	}
}

// acceptMayRecover reports whether a failed accept may succeed later: the
// process or system ran out of descriptors or memory, or a client left
// before it was accepted.
func acceptMayRecover(err error) bool {
	return health.OutOfResources(err) || errors.Is(err, syscall.ECONNABORTED)
}

// newClientConn wraps a connection pdlb accepted, as watchListener does.
func newClientConn(c net.Conn) *clientConn {
	cc := &clientConn{Conn: c, raw: rawConn(c)}
	cc.readSocket = cc.readOnce
	return cc
}

// clientConn is a client connection that can be watched for the client
// going away while fasthttp is not reading from it (during a handler), and
// that reads each request at once although fasthttp asks for its first
// byte alone.
type clientConn struct {
	net.Conn
	// raw reads the socket without the net package's buffering rules; nil
	// for connections without a descriptor (in-memory ones in tests).
	raw syscall.RawConn
	// readSocket is readOnce, bound once: raw.Read takes a func, and a
	// closure over readAhead's locals would cost three allocations a
	// request. got is what its last call read.
	readSocket func(fd uintptr) bool
	got        socketRead

	mu      sync.Mutex
	stash   byte
	stashed bool
	// ahead holds bytes read before fasthttp asked for them, in a buffer of
	// aheadPool; nil when there are none.
	ahead    []byte
	aheadBuf *[]byte
	// done is closed when the running watch ends; nil when none runs.
	done chan struct{}

	// endSent is set when a stream's relay has written the body's end
	// itself: the end fasthttp then writes is dropped. Only the
	// connection's own goroutine, on which fasthttp writes and the relay
	// runs, touches it.
	endSent bool

	// readBy is the read deadline fasthttp last asked for, armed the one
	// the socket has (see armRead); writeBy is the socket's write deadline.
	// Only the connection's own goroutine, on which fasthttp reads and
	// writes, the handler runs and the relay writes, touches them.
	readBy, armed, writeBy time.Time

	// framed is set while a chunked body is read: wireRead is then what
	// its reads took from the socket, wireLimit what they may take
	// (limitWire). Only the connection's own goroutine touches them.
	framed              bool
	wireRead, wireLimit int64

	// holdNext says the answer about to be written takes two writes, and
	// held is the first, held back for the second (see holdLargeAnswer);
	// pair sends both. The connection's own goroutine alone touches them.
	holdNext bool
	held     *[]byte
	pair     twoWrites

	// budget is the connBudget that admitted the connection, nil for one
	// made otherwise (tests). Its lock guards the rest: counted while the
	// connection has its place in it; waitsFor what it waits for from its
	// client; list is the budget's list the connection is on, if any, and
	// prev and next its neighbours there.
	budget   *connBudget
	counted  bool
	waitsFor waitsFor
	// evicted is set when the budget closed the connection to make room.
	evicted    atomic.Bool
	list       *connList
	prev, next *clientConn
}

// Close closes the connection and gives its place in the budget back.
// fasthttp closes each connection it served; pdlb closes some itself
// before (dropClient, handleParseError), so Close may come twice.
func (c *clientConn) Close() error {
	if c.budget != nil {
		c.budget.release(c)
	}
	return c.Conn.Close()
}

// fasthttp moves a keep-alive connection's read deadline twice a request:
// to its idle timeout before the first byte, to its read timeout after it.
// Each move costs two clock reads and a runtime timer update, yet the
// second rarely matters: the first read brings the whole request (see
// readAhead), and it is the next request's move that the socket's next
// wait needs. So SetReadDeadline only records the deadline, and a read
// that goes to the socket first gives it the one recorded, rounded up as
// a worker connection's is (wireDeadline): with 64 clients, one request
// in 70 moves it. A client may then be let go up to deadlineStep late.
func (c *clientConn) SetReadDeadline(t time.Time) error {
	c.readBy = t
	return nil
}

// SetWriteDeadline moves the write deadline, rounded up to a step as a
// worker connection's is, unless the socket has it already: fasthttp gives
// each answer ClientWriteTimeout, and the relay moves it on as a stream's
// events go out.
func (c *clientConn) SetWriteDeadline(t time.Time) error {
	return moveDeadline(c.Conn, writeDeadline, &c.writeBy, wireDeadline(t))
}

func (c *clientConn) SetDeadline(t time.Time) error {
	c.readBy = t
	return c.SetWriteDeadline(t)
}

// armRead gives the socket the read deadline last asked for, unless it has
// it already.
func (c *clientConn) armRead() error {
	return moveDeadline(c.Conn, readDeadline, &c.armed, wireDeadline(c.readBy))
}

// With ReduceMemoryUsage, which keeps idle connections from holding a read
// buffer, fasthttp waits for each keep-alive request by reading one byte,
// then takes a buffer and reads the rest: two reads where one would do, a
// system call per request, which showed in the non-stream profile. So a
// read that small reads the whole request into a pooled buffer instead,
// taken only once the socket has data: a connection waiting for its next
// request still holds no buffer.
const (
	aheadSize    = 4 << 10
	maxAheadRead = 16 // a read this short reads ahead
)

var aheadPool = sync.Pool{New: func() any {
	b := make([]byte, aheadSize)
	return &b
}}

// Read returns the bytes read ahead first.
func (c *clientConn) Read(p []byte) (int, error) {
	n, err := c.read(p)
	if c.framed {
		if c.wireRead += int64(n); c.wireRead > c.wireLimit && err == nil {
			err = errFramingTooLarge
		}
	}
	return n, err
}

// errFramingTooLarge ends the read of a chunked body whose framing (chunk
// sizes, extensions) outgrew its data: fasthttp reads a chunk's extensions
// without a bound, and 10 MB of them a chunk cost pdlb 33 CPU-seconds for a
// body of a kilobyte.
var errFramingTooLarge = errors.New("the chunked body's framing (chunk size lines and extensions) is far larger than its data")

// startWire starts counting what the reads of a chunked body take from the
// socket; limitWire bounds it, before a read of the body's data that
// holds data bytes already and room for as many more: the body's bytes on
// the wire may be chunkFramingRatio times its data, and maxChunkFraming
// more (size lines, extensions, bytes read ahead into fasthttp's buffer),
// as Go's net/http bounds a chunked body's "non-data". unlimitWire stops
// counting. Only the connection's goroutine, which reads the body, calls
// them.
func (c *clientConn) startWire() { c.framed, c.wireRead = true, 0 }

func (c *clientConn) limitWire(data, room int) {
	c.wireLimit = int64(chunkFramingRatio*(data+room) + maxChunkFraming)
}

func (c *clientConn) unlimitWire() { c.framed = false }

const (
	chunkFramingRatio = 16
	maxChunkFraming   = 64 << 10
)

func (c *clientConn) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.held != nil {
		// fasthttp writes the second part before it reads again, so this
		// is a safeguard: a client waiting for the whole answer would
		// send nothing more.
		if _, err := c.writeHeld(nil); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		if len(c.ahead) == 0 {
			aheadPool.Put(c.aheadBuf)
			c.ahead, c.aheadBuf = nil, nil
		}
		c.mu.Unlock()
		return n, nil
	}
	if c.stashed {
		p[0], c.stashed = c.stash, false
		c.mu.Unlock()
		return 1, nil
	}
	c.mu.Unlock()
	if err := c.armRead(); err != nil {
		return 0, err
	}
	if len(p) > maxAheadRead || c.raw == nil {
		return c.Conn.Read(p)
	}
	return c.readAhead(p)
}

// readAhead waits for the client's bytes, reads all that came into a
// pooled buffer, and returns what fits in p; Read returns the rest.
func (c *clientConn) readAhead(p []byte) (int, error) {
	err := c.raw.Read(c.readSocket)
	got := c.got
	c.got = socketRead{}
	if err == nil && got.err != nil {
		err = socketError(c, "read", got.err)
	}
	if err != nil {
		// A poller's error (a deadline, a closed connection) comes wrapped
		// as a net.OpError already.
		if got.buf != nil {
			aheadPool.Put(got.buf)
		}
		return 0, err
	}
	if got.n <= 0 {
		aheadPool.Put(got.buf)
		return 0, io.EOF
	}
	n := copy(p, (*got.buf)[:got.n])
	if n == got.n {
		aheadPool.Put(got.buf)
		return n, nil
	}
	c.mu.Lock()
	c.ahead, c.aheadBuf = (*got.buf)[n:got.n], got.buf
	c.mu.Unlock()
	return n, nil
}

// socketRead is the outcome of one readOnce.
type socketRead struct {
	buf *[]byte
	n   int
	err error
}

// readOnce is raw.Read's callback: it reads what the socket holds into a
// pooled buffer, or reports that nothing came yet, holding no buffer while
// the poller waits.
func (c *clientConn) readOnce(fd uintptr) bool {
	buf := aheadPool.Get().(*[]byte)
	n, ready, err := readNow(fd, *buf)
	if !ready {
		aheadPool.Put(buf)
		return false // not yet: wait for the poller
	}
	c.got = socketRead{buf: buf, n: n, err: err}
	return true
}

// lastChunkSent tells c that the chunked body being written has ended
// already on the wire: fasthttp writes its end once the body stream's
// WriteTo returns, and the next write begins with it.
func (c *clientConn) lastChunkSent() { c.endSent = true }

// fasthttp writes an answer that its write buffer cannot hold in two
// writes: the full buffer (the header and the start of the body), then the
// rest. On a connection it knows (a *net.TCPConn) it sends both with one
// writev instead, but a clientConn is not one. So a handler whose answer
// will take two writes says so, and the first is held back and sent with
// the second in one writev: one system call and one TCP segment fewer for
// every answer above 2 KiB, which most generations are. The second write
// is certain to follow, within the same flush of fasthttp's buffer.
var heldPool = sync.Pool{New: func() any {
	b := make([]byte, clientWriteBufferSize)
	return &b
}}

// holdLargeAnswer tells c that the answer fasthttp writes next has a body
// of at least clientWriteBufferSize bytes: more than its buffer with the
// header.
func (c *clientConn) holdLargeAnswer() { c.holdNext = true }

// Write writes p, less the end of a body the relay has sent already, or
// holds it back (see holdLargeAnswer).
func (c *clientConn) Write(p []byte) (int, error) {
	if c.held != nil {
		return c.writeHeld(p)
	}
	if c.holdNext {
		c.holdNext = false
		if len(p) == clientWriteBufferSize { // the full buffer: a second write follows
			c.held = heldPool.Get().(*[]byte)
			copy(*c.held, p) // fasthttp's buffer takes the rest of the body next
			return len(p), nil
		}
	}
	if c.endSent {
		c.endSent = false
		if rest, ok := bytes.CutPrefix(p, []byte(lastChunk)); ok {
			if len(rest) == 0 {
				return len(p), nil
			}
			n, err := c.Conn.Write(rest)
			return len(lastChunk) + n, err
		}
	}
	return c.Conn.Write(p)
}

// writeHeld sends the held bytes and p in one writev.
func (c *clientConn) writeHeld(p []byte) (int, error) {
	n, err := c.pair.send(c.Conn, *c.held, p)
	heldPool.Put(c.held)
	c.held = nil
	return n, err
}

// watch starts watching the client; gone is called, from the watch's
// goroutine, if the client closes the connection before unwatch. Only a
// handler may call it, with no watch running.
func (c *clientConn) watch(gone func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stashed || len(c.ahead) > 0 || c.done != nil {
		return // the client already sent more: it is not going away
	}
	done := make(chan struct{})
	c.done = done
	// The client's timeouts bound its sending, not its waiting for pdlb's
	// answer, which may take minutes: the watch lasts until unwatch, which
	// gives the connection its deadline back.
	_ = c.Conn.SetReadDeadline(time.Time{})
	go func() {
		defer close(done)
		var b [1]byte
		n, err := c.Conn.Read(b[:])
		if n == 1 {
			c.mu.Lock()
			c.stash, c.stashed = b[0], true
			c.mu.Unlock()
			return
		}
		if err != nil && !isTimeout(err) {
			gone()
		}
	}()
}

// unwatch stops the watch, if one runs, and waits for it to end, so that
// fasthttp has the connection to itself again.
func (c *clientConn) unwatch() {
	c.mu.Lock()
	done := c.done
	c.done = nil
	c.mu.Unlock()
	if done == nil {
		return
	}
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0)) // interrupts the read
	<-done
	_ = c.Conn.SetReadDeadline(c.armed)
}

// watcher arms, for one exchange at a time, the watch of its client once
// its request has waited watchAfter. Setting and stopping a timer for each
// request costs clock reads and two updates of the runtime's timer heap,
// for a watch that short requests never need. So the timer, made once per
// pooled exchange, is left running when a request ends: when it fires, it
// starts the watch if the request then armed has waited watchAfter, waits
// out the rest if it has not, and stops if none is armed. An exchange busy
// with short requests sets it about once per watchAfter.
type watcher struct {
	timer *time.Timer
	now   func() time.Time
	mu    sync.Mutex
	conn  *clientConn
	// since is when the armed request began.
	since time.Time
	// armed is set between arm and disarm; watching once the watch runs;
	// ticking while the timer is set.
	armed, watching, ticking bool
	gone                     func()
}

// init makes the timer; gone is what a client going away triggers, now the
// clock the requests' start times come from.
func (w *watcher) init(gone func(), now func() time.Time) {
	w.gone, w.now = gone, now
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
}

// arm starts the countdown to watching the client on conn, for a request
// that began at since, if pdlb made that connection (watchListener).
func (w *watcher) arm(conn net.Conn, since time.Time) {
	cc, ok := conn.(*clientConn)
	if !ok {
		return
	}
	w.mu.Lock()
	w.conn, w.since, w.armed = cc, since, true
	start := !w.ticking
	w.ticking = true
	w.mu.Unlock()
	if start {
		w.timer.Reset(watchAfter)
	}
}

func (w *watcher) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.watching {
		w.ticking = false
		return
	}
	if wait := watchAfter - w.now().Sub(w.since); wait > 0 {
		w.timer.Reset(wait)
		return
	}
	w.ticking, w.watching = false, true
	w.conn.watch(w.gone)
}

// disarm stops the countdown, or the watch if it started, before the
// answer is written.
func (w *watcher) disarm() {
	w.mu.Lock()
	conn, watching := w.conn, w.watching
	w.conn, w.armed, w.watching = nil, false, false
	w.mu.Unlock()
	if watching {
		conn.unwatch()
	}
}

// clientLeft aborts both calls of x: nobody is left to read their answers.
func (x *exchange) clientLeft() {
	x.s.errorsByReason[reasonClientGone].Inc()
	x.decode.abort(errClientGone)
	x.prefill.abort(errClientGone)
}
