package lb

import (
	"math"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// Every client connection holds a file descriptor, and so does each of
// pdlb's calls to the workers, its health probes and its listeners. Issue
// 19: 20,000 idle client connections, the process's limit, left none for
// anyone else; the workers' calls and probes failed with "too many open
// files", the probes took both workers down, and clients got 503s for
// seconds after the attacker let go. So client connections are a budget
// (Config.MaxConnections), kept below the limit by what pdlb needs itself.
//
// At the budget, a new connection takes the place of one that waits for
// its client: first one that has sent nothing since it connected, then one
// waiting for its next request (keep-alive) or for the rest of the one it
// is sending (a header or a body sent slowly), each the one waiting
// longest. A real client sends its request as soon as it connects, and
// keeps a connection waiting for milliseconds; a flood's connections send
// nothing, or wait for seconds: they make room for each other before any
// real client's is touched, whether the flood opens thousands of empty
// connections a second, sends one request and then nothing, or sends its
// requests a byte at a time (slowloris). A keep-alive client whose
// connection closes while it waits opens another, as after the idle
// timeout. A connection whose
// request is being served is never closed to make room. With none
// waiting, the new connection is refused: it gets a short JSON 503 and is
// closed, which tells a client why and when to retry (Retry-After) where a
// reset would not, and costs pdlb one write on a socket whose buffer is
// empty. Nothing is queued: a refusal holds no descriptor past the accept.

// Descriptors pdlb keeps for itself whatever its clients do.
const (
	// reservedDescriptors: standard streams, listeners (main, admin,
	// pprof) and their admin clients, the runtime's poller, log files,
	// DNS lookups.
	reservedDescriptors = 64
	// descriptorsPerWorker: a worker's health probes (2 at most, as
	// health's client allows), its bootstrap server's and /server_info
	// reads, with room to spare.
	descriptorsPerWorker = 8
	// minMaxConnections is the smallest budget derived from a limit.
	minMaxConnections = 16
	// maxMaxConnections is the largest: an idle connection costs about
	// 6 KiB of memory too (a goroutine's stack, most of it), and
	// containers often allow a million descriptors, which would let idle
	// connections take gigabytes. A larger budget is set explicitly.
	maxMaxConnections = 1 << 16
)

// defaultMaxConnections is the client connection budget of a process
// allowed nofile descriptors, with workers workers each reached by up to
// maxConnsPerWorker pooled connections (Config.MaxConnsPerBackend). What is
// spare once reservedDescriptors and descriptorsPerWorker are set aside is
// shared between clients and the worker pools: a client whose request is
// under way holds a prefill and a decode connection (one, decode-only), and
// the pools keep them a while after. So clients get what the pools leave at
// their largest, but at least a third of the spare: then even with every
// client mid-request, its two worker connections fit beside it. The
// budget is kept within minMaxConnections and maxMaxConnections.
func defaultMaxConnections(nofile uint64, workers, maxConnsPerWorker int) int {
	spare := int64(min(nofile, 1<<40)) - reservedDescriptors - descriptorsPerWorker*int64(workers)
	n := max(spare-int64(workers)*int64(maxConnsPerWorker), spare/3)
	return int(min(max(n, minMaxConnections), maxMaxConnections))
}

// openFileLimit is the process's descriptor limit (RLIMIT_NOFILE) as Go
// leaves it: the runtime raises the soft limit to the hard one at start.
func openFileLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

// connectionLimit is the client connection budget: Config.MaxConnections,
// derived from the descriptor limit when zero; math.MaxInt for none.
func (s *Server) connectionLimit() int {
	switch n := s.cfg.MaxConnections; {
	case n > 0:
		return n
	case n < 0:
		return math.MaxInt
	}
	nofile, err := openFileLimit()
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot read the descriptor limit; client connections are not bounded (set --max-connections)")
		return math.MaxInt
	}
	return defaultMaxConnections(nofile, len(s.allBackends()), s.cfg.MaxConnsPerBackend)
}

// refusalWriteTimeout bounds the write of a refusal: a new socket's empty
// buffer takes it at once, so this only guards the accept loop.
const refusalWriteTimeout = 100 * time.Millisecond

// connBudget bounds the client connections a Server holds open. Accept
// admits each new one (watchListener), fasthttp's ConnState reports what
// each is doing (track), and a connection's Close gives its place back. It
// is safe for concurrent use.
type connBudget struct {
	max int
	// refusal is the whole answer to a connection refused.
	refusal []byte

	mu   sync.Mutex
	open int
	// silent lists the connections that have sent nothing yet, waiting
	// those that wait for their client otherwise: for the next request, or
	// the rest of one. In each, the one waiting longest comes first: the
	// order they are closed in to make room, silent ones first.
	silent, waiting connList

	evicted, refused *metrics.Counter
	// refusals counts refusals among the client-facing errors
	// (pdlb_request_errors_total).
	refusals *metrics.Counter
}

