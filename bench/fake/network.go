package fake

import (
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp/fasthttputil"
)

// defaultDialTimeout bounds a TCP dial on a TCP Network.
const defaultDialTimeout = 3 * time.Second

// Network connects fake servers and their clients: in memory for tests, or
// over TCP. It also keeps an in-process registry of the prefills started on
// it, by bootstrap address, so a decode of the same process meets its prefill
// without HTTP.
//
// A Network is safe for concurrent use. The zero value is not usable: call
// NewNetwork or NewTCPNetwork.
type Network struct {
	tcp         bool
	dialTimeout time.Duration

	mu        sync.RWMutex
	listeners map[string]*memListener // in memory only, by canonical address
	prefills  map[string]*Server      // by canonical bootstrap address
}

// NewNetwork returns an in-memory Network: every address is a
// fasthttputil.InmemoryListener, so no port is ever opened. Addresses are
// any "host:port" strings; hosts compare case-insensitively.
func NewNetwork() *Network {
	return &Network{
		dialTimeout: defaultDialTimeout,
		listeners:   make(map[string]*memListener),
		prefills:    make(map[string]*Server),
	}
}

// NewTCPNetwork returns a Network over real TCP: Listen is net.Listen("tcp")
// and Dial is net.DialTimeout("tcp") with a 3 s timeout.
func NewTCPNetwork() *Network {
	n := NewNetwork()
	n.tcp = true
	return n
}

// Listen listens on addr. In memory, it fails with an error wrapping
// syscall.EADDRINUSE while addr is listened on; once that listener is closed
// the address may be listened on again (a restarted server).
func (n *Network) Listen(addr string) (net.Listener, error) {
	if n.tcp {
		return net.Listen("tcp", addr)
	}
	key := canonicalAddr(addr)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listeners[key] != nil {
		return nil, &net.OpError{Op: "listen", Net: "memory", Addr: memAddr(key), Err: syscall.EADDRINUSE}
	}
	ln := &memListener{InmemoryListener: fasthttputil.NewInmemoryListener(), n: n, key: key}
	ln.SetLocalAddr(memAddr(key))
	n.listeners[key] = ln
	return ln, nil
}

// Dial connects to addr; it has the signature of fasthttp.DialFunc. In
// memory, an address nobody listens on fails with an error wrapping
// syscall.ECONNREFUSED, as a real dial would. An in-memory dial returns once
// the server has accepted the connection.
func (n *Network) Dial(addr string) (net.Conn, error) {
	if n.tcp {
		// Not fasthttp.DialTimeout: its shared dialer starts a DNS cache
		// goroutine that never ends.
		return net.DialTimeout("tcp", addr, n.dialTimeout)
	}
	key := canonicalAddr(addr)
	n.mu.RLock()
	ln := n.listeners[key]
	n.mu.RUnlock()
	if ln == nil {
		return nil, refused(key)
	}
	c, err := ln.Dial()
	if err != nil {
		return nil, refused(key)
	}
	return memConn{c}, nil
}

// memConn is the client end of an in-memory connection. Writing to one
// whose server end has closed fails as it does over TCP, with EPIPE, so
// clients tell a dropped connection from other failures the same way on
// both networks.
type memConn struct{ net.Conn }

func (c memConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if errors.Is(err, fasthttputil.ErrConnectionClosed) {
		err = &net.OpError{Op: "write", Net: "memory", Addr: c.RemoteAddr(), Err: syscall.EPIPE}
	}
	return n, err
}

// addPrefill registers s under its bootstrap address, and under loopback
// aliases when that address has no specific host. It returns the keys to
// pass to removePrefill.
func (n *Network) addPrefill(addr string, s *Server) []string {
	keys := []string{canonicalAddr(addr)}
	if host, port, err := net.SplitHostPort(addr); err == nil && isUnspecified(host) {
		keys = append(keys[:0], joinHostPort("127.0.0.1", port), joinHostPort("localhost", port), joinHostPort("::1", port))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range keys {
		n.prefills[k] = s
	}
	return keys
}

// removePrefill undoes addPrefill, leaving keys that another server took
// over since.
func (n *Network) removePrefill(keys []string, s *Server) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range keys {
		if n.prefills[k] == s {
			delete(n.prefills, k)
		}
	}
}

// prefill returns the prefill registered at the canonical bootstrap address
// addr, or nil.
func (n *Network) prefill(addr string) *Server {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.prefills[addr]
}

// memListener is an in-memory listener that frees its address when closed.
type memListener struct {
	*fasthttputil.InmemoryListener
	n    *Network
	key  string
	once sync.Once
}

// Close stops accepting and frees the address for a later Listen.
func (ln *memListener) Close() error {
	ln.once.Do(func() {
		ln.n.mu.Lock()
		if ln.n.listeners[ln.key] == ln {
			delete(ln.n.listeners, ln.key)
		}
		ln.n.mu.Unlock()
	})
	return ln.InmemoryListener.Close()
}

// memAddr is the net.Addr of an in-memory listener.
type memAddr string

func (a memAddr) Network() string { return "memory" }
func (a memAddr) String() string  { return string(a) }

func refused(addr string) error {
	return &net.OpError{Op: "dial", Net: "memory", Addr: memAddr(addr), Err: syscall.ECONNREFUSED}
}

// canonicalAddr lower-cases the host of addr and brackets IPv6 literals, so
// "Prefill:8998", "prefill:8998" and a bootstrap_host/port pair built from
// them name the same server. Addresses without a port are only lower-cased.
func canonicalAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return strings.ToLower(addr)
	}
	return joinHostPort(host, port)
}

// joinHostPort joins a host, bracketed or not, and a port canonically.
func joinHostPort(host, port string) string {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return net.JoinHostPort(strings.ToLower(host), port)
}

func isUnspecified(host string) bool {
	return host == "" || host == "0.0.0.0" || host == "::"
}
