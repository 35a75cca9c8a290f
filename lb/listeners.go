package lb

import (
	"net"
	"sync"
)

// The client listeners a Shutdown must close. fasthttp's Shutdown closes
// the listeners its Serve has registered, and a Serve that registers after
// the Shutdown began accepts for ever (a SIGTERM as pdlb starts; a test
// that stops a server at once). So Server.Serve records its listener first
// (listening), and Shutdown closes every one recorded, and any recorded
// later, itself (closeListeners). Both may close a listener: closeOnce
// makes the second Close a no-op, which fasthttp's Shutdown, failing on a
// Close error, needs.

// listeners is the Server's record of its client listeners.
type listeners struct {
	mu      sync.Mutex
	closing bool
	all     []net.Listener
}

// listening records ln and returns it wrapped to be closed once, or
// reports false, having closed it, when Shutdown has begun.
func (l *listeners) listening(ln net.Listener) (net.Listener, bool) {
	once := &closeOnce{Listener: ln}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		_ = once.Close()
		return nil, false
	}
	l.all = append(l.all, once)
	return once, true
}

// close closes every listener recorded, and makes listening close those
// that come later.
func (l *listeners) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	for _, ln := range l.all {
		_ = ln.Close()
	}
}

// closed reports whether close has run: a Serve's error is then the
// shutdown's doing.
func (l *listeners) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closing
}

// closeOnce is a listener whose Close closes it once; later ones report
// what the first did.
type closeOnce struct {
	net.Listener
	once sync.Once
	err  error
}

func (c *closeOnce) Close() error {
	c.once.Do(func() { c.err = c.Listener.Close() })
	return c.err
}
