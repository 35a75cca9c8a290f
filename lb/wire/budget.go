package wire

import (
	"math"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// A Budget bounds the client connections open at once (see lb's
// connlimit.go for why, and how large it is). At the budget, a new
// connection takes the place of one that waits for its client: first one
// that has sent nothing since it connected, then one waiting for its next
// request (keep-alive) or for the rest of the one it is sending (a header
// or a body sent slowly), each the one waiting longest. A real client
// sends its request as soon as it connects, and keeps a connection waiting
// for milliseconds; a flood's connections send nothing, or wait for
// seconds: they make room for each other before any real client's is
// touched, whether the flood opens thousands of empty connections a
// second, sends one request and then nothing, or sends its requests a byte
// at a time (slowloris). A keep-alive client whose connection closes while
// it waits opens another, as after the idle timeout. A connection whose
// request is being served is never closed to make room. With none waiting,
// the new connection is refused: it gets a short answer (a JSON 503) and
// is closed, which tells a client why and when to retry (Retry-After)
// where a reset would not, and costs one write on a socket whose buffer is
// empty. Nothing is queued: a refusal holds no descriptor past the accept.

// refusalWriteTimeout bounds the write of a refusal: a new socket's empty
// buffer takes it at once, so this only guards the accept loop.
const refusalWriteTimeout = 100 * time.Millisecond

// Budget bounds the client connections a server holds open. Accept admits
// each new one (Listener), fasthttp's ConnState reports what each is doing
// (Track), and a connection's Close gives its place back. It is safe for
// concurrent use.
type Budget struct {
	mu sync.Mutex
	// max is the budget's size; refusal, the whole answer to a connection
	// refused. Both change with SetMax.
	max     int
	refusal []byte
	open    int
	// silent lists the connections that have sent nothing yet, waiting
	// those that wait for their client otherwise: for the next request, or
	// the rest of one. In each, the one waiting longest comes first: the
	// order they are closed in to make room, silent ones first.
	silent, waiting connList

	// onEvict and onRefuse count a connection closed to make room and
	// one refused.
	onEvict, onRefuse func()
}

// NewBudget makes a budget of max connections (math.MaxInt for none);
// refusal is the whole answer a refused connection gets.
func NewBudget(max int, refusal []byte, onEvict, onRefuse func()) *Budget {
	return &Budget{max: max, refusal: refusal, onEvict: onEvict, onRefuse: onRefuse}
}

// Max is the budget's size; Open how many connections it counts now.
func (b *Budget) Max() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max
}

// SetMax resizes the budget to max, refusal being the answer to a
// connection refused from now on. A budget made smaller closes nothing:
// while more connections than max are open, each new one still takes the
// place of one that waits (or is refused), so the count falls to max only
// as connections end.
func (b *Budget) SetMax(max int, refusal []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.max, b.refusal = max, refusal
}

func (b *Budget) Open() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open
}

// Census counts a budget's connections by what they wait for.
type Census struct {
	Open int
	// First have sent nothing yet; Next wait for their next request, Rest
	// for the rest of the one they are sending. The others are served.
	First, Next, Rest int
}

// Census counts b's connections now.
func (b *Budget) Census() Census {
	b.mu.Lock()
	defer b.mu.Unlock()
	var by [4]int
	for _, l := range []*connList{&b.silent, &b.waiting} {
		for c := l.head; c != nil; c = c.next {
			by[c.waitsFor]++
		}
	}
	return Census{Open: b.open, First: by[waitsForFirst], Next: by[waitsForNext], Rest: by[waitsForRest]}
}

// Concurrency is the fasthttp.Server's Concurrency for b: fasthttp refuses
// connections beyond it, with a plain-text 503, before b could make room,
// so a budget above fasthttp's default raises it. Zero, fasthttp's default,
// otherwise.
func (b *Budget) Concurrency() int {
	if max := b.Max(); max > fasthttp.DefaultConcurrency && max < math.MaxInt {
		return max
	}
	return 0
}