// newConnBudget makes a budget of max connections (math.MaxInt for none),
// with its metrics in ms; refusals is the error counter of its refusals.
func newConnBudget(max int, ms *metrics.Set, refusals *metrics.Counter) *connBudget {
	b := &connBudget{max: max, refusals: refusals}
	msg := "pdlb has " + strconv.Itoa(max) + " client connections open, its limit (--max-connections), " +
		"and each has a request under way; retry shortly"
	body := appendErrorJSON(nil, fasthttp.StatusServiceUnavailable, msg)
	b.refusal = append([]byte("HTTP/1.1 503 Service Unavailable\r\nServer: pdlb\r\nContent-Type: application/json\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)
	ms.NewGauge(`pdlb_client_connections`, func() float64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return float64(b.open)
	})
	ms.NewGauge(`pdlb_client_connections_max`, func() float64 {
		if max == math.MaxInt {
			return math.Inf(1)
		}
		return float64(max)
	})
	b.evicted = ms.NewCounter(`pdlb_client_connections_evicted_total`)
	b.refused = ms.NewCounter(`pdlb_client_connections_refused_total`)
	return b
}

// concurrency is the fasthttp.Server's Concurrency for b: fasthttp refuses
// connections beyond it, with a plain-text 503, before b could make room,
// so a budget above fasthttp's default raises it. Zero, fasthttp's default,
// otherwise.
func (b *connBudget) concurrency() int {
	if b.max > fasthttp.DefaultConcurrency && b.max < math.MaxInt {
		return b.max
	}
	return 0
}

// admit counts c in, closing a connection that waits for its client to
// make room at the limit (see above). It reports false, counting nothing, when every
// connection has a request under way: c is then to be refused.
func (b *connBudget) admit(c *clientConn) bool {
	b.mu.Lock()
	var victim *clientConn
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
		b.evicted.Inc()
		// fasthttp, waiting for the victim's next request, takes this
		// for the end of the connection and closes it again: nothing is
		// logged, nothing answered.
		_ = victim.Conn.Close()
	}
	return true
}

// drop takes c out of the budget, if it is in; b.mu is held.
func (b *connBudget) drop(c *clientConn) {
	if !c.counted {
		return
	}
	c.counted = false
	b.open--
	if c.list != nil {
		c.list.remove(c)
	}
}

// evicted reports whether pdlb closed conn to make room for another.
func evicted(conn net.Conn) bool {
	c, ok := conn.(*clientConn)
	return ok && c.evicted.Load()
}

// evictedMessage is what pdlb logs of a request whose connection it closed
// to make room, as its client sent it too slowly.
const evictedMessage = "closed to make room for another connection (--max-connections) while still sending its request"

// release gives the place of c, being closed, back.
func (b *connBudget) release(c *clientConn) {
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

// track is fasthttp's ConnState: a connection that receives a request's
// first byte waits for the rest of it, one done with a request waits for
// the next, each from now on. A new connection is listed by admit already.
func (b *connBudget) track(conn net.Conn, st fasthttp.ConnState) {
	c, ok := conn.(*clientConn)
	switch {
	case !ok:
	case st == fasthttp.StateActive:
		b.move(c, waitsForRest)
	case st == fasthttp.StateIdle:
		b.move(c, waitsForNext)
	}
}

// serving marks conn's request as received: its connection may not be
// closed to make room until it waits for the client again. reading marks
// it as waiting again, from now on, for the rest of a body pdlb reads.
// Both do nothing for a connection pdlb did not accept (tests).
func serving(conn net.Conn) { markWaiting(conn, waitsForNothing) }

func reading(conn net.Conn) { markWaiting(conn, waitsForRest) }

func markWaiting(conn net.Conn, w waitsFor) {
	if c, ok := conn.(*clientConn); ok && c.budget != nil {
		c.budget.move(c, w)
	}
}

// move takes c off its list and, if it waits for w and is counted, puts it
// last on the waiting list: it has waited least.
func (b *connBudget) move(c *clientConn, w waitsFor) {
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
func (b *connBudget) refuse(conn net.Conn) {
	b.refused.Inc()
	b.refusals.Inc()
	_ = conn.SetWriteDeadline(time.Now().Add(refusalWriteTimeout))
	_, _ = conn.Write(b.refusal)
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
type connList struct{ head, tail *clientConn }

// push appends c, which is on no list.
func (l *connList) push(c *clientConn) {
	c.list, c.prev, c.next = l, l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

// remove takes c, which is on l, off it.
func (l *connList) remove(c *clientConn) {
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
