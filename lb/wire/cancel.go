package wire

import (
	"net"
	"sync"
	"time"
)

// Canceller lets one goroutine abort a call running in another by closing
// the call's connection, which unblocks any read or write at once. The zero
// value is ready to use.
type Canceller struct {
	mu     sync.Mutex
	conn   net.Conn
	reason error
	// over is set once the call has finished; cancelling it is then a no-op,
	// so reason only ever names what interrupted a running call.
	over bool
	// limit, when set, is a last read deadline that no later one overrides
	// (CapRead); limitReason is the call's error once it has passed.
	limit       time.Time
	limitReason error
}

// attach records conn as the call's connection and gives it its read
// deadline (held to the limit), or returns the reason if the call was
// cancelled already. Setting the deadline here, under the lock, keeps a
// CapRead that comes while the call connects from being lost.
func (cl *Canceller) attach(conn net.Conn, readBy time.Time) error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.reason != nil {
		return cl.reason
	}
	if err := conn.SetReadDeadline(cl.limited(readBy)); err != nil {
		return err
	}
	cl.conn = conn
	return nil
}

func (cl *Canceller) limited(t time.Time) time.Time {
	if !cl.limit.IsZero() && cl.limit.Before(t) {
		return cl.limit
	}
	return t
}

// detach forgets the call's connection, and reports whether a cancel has
// closed it meanwhile: a connection is attached only to a call not
// cancelled yet, and a cancel closes the one attached.
func (cl *Canceller) detach() (closed bool) {
	cl.mu.Lock()
	closed = cl.conn != nil && cl.reason != nil
	cl.conn = nil
	cl.mu.Unlock()
	return closed
}

// Cancel aborts the call with reason; only the first reason is kept. It
// reports whether the call had its connection, so the worker may have
// started on the request.
func (cl *Canceller) Cancel(reason error) bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.reason != nil || cl.over {
		return false
	}
	cl.reason = reason
	if cl.conn == nil {
		return false
	}
	_ = cl.conn.Close()
	return true
}

// End marks the call finished.
func (cl *Canceller) End() {
	cl.mu.Lock()
	cl.over = true
	cl.mu.Unlock()
}

// Over reports whether the call has finished (End).
func (cl *Canceller) Over() bool {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.over
}

// ReadBy moves the read deadline of the call's connection, if it has one,
// held to the limit.
func (cl *Canceller) ReadBy(t time.Time) {
	cl.mu.Lock()
	if cl.conn != nil {
		_ = cl.conn.SetReadDeadline(cl.limited(t))
	}
	cl.mu.Unlock()
}

// CapRead gives the call, unless it is over, a last read deadline d from
// now, at once or once it connects; a read that times out past it fails the
// call with reason. (The clock is read only when needed: the call is
// usually over.)
func (cl *Canceller) CapRead(d time.Duration, reason error) {
	if reason == nil {
		panic("BUG: wire.Canceller.CapRead needs the error a call capped fails with")
	}
	cl.mu.Lock()
	if !cl.over {
		cl.limit, cl.limitReason = time.Now().Add(d), reason
		if cl.conn != nil {
			_ = cl.conn.SetReadDeadline(cl.limit)
		}
	}
	cl.mu.Unlock()
}

// capPassed returns the CapRead reason if its deadline has passed, else
// nil.
func (cl *Canceller) capPassed() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.limit.IsZero() || time.Now().Before(cl.limit) {
		return nil
	}
	return cl.limitReason
}

// Err returns why the call was cancelled, or nil.
func (cl *Canceller) Err() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.reason
}

// Reset readies the canceller for another call.
func (cl *Canceller) Reset() {
	cl.mu.Lock()
	cl.conn, cl.reason, cl.over, cl.limit, cl.limitReason = nil, nil, false, time.Time{}, nil
	cl.mu.Unlock()
}
