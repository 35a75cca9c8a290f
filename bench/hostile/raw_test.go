package hostile

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The attacker's tools: raw connections that write what no well-behaved
// client would, and read the answer if there is one.

// dialTimeout bounds an attacker's connection attempt: past pdlb's
// descriptor limit, the kernel queues connections pdlb never accepts, and
// beyond its backlog it drops them.
const dialTimeout = time.Second

// dial opens an attacker's connection to addr.
func dial(addr string) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, dialTimeout)
}

// dialSmallWindow opens a connection whose receive buffer is as small as
// the kernel allows, so a client that stops reading stalls its sender
// after a few kilobytes.
func dialSmallWindow(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return d.Dial("tcp", addr)
}

// request is a raw HTTP/1.1 request: a POST of body to path with the given
// header lines (each without its CRLF) and a Content-Length.
func request(path string, headers []string, body string) string {
	var b strings.Builder
	b.WriteString("POST " + path + " HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	b.WriteString(body)
	return b.String()
}

// exchange sends raw on a connection of its own and reads the answer
// within timeout. It returns the status and the body.
func exchange(addr, raw string, timeout time.Duration) (int, string, error) {
	c, err := dial(addr)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, raw); err != nil {
		return 0, "", fmt.Errorf("cannot send the request: %w", err)
	}
	return readAnswer(c)
}

// readAnswer reads one HTTP answer from c.
func readAnswer(c net.Conn) (int, string, error) {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), err
}

// connSet is an attacker's connections, closed together when it lets go.
type connSet struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (s *connSet) add(c net.Conn) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
}

func (s *connSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// each calls f on every connection, dropping those it fails on.
func (s *connSet) each(f func(net.Conn) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.conns[:0]
	for _, c := range s.conns {
		if f(c) == nil {
			kept = append(kept, c)
		} else {
			c.Close()
		}
	}
	s.conns = kept
}

// closeAll lets every connection go.
func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

// openMany opens n connections to addr with up to 16 dials at a time,
// writing first on each (if not empty); it returns how many it could not
// open.
func (s *connSet) openMany(addr string, n int, first string) (failed int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range 16 {
		wg.Go(func() {
			for range next {
				c, err := dial(addr)
				if err == nil && first != "" {
					_ = c.SetWriteDeadline(time.Now().Add(dialTimeout))
					if _, err = io.WriteString(c, first); err != nil {
						c.Close()
					}
				}
				if err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					continue
				}
				s.add(c)
			}
		})
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return failed
}
