package wire

import (
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

// Listener wraps each accepted connection in a ClientConn, admitted into
// Budget first or refused. An accept that fails for want of resources (out
// of file descriptors, say, under a flood of connections) is tried again
// after a pause, as Go's net/http does: fasthttp would take it for the
// listener's end and stop serving.
// Every field must be set.
type Listener struct {
	net.Listener
	Log    *zerolog.Logger
	Budget *Budget
	// Steps rounds the connections' deadlines.
	Steps Steps
	// OutOfResources reports whether an accept failed for want of
	// descriptors or memory (lb passes health.OutOfResources, which its
	// probes share).
	OutOfResources func(error) bool
}

func (l Listener) Accept() (net.Conn, error) {
	var pause time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			cc := NewClientConn(c, l.Steps)
			if l.Budget.admit(cc) {
				return cc, nil
			}
			l.Budget.refuse(c)
			continue
		}
		if !l.mayRecover(err) {
			return nil, err
		}
		pause = min(max(2*pause, 5*time.Millisecond), time.Second)
		l.Log.Error().Err(err).Dur("retry_in", pause).Msg("cannot accept a connection")
		time.Sleep(pause)
	}
}

// mayRecover reports whether a failed accept may succeed later: the
// process or system ran out of descriptors or memory, or a client left
// before it was accepted.
func (l Listener) mayRecover(err error) bool {
	return l.OutOfResources(err) || errors.Is(err, syscall.ECONNABORTED)
}