// admit counts c in, closing a connection that waits for its client to
// make room at the limit (see above). It reports false, counting nothing, when every
// connection has a request under way: c is then to be refused.
func (b *Budget) admit(c *ClientConn) bool {
	b.mu.Lock()
	var victim *ClientConn
	if b.open >= b.max {
		if victim = b.silent.head; victim == nil {
			victim = b.waiting.head
		}
		if victim == nil {
			b.mu.Unlock()
			return false
		}
		b.drop(victim)
		victim.evicted.Store(true)
	}
	b.open++
	c.budget, c.counted = b, true
	c.waitsFor = waitsForFirst
	b.silent.push(c)
	b.mu.Unlock()
	if victim != nil {
		b.onEvict()
		// fasthttp, waiting for the victim's next request, takes this
		// for the end of the connection and closes it again: nothing is
		// logged, nothing answered.
		_ = victim.Conn.Close()
	}
	return true
}

// drop takes c out of the budget, if it is in; b.mu is held.
func (b *Budget) drop(c *ClientConn) {
	if !c.counted {
		return
	}
	c.counted = false
	b.open--
	if c.list != nil {
		c.list.remove(c)
	}
}

// Evicted reports whether conn was closed to make room for another.
func Evicted(conn net.Conn) bool {
	c, ok := conn.(*ClientConn)
	return ok && c.evicted.Load()
}

// release gives the place of c, being closed, back.
func (b *Budget) release(c *ClientConn) {
	b.mu.Lock()
	b.drop(c)
	b.mu.Unlock()
}

// waitsFor is what a connection waits for from its client.
type waitsFor uint8

const (
	waitsForNothing waitsFor = iota // its request is being served
	waitsForFirst                   // a first request: it has sent nothing
	waitsForNext                    // its next request (keep-alive)
	waitsForRest                    // the rest of the request it is sending
)

// Track is fasthttp's ConnState: a connection that receives a request's
// first byte waits for the rest of it, one done with a request waits for
// the next, each from now on. A new connection is listed by admit already.
func (b *Budget) Track(conn net.Conn, st fasthttp.ConnState) {
	c, ok := conn.(*ClientConn)
	switch {
	case !ok:
	case st == fasthttp.StateActive:
		b.move(c, waitsForRest)
	case st == fasthttp.StateIdle:
		b.move(c, waitsForNext)
	}
}

// Serving marks conn's request as received: its connection may not be
// closed to make room until it waits for the client again. Reading marks
// it as waiting again, from now on, for the rest of a body being read.
// Both do nothing for a connection no Listener accepted (tests).
func Serving(conn net.Conn) { markWaiting(conn, waitsForNothing) }

func Reading(conn net.Conn) { markWaiting(conn, waitsForRest) }

func markWaiting(conn net.Conn, w waitsFor) {
	if c, ok := conn.(*ClientConn); ok && c.budget != nil {
		c.budget.move(c, w)
	}
}

// move takes c off its list and, if it waits for w and is counted, puts it
// last on the waiting list: it has waited least.
func (b *Budget) move(c *ClientConn, w waitsFor) {
	b.mu.Lock()
	if c.list != nil {
		c.list.remove(c)
	}
	c.waitsFor = w
	if w != waitsForNothing && c.counted {
		b.waiting.push(c)
	}
	b.mu.Unlock()
}

// refuse answers conn, which admit refused, with the JSON 503 and closes
// it.
func (b *Budget) refuse(conn net.Conn) {
	b.onRefuse()
	b.mu.Lock()
	refusal := b.refusal
	b.mu.Unlock()
	_ = conn.SetWriteDeadline(time.Now().Add(refusalWriteTimeout))
	_, _ = conn.Write(refusal)
	discardReceived(conn)
	_ = conn.Close()
}

// discardReceived reads and drops what the client has sent already,
// without waiting for more: a socket closed with bytes unread is reset,
// and a reset may make the client's system drop the refusal before the
// client reads it. A request sent after this still meets the reset.
func discardReceived(conn net.Conn) {
	raw := rawConn(conn)
	if raw == nil {
		return
	}
	buf := aheadPool.Get().(*[]byte)
	defer aheadPool.Put(buf)
	_ = raw.Read(func(fd uintptr) bool {
		for range 4 { // a request's header fits; more is not worth reading
			if n, ready, err := readNow(fd, *buf); !ready || err != nil || n < len(*buf) {
				break
			}
		}
		return true // never wait
	})
}

// connList is a list of client connections linked through their own
// fields, so that listing one allocates nothing; its owner's lock guards
// it and them.
type connList struct{ head, tail *ClientConn }

// push appends c, which is on no list.
func (l *connList) push(c *ClientConn) {
	c.list, c.prev, c.next = l, l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

// remove takes c, which is on l, off it.
func (l *connList) remove(c *ClientConn) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.list, c.prev, c.next = nil, nil, nil
}
