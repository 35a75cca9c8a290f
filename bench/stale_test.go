package bench

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// oneShotServer answers HTTP/1.1 requests on a loopback listener without
// "Connection: close", as a keep-alive server would. With closeAfter it
// closes each connection after its first answer, as a server with a short
// idle timeout does to a connection the client keeps; otherwise it reads
// the second request of a connection and closes without answering, as a
// server that crashed on it would. closed(addr) is done once the server
// closed the connection from client address addr.
type oneShotServer struct {
	ln         net.Listener
	closeAfter bool
	requests   atomic.Int32
	mu         sync.Mutex
	closedCh   map[string]chan struct{}
}

func startOneShot(t *testing.T, closeAfter bool) *oneShotServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &oneShotServer{ln: ln, closeAfter: closeAfter, closedCh: map[string]chan struct{}{}}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *oneShotServer) closed(addr string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.closedCh[addr]
	if !ok {
		ch = make(chan struct{})
		s.closedCh[addr] = ch
	}
	return ch
}

func (s *oneShotServer) serve(c net.Conn) {
	defer close(s.closed(c.RemoteAddr().String()))
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; ; i++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.requests.Add(1)
		if i == 1 {
			return // received, never answered
		}
		const body = `{"text":"","meta_info":{"completion_tokens":1}}`
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 47\r\n\r\n"+body)
		if s.closeAfter {
			return
		}
	}
}

// closeWaitConn holds each answer until the server has closed the
// connection, so that the client finds it closed when it sends the next
// request, as it would after any pause longer than the server's idle
// timeout. The embedded *net.TCPConn keeps its SyscallConn.
type closeWaitConn struct {
	*net.TCPConn
	closed chan struct{}
}

func (c *closeWaitConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		select {
		case <-c.closed:
		case <-time.After(5 * time.Second): // a failure deadline
		}
	}
	return n, err
}

// TestRunStaleConnection runs against a server that closes every
// connection after one answer. The requests that found their kept-alive
// connection closed were once counted as transport errors, though none
// was sent: they must go on a new connection.
func TestRunStaleConnection(t *testing.T) {
	s := startOneShot(t, true)
	var dials atomic.Int32
	rep := run(t, Config{
		URL:      "http://" + s.ln.Addr().String(),
		Requests: 6,
		Timeout:  5 * time.Second,
		// The server closes at once, not after a keep-alive timeout: every
		// reuse is checked.
		staleCheckAfter: time.Nanosecond,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return &closeWaitConn{TCPConn: c.(*net.TCPConn), closed: s.closed(c.LocalAddr().String())}, nil
		},
	})
	checkCounts(t, rep, 6, 6)
	if got := s.requests.Load(); got != 6 {
		t.Fatalf("the server got %d requests; want 6", got)
	}
	if got := dials.Load(); got != 6 {
		t.Fatalf("got %d connections; want 6, one per answer", got)
	}
}

// TestRunNoRetryOnceSent has the server read a request and close without
// answering: the request may have been acted on, so it must fail, not go
// again.
func TestRunNoRetryOnceSent(t *testing.T) {
	s := startOneShot(t, false)
	rep := run(t, Config{URL: "http://" + s.ln.Addr().String(), Requests: 2, Timeout: 5 * time.Second})
	checkCounts(t, rep, 2, 1)
	if rep.Errors[KindTransport] != 1 {
		t.Fatalf("got errors %v; want %s: 1", rep.Errors, KindTransport)
	}
	if got := s.requests.Load(); got != 2 {
		t.Fatalf("the server got %d requests; want 2: the unanswered one must not be sent again", got)
	}
}
