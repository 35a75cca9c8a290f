package wire

import (
	"net"
	"slices"
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
// Dialers instead run each worker's dials on a few goroutines of their own,
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

// Dialers runs the dials of one worker on reusable goroutines, at most
// maxDialers at a time. Make one with NewDialers.
type Dialers struct {
	dial fasthttp.DialFuncWithTimeout
	// connectTimeout bounds a dial, its wait for a dialer included.
	connectTimeout time.Duration
	// quit closes when the server shuts down: the goroutines exit, and
	// dials from then on run on their callers' goroutines.
	quit <-chan struct{}
	// idleFor is how long a goroutine waits for another dial: dialerIdle.
	idleFor time.Duration

	// Every hand-over is decided under mu, on exact state: a job goes to
	// an idle goroutine (into the slot it waits on, with room for one),
	// else to a new one, else to the queue, which the goroutines empty
	// before they go idle.
	mu      sync.Mutex
	running int
	idle    []chan *dialJob
	queue   []*dialJob
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

// NewDialers runs dial on reusable goroutines, each dial within
// connectTimeout, until quit closes.
func NewDialers(dial fasthttp.DialFuncWithTimeout, connectTimeout time.Duration, quit <-chan struct{}) *Dialers {
	return &Dialers{dial: dial, connectTimeout: connectTimeout, quit: quit, idleFor: dialerIdle}
}

// Dial is a fasthttp.DialFuncWithTimeout: it connects to addr within
// timeout (the request's time left) and the connect timeout, on one of d's
// goroutines.
func (d *Dialers) Dial(addr string, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 || timeout > d.connectTimeout {
		timeout = d.connectTimeout
	}
	select {
	case <-d.quit:
		return d.dial(addr, timeout)
	default:
	}
	j := &dialJob{addr: addr, deadline: time.Now().Add(timeout), done: make(chan struct{})}
	d.mu.Lock()
	switch {
	case len(d.idle) > 0:
		next := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		next <- j // room for one, and an idle goroutine's slot is empty
	case d.running < maxDialers:
		d.running++
		go d.run(j)
	case len(d.queue) < maxQueuedDials:
		d.queue = append(d.queue, j)
	default:
		d.mu.Unlock()
		return d.dial(addr, timeout) // a burst beyond the queue
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

// run dials j, then the queued jobs, then the jobs handed to it while idle,
// until none has come for d.idleFor or the server quits.
func (d *Dialers) run(j *dialJob) {
	next := make(chan *dialJob, 1)
	idle := time.NewTimer(d.idleFor)
	defer idle.Stop()
	for {
		d.do(j)
		d.mu.Lock()
		if len(d.queue) > 0 {
			j = d.queue[0]
			d.queue[0] = nil
			d.queue = d.queue[1:]
			d.mu.Unlock()
			continue
		}
		d.idle = append(d.idle, next)
		d.mu.Unlock()
		idle.Reset(d.idleFor)
		select {
		case j = <-next:
			continue
		case <-idle.C:
		case <-d.quit:
		}
		d.mu.Lock()
		if i := slices.Index(d.idle, next); i >= 0 {
			d.idle = slices.Delete(d.idle, i, i+1)
			d.running--
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		j = <-next // handed a job as it was leaving: do it first
	}
}

// do dials for j, unless its request has given up already.
func (d *Dialers) do(j *dialJob) {
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
