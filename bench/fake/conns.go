package fake

import (
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// closeGrace is how long Close lets active connections finish the answers
// that closing cut short before it closes them too.
const closeGrace = 2 * time.Second

// connSet tracks the connections of one listening address through
// fasthttp's ConnState hook, so that Close can close idle ones at once and
// return as soon as the last one is gone (fasthttp's own Shutdown polls
// every 100 ms instead, which would make every test that closes a fake wait
// for nothing), FaultRefuse can drop them all, and CloseIdleConnections the
// idle ones. It is safe for concurrent use.
type connSet struct {
	mu       sync.Mutex
	conns    map[net.Conn]connInfo
	closing  bool // Close: every connection goes once its answer is out
	dropping bool // FaultRefuse: every connection goes at once
	empty    chan struct{}
	emptied  bool // empty is closed: closing, and no connection is left
}

// connInfo is what a connSet knows of a connection.
type connInfo struct {
	active    bool // serving a request, per fasthttp
	closeIdle bool // CloseIdleConnections found its answer out: close once idle
	closed    bool // closed by the set, not yet reported closed by fasthttp
}

func newConnSet() *connSet {
	return &connSet{conns: make(map[net.Conn]connInfo), empty: make(chan struct{})}
}

// track is the fasthttp.Server ConnState hook.
func (cs *connSet) track(c net.Conn, st fasthttp.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch st {
	case fasthttp.StateNew, fasthttp.StateIdle:
		info := cs.conns[c]
		if cs.closing || cs.dropping || info.closeIdle {
			_ = c.Close() // its answer is out: the connection goes
			info.closed = true
		}
		cs.conns[c] = connInfo{closed: info.closed}
	case fasthttp.StateActive:
		if cs.dropping {
			_ = c.Close()
		}
		cs.conns[c] = connInfo{active: true, closed: cs.conns[c].closed || cs.dropping}
	default: // StateClosed, StateHijacked
		delete(cs.conns, c)
		cs.signalLocked()
	}
}

// closeIdle closes every connection not serving a request: idle ones at
// once, and active ones whose handler and stream are done (the answer is
// being flushed) as soon as fasthttp reports them idle, before they read
// another request. It returns how many connections it closed or marked.
// A connection whose request is still arriving looks done too: it is
// answered, then closed.
func (cs *connSet) closeIdle() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	n := 0
	for c, info := range cs.conns {
		switch {
		case info.closed || info.closeIdle:
		case !info.active:
			_ = c.Close()
			info.closed = true
			n++
		case !serving(c):
			info.closeIdle = true
			n++
		}
		cs.conns[c] = info
	}
	return n
}

// drop closes every connection, serving or not, and every one reported
// until undrop: a killed server's connections all break.
func (cs *connSet) drop() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.dropping = true
	for c, info := range cs.conns {
		_ = c.Close()
		info.closed = true
		cs.conns[c] = info
	}
}

// undrop ends drop: the address listens again.
func (cs *connSet) undrop() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.dropping = false
}

// shut closes idle connections and lets active ones finish their answer;
// wait then returns when none is left, closing the rest after closeGrace.
// The listener must be closed and Serve returned, so no connection comes
// after.
func (cs *connSet) shut() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closing = true
	for c, info := range cs.conns {
		if !info.active {
			_ = c.Close()
		}
	}
	cs.signalLocked()
}

func (cs *connSet) wait() {
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-cs.empty:
		return
	case <-t.C:
	}
	cs.mu.Lock()
	for c := range cs.conns {
		_ = c.Close()
	}
	cs.mu.Unlock()
	<-cs.empty
}

func (cs *connSet) signalLocked() {
	if cs.closing && len(cs.conns) == 0 && !cs.emptied {
		cs.emptied = true
		close(cs.empty)
	}
}
