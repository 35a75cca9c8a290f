package wire

import (
	"net"
	"sync"
	"time"
)

// ClientWatch is a watch of a client connection for a wait of a handler's
// own (a request waiting for a slot, or for its pair's warm-up): Gone is
// closed if the client goes away before Stop.
type ClientWatch struct {
	Gone chan struct{}
	conn *ClientConn
}

// WatchClient watches conn if a Listener accepted it (in tests it may be
// another kind, which is not watched, and Gone never closes).
func WatchClient(conn net.Conn) ClientWatch {
	w := ClientWatch{Gone: make(chan struct{})}
	if cc, ok := conn.(*ClientConn); ok {
		w.conn = cc
		cc.Watch(func() { close(w.Gone) })
	}
	return w
}

// Stop ends the watch and gives the connection back to fasthttp.
func (w ClientWatch) Stop() {
	if w.conn != nil {
		w.conn.Unwatch()
	}
}

// A client that goes away while pdlb waits for a non-stream answer must not
// leave both workers generating for nobody. fasthttp says nothing until it
// writes the answer, so pdlb watches the client itself, as Go's net/http
// does: a background read of one byte from the connection ends with an
// error when the client closes it. The byte it may read instead belongs to
// the client's next request and is handed back to fasthttp. Watching costs
// a goroutine, so it starts only once a request has waited WatchAfter:
// short requests never pay for it.
const WatchAfter = time.Second

// Watch starts watching the client; gone is called, from the watch's
// goroutine, if the client closes the connection before Unwatch. Only a
// handler may call it, with no watch running.
func (c *ClientConn) Watch(gone func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stashed || len(c.ahead) > 0 || c.done != nil {
		return // the client already sent more: it is not going away
	}
	done := make(chan struct{})
	c.done = done
	// The client's timeouts bound its sending, not its waiting for pdlb's
	// answer, which may take minutes: the watch lasts until Unwatch, which
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
		if err != nil && !IsTimeout(err) {
			gone()
		}
	}()
}

// Unwatch stops the watch, if one runs, and waits for it to end, so that
// fasthttp has the connection to itself again.
func (c *ClientConn) Unwatch() {
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

// Watcher arms, for one exchange at a time, the watch of its client once
// its request has waited WatchAfter. Setting and stopping a timer for each
// request costs clock reads and two updates of the runtime's timer heap,
// for a watch that short requests never need. So the timer, made once per
// pooled exchange, is left running when a request ends: when it fires, it
// starts the watch if the request then armed has waited WatchAfter, waits
// out the rest if it has not, and stops if none is armed. An exchange busy
// with short requests sets it about once per WatchAfter.
type Watcher struct {
	timer *time.Timer
	now   func() time.Time
	mu    sync.Mutex
	conn  *ClientConn
	// since is when the armed request began.
	since time.Time
	// armed is set between arm and disarm; watching once the watch runs;
	// ticking while the timer is set.
	armed, watching, ticking bool
	gone                     func()
}

// Init makes the timer; gone is what a client going away triggers, now the
// clock the requests' start times come from.
func (w *Watcher) Init(gone func(), now func() time.Time) {
	w.gone, w.now = gone, now
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
}

// Arm starts the countdown to watching the client on conn, for a request
// that began at since, if pdlb made that connection (Listener).
func (w *Watcher) Arm(conn net.Conn, since time.Time) {
	cc, ok := conn.(*ClientConn)
	if !ok {
		return
	}
	w.mu.Lock()
	w.conn, w.since, w.armed = cc, since, true
	start := !w.ticking
	w.ticking = true
	w.mu.Unlock()
	if start {
		w.timer.Reset(WatchAfter)
	}
}

func (w *Watcher) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.armed || w.watching {
		w.ticking = false
		return
	}
	if wait := WatchAfter - w.now().Sub(w.since); wait > 0 {
		w.timer.Reset(wait)
		return
	}
	w.ticking, w.watching = false, true
	w.conn.Watch(w.gone)
}

// Disarm stops the countdown, or the watch if it started, before the
// answer is written.
func (w *Watcher) Disarm() {
	w.mu.Lock()
	conn, watching := w.conn, w.watching
	w.conn, w.armed, w.watching = nil, false, false
	w.mu.Unlock()
	if watching {
		conn.Unwatch()
	}
}
