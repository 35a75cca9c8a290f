package wire

import (
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// workerConn is a connection to a worker. It remembers the deadlines it was
// given, so that giving one it has again costs nothing, and it sends each
// request from inside the first read of its answer (see stageRequest). Its
// deadlines are set by one call at a time, under that call's canceller lock
// once it is attached; only that call reads and writes it.
type workerConn struct {
	net.Conn
	readBy, writeBy time.Time

	// raw reads and writes the socket under the poller's rules; nil for
	// connections without a descriptor (in-memory ones in tests), which
	// send their requests as they come.
	raw syscall.RawConn
	// sendThenRead is sendAndRead, bound once: raw.Read takes a func, and
	// a closure would cost allocations a request.
	sendThenRead func(fd uintptr) bool
	// stage, set by the round trip, holds the next write back; staged is
	// then the request held, in a buffer of stagedPool, and sent its bytes
	// sent so far.
	stage  bool
	staged *[]byte
	sent   int
	// into is the buffer the read in progress fills; got its outcome.
	into []byte
	got  rawOutcome
	// pair sends a held request's start with its rest (see Write).
	pair twoWrites
}

// rawOutcome is what sendAndRead did.
type rawOutcome struct {
	n   int
	err error
	op  string // the system call that failed
	// full is set when the socket took only part of the request: the
	// rest is sent as any write.
	full bool
}

func newWorkerConn(conn net.Conn) *workerConn {
	c := &workerConn{Conn: conn, raw: rawConn(conn)}
	c.sendThenRead = c.sendAndRead
	return c
}

// Go's poller waits for a socket to have data by reading it first, and
// only on finding nothing waits for the poller to report more. Right after
// a request is sent, that first read always finds nothing, since the
// worker has not had time to answer: one system call per leg for nothing,
// about 4 % of pdlb's CPU per request. The poller cannot simply be waited
// for without it: its notice of data that came before the wait began would
// be lost. So the request is sent inside the wait instead: the round trip
// stages it (stageRequest), workerConn holds it back, and the first read of
// the answer writes it to the socket once the poller's notices count, then
// waits without reading first. A request is held only if it comes in one
// write of at most maxStagedRequest bytes (fasthttp writes one that fits
// its buffer in one). One too large for fasthttp's buffer comes in two
// writes, the full buffer and the rest of the body: the first is held
// too, and sent with the second in one writev.
const maxStagedRequest = 4 << 10

var stagedPool = sync.Pool{New: func() any {
	b := make([]byte, 0, maxStagedRequest)
	return &b
}}

// stageRequest holds the next write back until the next read, or ends
// holding writes back.
func (c *workerConn) stageRequest(on bool) { c.stage = on }

func (c *workerConn) Write(p []byte) (int, error) {
	if c.stage && c.staged == nil && c.raw != nil && len(p) <= maxStagedRequest {
		buf := stagedPool.Get().(*[]byte)
		*buf = append((*buf)[:0], p...)
		c.staged, c.sent = buf, 0
		return len(p), nil
	}
	if c.stage && c.staged != nil && c.sent == 0 {
		// The rest of a request too large for one write.
		n, err := c.pair.send(c.Conn, *c.staged, p)
		c.dropStaged()
		return n, err
	}
	if err := c.sendStaged(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// sendStaged sends what is left of a request held back, as any write.
func (c *workerConn) sendStaged() error {
	if c.staged == nil {
		return nil
	}
	_, err := c.Conn.Write((*c.staged)[c.sent:])
	c.dropStaged()
	return err
}

func (c *workerConn) dropStaged() {
	if c.staged != nil {
		stagedPool.Put(c.staged)
		c.staged = nil
	}
}

// Read sends the request held back, if any, and reads its answer.
func (c *workerConn) Read(p []byte) (int, error) {
	if c.staged == nil || len(p) == 0 {
		return c.Conn.Read(p)
	}
	c.into = p
	err := c.raw.Read(c.sendThenRead)
	got := c.got
	c.into, c.got = nil, rawOutcome{}
	if err != nil {
		// A poller's error (a deadline, a closed connection) comes wrapped
		// as a net.OpError already.
		c.dropStaged()
		return 0, err
	}
	if got.full {
		if err := c.sendStaged(); err != nil {
			return 0, err
		}
		return c.Conn.Read(p)
	}
	if got.err != nil {
		return 0, socketError(c, got.op, got.err)
	}
	if got.n == 0 {
		return 0, io.EOF
	}
	return got.n, nil
}

// sendAndRead is raw.Read's callback. Its first call writes the request
// held back and asks the poller to wait for the answer; the next ones read
// it, or report that nothing came yet.
func (c *workerConn) sendAndRead(fd uintptr) bool {
	if c.staged != nil {
		for c.sent < len(*c.staged) {
			n, err := syscall.Write(int(fd), (*c.staged)[c.sent:])
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				c.got.full = true
				return true
			case err != nil:
				c.got.err, c.got.op = err, "write"
				c.dropStaged()
				return true
			}
			c.sent += n
		}
		c.dropStaged()
		return false
	}
	n, ready, err := readNow(fd, c.into)
	if !ready {
		return false
	}
	c.got.n, c.got.err = n, err
	if err != nil {
		c.got.op = "read"
	}
	return true
}

func (c *workerConn) SetReadDeadline(t time.Time) error {
	return moveDeadline(c.Conn, readDeadline, &c.readBy, t)
}

func (c *workerConn) SetWriteDeadline(t time.Time) error {
	return moveDeadline(c.Conn, writeDeadline, &c.writeBy, t)
}

func (c *workerConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}
