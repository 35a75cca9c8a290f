package lb

import (
	"net"
	"strconv"
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

// has reports whether one of l's listeners takes connections at addr, a
// worker's host:port: the same port, on an address of this machine
// (loopback, the listener's own, or any of its interfaces' when it listens
// on all). A host given by name but localhost is not resolved.
func (l *listeners) has(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	if host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	if ip == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ln := range l.all {
		tcp, ok := ln.Addr().(*net.TCPAddr)
		if !ok || strconv.Itoa(tcp.Port) != port {
			continue
		}
		if ip.IsLoopback() || ip.IsUnspecified() || ip.Equal(tcp.IP) || tcp.IP.IsUnspecified() && localAddress(ip) {
			return true
		}
	}
	return false
}

// localAddress reports whether ip is an address of one of this machine's
// interfaces.
func localAddress(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
