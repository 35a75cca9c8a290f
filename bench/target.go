package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// maxResponseBodySize caps a buffered (non-stream) answer, so a runaway
// server cannot exhaust the generator's memory.
const maxResponseBodySize = 64 << 20

var (
	// errInterrupted refuses new connections once the run was cancelled.
	errInterrupted = errors.New("run interrupted")
	// errStaleConn refuses to send a request on a kept-alive connection
	// the target has already closed.
	errStaleConn = errors.New("the target closed the idle connection")
)

// target is one endpoint under load: the URI every request goes to and a
// HostClient whose connections are tracked, so that a cancelled run can cut
// requests in flight (fasthttp has no per-request context). It is safe for
// concurrent use; close releases everything it dialled.
type target struct {
	uri  string
	hc   *fasthttp.HostClient
	ctx  context.Context // the run's: it ends the dials, which fasthttp cannot
	dial func(ctx context.Context, addr string) (net.Conn, error)

	// staleAfter is staleCheckAfter, but in tests.
	staleAfter time.Duration

	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

// newTarget parses rawURL and builds a client sized for concurrency
// connections, whose dials end with ctx.
func newTarget(ctx context.Context, rawURL, route string, dial func(context.Context, string) (net.Conn, error), concurrency int, timeout time.Duration) (*target, error) {
	u, err := parseTargetURL(rawURL)
	if err != nil {
		return nil, err
	}
	if dial == nil {
		dial = contextDial(timeout)
	}
	path, err := endpointPath(u.EscapedPath(), route)
	if err != nil {
		return nil, fmt.Errorf("url %q %w", rawURL, err)
	}
	t := &target{
		uri:   u.Scheme + "://" + u.Host + path,
		ctx:   ctx,
		dial:  dial,
		conns: make(map[*trackedConn]struct{}),
	}
	t.hc = t.newHostClient(dialAddr(u), u.Scheme == "https", concurrency, timeout)
	return t, nil
}

// parseTargetURL parses a target's base URL, refusing one the run could
// not use (another scheme, no host, a query or fragment, a port out of
// range) before any load rather than failing each request.
func parseTargetURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("cannot parse url %q: %w", rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("url %q: scheme must be http or https", rawURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("url %q has no host", rawURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("url %q: want a base url without query or fragment", rawURL)
	}
	if p := u.Port(); p != "" {
		// url.Parse takes any digits; the dial would fail each request
		// with a connect error instead of refusing the run.
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("url %q: port must be from 1 to 65535", rawURL)
		}
	}
	return u, nil
}

// dialAddr returns the host:port to dial for u, with its scheme's port
// when it names none: HostClient.Addr must carry one.
func dialAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// contextDial returns the dial a target uses when Config.Dial is nil.
// fasthttp's dialers take no context, and a connect to a host that drops
// SYNs (or a full backlog) would hold an interrupted run for the whole
// timeout. "tcp" tries IPv4 and IPv6.
func contextDial(timeout time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}

// newHostClient returns the client of t's requests to addr: its dials go
// through t, so that close can cut them, and its settings (each says why)
// keep a long run's connections alive and never send a request twice.
func (t *target) newHostClient(addr string, isTLS bool, concurrency int, timeout time.Duration) *fasthttp.HostClient {
	return &fasthttp.HostClient{
		Addr:  addr,
		Name:  "pdlb-bench",
		IsTLS: isTLS,
		Dial:  t.dialTracked,
		// Each client holds at most one connection; waiting instead of
		// failing with ErrNoFreeConns covers a closing connection that
		// has not been counted out yet.
		MaxConns:           concurrency,
		MaxConnWaitTimeout: timeout,
		// Below the 5 s after which SGLang servers drop idle connections
		// (uvicorn's timeout_keep_alive), so a pause never leaves a dead one
		// pooled.
		MaxIdleConnDuration: 3 * time.Second,
		// Retry only a request that never left: trackedConn refuses to
		// write on a connection the target closed while it was idle (a
		// shorter keep-alive than ours, or one answer per connection),
		// as net/http retries on errServerClosedIdle. A request that may
		// have reached the target is never sent twice. Each attempt
		// closes one stale connection, so concurrency+1 attempts reach a
		// new one.
		MaxIdemponentCallAttempts: concurrency + 1,
		RetryIfErr: func(_ *fasthttp.Request, _ int, err error) (resetTimeout, retry bool) {
			return false, errors.Is(err, errStaleConn)
		},
		MaxResponseBodySize:    maxResponseBodySize,
		DisablePathNormalizing: true,
	}
}

// dialError marks a failure to connect, so it is told apart from failures
// on an open connection.
type dialError struct{ err error }

func (e *dialError) Error() string { return "cannot connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// dialTracked dials and remembers the connection until it is closed.
func (t *target) dialTracked(addr string) (net.Conn, error) {
	c, err := t.dial(t.ctx, addr)
	if err != nil {
		return nil, &dialError{err}
	}
	tc := &trackedConn{Conn: c, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return nil, errInterrupted
	}
	t.conns[tc] = struct{}{}
	return tc, nil
}

// close closes every connection, cutting requests in flight, and refuses
// new ones. It is idempotent.
func (t *target) close() {
	t.hc.CloseIdleConnections() // through the pool, which counts them out
	t.mu.Lock()
	t.closed = true
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// trackedConn is a connection its target can close from outside, and that
// checks it is still open before a request is written on it again. One
// request at a time uses it.
type trackedConn struct {
	net.Conn
	t *target
	// answered is when bytes were last read, zero once a request is
	// written: the connection carried an answer and waits for reuse.
	answered time.Time
}

// staleCheckAfter is how long a connection must have been idle for its
// next request to check first that the target has not closed it. Servers
// keep idle connections for seconds (uvicorn 5 s), so a closed-loop client
// going from answer to request at once skips the check, and its system
// call.
const staleCheckAfter = 100 * time.Millisecond

// Read notes that the connection has carried an answer.
func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered = time.Now()
	}
	return n, err
}

// Write refuses the first write of a request on a kept-alive connection
// the target has closed while it was idle: nothing is sent, so the request
// can go on another.
func (c *trackedConn) Write(p []byte) (int, error) {
	if !c.answered.IsZero() {
		idle := time.Since(c.answered)
		c.answered = time.Time{}
		if idle >= c.t.staleAfter && peerClosed(c.Conn) {
			return 0, errStaleConn
		}
	}
	return c.Conn.Write(p)
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}
