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

// connSet tracks a server's connections through fasthttp's ConnState hook,
// so that Close can close idle ones at once and return as soon as the last
// one is gone. fasthttp's own Shutdown polls every 100 ms instead, which
// would make every test that closes a fake wait for nothing.
type connSet struct {
	mu      sync.Mutex
	conns   map[net.Conn]bool // conn → serving a request
	closing bool
	empty   chan struct{} // closed once closing and no connection is left
	emptied bool
}

// track is the fasthttp.Server ConnState hook.
func (cs *connSet) track(c net.Conn, st fasthttp.ConnState) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	switch st {
	case fasthttp.StateNew, fasthttp.StateIdle:
		cs.conns[c] = false
		if cs.closing {
			_ = c.Close() // its answer is out: the connection goes
		}
	case fasthttp.StateActive:
		cs.conns[c] = true
	default: // StateClosed, StateHijacked
		delete(cs.conns, c)
		cs.signalLocked()
	}
}

// close closes idle connections, lets active ones finish their answer (at
// most closeGrace, then closes them too) and returns when none is left. The
// listeners must be closed and Serve returned, so no connection comes after.
func (cs *connSet) close() {
	cs.mu.Lock()
	cs.closing = true
	for c, active := range cs.conns {
		if !active {
			_ = c.Close()
		}
	}
	cs.signalLocked()
	cs.mu.Unlock()

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
