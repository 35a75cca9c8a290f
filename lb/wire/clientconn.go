package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// NewClientConn wraps a connection accepted, as Listener does; its
// deadlines are rounded up to steps.
func NewClientConn(c net.Conn, steps Steps) *ClientConn {
	cc := &ClientConn{Conn: c, raw: rawConn(c), steps: steps}
	cc.readSocket = cc.readOnce
	return cc
}

// ClientConn is a client connection that can be watched for the client
// going away while fasthttp is not reading from it (during a handler), and
// that reads each request at once although fasthttp asks for its first
// byte alone.
type ClientConn struct {
	net.Conn
	// raw reads the socket without the net package's buffering rules; nil
	// for connections without a descriptor (in-memory ones in tests).
	raw syscall.RawConn
	// steps rounds its deadlines.
	steps Steps
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
	// (LimitFraming). Only the connection's own goroutine touches them.
	framed              bool
	wireRead, wireLimit int64

	// holdNext says the answer about to be written takes two writes, and
	// held is the first, held back for the second (see HoldLargeAnswer);
	// pair sends both. The connection's own goroutine alone touches them.
	holdNext bool
	held     *[]byte
	pair     twoWrites

	// budget is the Budget that admitted the connection, nil for one
	// made otherwise (tests). Its lock guards the rest: counted while the
	// connection has its place in it; waitsFor what it waits for from its
	// client; list is the budget's list the connection is on, if any, and
	// prev and next its neighbours there.
	budget   *Budget
	counted  bool
	waitsFor waitsFor
	// evicted is set when the budget closed the connection to make room.
	evicted    atomic.Bool
	list       *connList
	prev, next *ClientConn
}

// Close closes the connection and gives its place in the budget back.
// fasthttp closes each connection it served; pdlb closes some itself
// before (dropClient, handleParseError), so Close may come twice.
func (c *ClientConn) Close() error {
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
// a worker connection's is (Steps): with 64 clients, one request
// in 70 moves it. A client may then be let go up to DeadlineStep late.
func (c *ClientConn) SetReadDeadline(t time.Time) error {
	c.readBy = t
	return nil
}

// SetWriteDeadline moves the write deadline, rounded up to a step as a
// worker connection's is, unless the socket has it already: fasthttp gives
// each answer ClientWriteTimeout, and the relay moves it on as a stream's
// events go out.
func (c *ClientConn) SetWriteDeadline(t time.Time) error {
	return moveDeadline(c.Conn, writeDeadline, &c.writeBy, c.steps.Round(t))
}

func (c *ClientConn) SetDeadline(t time.Time) error {
	c.readBy = t
	return c.SetWriteDeadline(t)
}

// armRead gives the socket the read deadline last asked for, unless it has
// it already.
func (c *ClientConn) armRead() error {
	return moveDeadline(c.Conn, readDeadline, &c.armed, c.steps.Round(c.readBy))
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
func (c *ClientConn) Read(p []byte) (int, error) {
	n, err := c.read(p)
	if c.framed {
		if c.wireRead += int64(n); c.wireRead > c.wireLimit && err == nil {
			err = ErrFramingTooLarge
		}
	}
	return n, err
}

// ErrFramingTooLarge ends the read of a chunked body whose framing (chunk
// sizes, extensions) outgrew its data: fasthttp reads a chunk's extensions
// without a bound, and 10 MB of them a chunk cost pdlb 33 CPU-seconds for a
// body of a kilobyte.
var ErrFramingTooLarge = errors.New("the chunked body's framing (chunk size lines and extensions) is far larger than its data")

// StartFramedBody starts counting what the reads of a chunked body take from the
// socket; LimitFraming bounds it, before a read of the body's data that
// holds data bytes already and room for as many more: the body's bytes on
// the wire may be chunkFramingRatio times its data, and maxChunkFraming
// more (size lines, extensions, bytes read ahead into fasthttp's buffer),
// as Go's net/http bounds a chunked body's "non-data". EndFramedBody stops
// counting. Only the connection's goroutine, which reads the body, calls
// them.
func (c *ClientConn) StartFramedBody() { c.framed, c.wireRead = true, 0 }

func (c *ClientConn) LimitFraming(data, room int) {
	c.wireLimit = int64(chunkFramingRatio*(data+room) + maxChunkFraming)
}

func (c *ClientConn) EndFramedBody() { c.framed = false }

const (
	chunkFramingRatio = 16
	maxChunkFraming   = 64 << 10
)

func (c *ClientConn) read(p []byte) (int, error) {
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
func (c *ClientConn) readAhead(p []byte) (int, error) {
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
func (c *ClientConn) readOnce(fd uintptr) bool {
	buf := aheadPool.Get().(*[]byte)
	n, ready, err := readNow(fd, *buf)
	if !ready {
		aheadPool.Put(buf)
		return false // not yet: wait for the poller
	}
	c.got = socketRead{buf: buf, n: n, err: err}
	return true
}

// LastChunkSent tells c that the chunked body being written has ended
// already on the wire: fasthttp writes its end once the body stream's
// WriteTo returns, and the next write begins with it.
func (c *ClientConn) LastChunkSent() { c.endSent = true }

// ClientWriteBufferSize is the write buffer a server gives each client
// connection: an event or a small answer fits, a larger body is written
// past it.
const ClientWriteBufferSize = 2 << 10

// fasthttp writes an answer that its write buffer cannot hold in two
// writes: the full buffer (the header and the start of the body), then the
// rest. On a connection it knows (a *net.TCPConn) it sends both with one
// writev instead, but a ClientConn is not one. So a handler whose answer
// will take two writes says so, and the first is held back and sent with
// the second in one writev: one system call and one TCP segment fewer for
// every answer above 2 KiB, which most generations are. The second write
// is certain to follow, within the same flush of fasthttp's buffer.
var heldPool = sync.Pool{New: func() any {
	b := make([]byte, ClientWriteBufferSize)
	return &b
}}

// HoldLargeAnswer tells c that the answer fasthttp writes next has a body
// of at least ClientWriteBufferSize bytes: more than its buffer with the
// header.
func (c *ClientConn) HoldLargeAnswer() { c.holdNext = true }

// Write writes p, less the end of a body the relay has sent already, or
// holds it back (see HoldLargeAnswer).
func (c *ClientConn) Write(p []byte) (int, error) {
	if c.held != nil {
		return c.writeHeld(p)
	}
	if c.holdNext {
		c.holdNext = false
		if len(p) == ClientWriteBufferSize { // the full buffer: a second write follows
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
func (c *ClientConn) writeHeld(p []byte) (int, error) {
	n, err := c.pair.send(c.Conn, *c.held, p)
	heldPool.Put(c.held)
	c.held = nil
	return n, err
}
