package lb

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// A worker connection is dialled when a request finds none idle, on the
// request's goroutine by default. The dial's call chain (fasthttp's dialer,
// then the net package's) is deep enough, below a stream's handler, to grow
// that goroutine's stack from 8 to 16 KiB, which it keeps until a garbage
// collection shrinks it: streams relaying events allocate next to nothing,
// so that can take a long while. A burst of new streams, which all dial at
// once, so cost 8 KiB more each: 8 MiB at 1,024 streams, an eighth of
// pdlb's memory.
// dialers instead run each worker's dials on a few goroutines of their own,
// reused from one dial to the next, and the request only waits for the
// connection.

// maxDialers bounds the goroutines dialling one worker at once, and
// maxQueuedDials the dials waiting for one of them; a dial beyond both runs
// on the request's goroutine. On loopback a dial takes tens of
// microseconds, so a burst of a thousand clears in a few milliseconds.
const (
	maxDialers     = 64
	maxQueuedDials = 1024
)

// dialerIdle is how long a dialer goroutine waits for another dial before
// it exits.
const dialerIdle = 10 * time.Second

// dialers runs the dials of one worker on reusable goroutines, at most
// maxDialers at a time. Make one with newDialers.
type dialers struct {
	dial fasthttp.DialFuncWithTimeout
	jobs chan *dialJob
	// quit closes when the server shuts down: the goroutines exit, and
	// dials from then on run on their callers' goroutines.
	quit <-chan struct{}
	// idleFor is how long a goroutine waits for another dial: dialerIdle.
	idleFor time.Duration

	// running counts the dialer goroutines, idle those waiting for a job.
	mu            sync.Mutex
	running, idle int
}

// dialJob is one dial, handed from the request that needs it to a dialer
// goroutine. Whichever side first claims it settles it: the dialer, to
// deliver the connection; the request, to give up when its time runs out
// first. A connection made for a request that gave up is closed.
type dialJob struct {
	addr     string
	deadline time.Time
	state    atomic.Int32
	conn     net.Conn
	err      error
	done     chan struct{}
}

const (
	dialPending int32 = iota
	dialDelivered
	dialAbandoned
)

func newDialers(dial fasthttp.DialFuncWithTimeout, quit <-chan struct{}) *dialers {
	return &dialers{dial: dial, jobs: make(chan *dialJob, maxQueuedDials), quit: quit, idleFor: dialerIdle}
}

// Dial is a fasthttp.DialFuncWithTimeout: it connects to addr within
// timeout (fasthttp's default when none is given), on one of d's
// goroutines.
func (d *dialers) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = fasthttp.DefaultDialTimeout
	}
	j := &dialJob{addr: addr, deadline: time.Now().Add(timeout), done: make(chan struct{})}
	select {
	case <-d.quit:
		return d.dial(addr, timeout)
	default:
	}
	select {
	case d.jobs <- j:
	default:
		return d.dial(addr, timeout) // a burst beyond the queue
	}
	d.mu.Lock()
	// Start a dialer if the queue holds more jobs than idle dialers can
	// take. One that finds the queue empty exits only after checking it
	// under this lock, so a job queued is never left without a dialer.
	if len(d.jobs) > d.idle && d.running < maxDialers {
		d.running++
		d.idle++
		go d.run()
	}
	d.mu.Unlock()

	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-j.done:
		return j.conn, j.err
	case <-t.C:
		if j.state.CompareAndSwap(dialPending, dialAbandoned) {
			return nil, fasthttp.ErrDialTimeout
		}
	case <-d.quit:
		// The dialers are leaving, and may leave j behind.
		if j.state.CompareAndSwap(dialPending, dialAbandoned) {
			return d.dial(addr, time.Until(j.deadline))
		}
	}
	<-j.done // a dialer claimed it first and is delivering
	return j.conn, j.err
}

// run dials the queued jobs until none has come for d.idleFor.
func (d *dialers) run() {
	idle := time.NewTimer(d.idleFor)
	defer idle.Stop()
	for {
		select {
		case j := <-d.jobs:
			d.setIdle(-1)
			d.do(j)
			d.setIdle(+1)
			idle.Reset(d.idleFor)
		case <-idle.C:
			d.mu.Lock()
			if len(d.jobs) > 0 {
				d.mu.Unlock()
				idle.Reset(d.idleFor)
				continue
			}
			d.idle--
			d.running--
			d.mu.Unlock()
			return
		case <-d.quit:
			d.mu.Lock()
			d.idle--
			d.running--
			d.mu.Unlock()
			return
		}
	}
}

func (d *dialers) setIdle(delta int) {
	d.mu.Lock()
	d.idle += delta
	d.mu.Unlock()
}

// do dials for j, unless its request has given up already.
func (d *dialers) do(j *dialJob) {
	if j.state.Load() != dialPending {
		return
	}
	conn, err := d.dial(j.addr, time.Until(j.deadline))
	if !j.state.CompareAndSwap(dialPending, dialDelivered) {
		if conn != nil {
			_ = conn.Close()
		}
		return
	}
	j.conn, j.err = conn, err
	close(j.done)
}

// dialFunc is the dial a worker's dialers make: dial when given (tests
// pass in-memory listeners), else fasthttp's TCP dial.
func dialFunc(dial fasthttp.DialFunc) fasthttp.DialFuncWithTimeout {
	if dial == nil {
		return fasthttp.DialTimeout
	}
	return func(addr string, _ time.Duration) (net.Conn, error) { return dial(addr) }
}
