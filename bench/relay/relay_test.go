package relay

import (
	"bufio"
	"io"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// upstream answers each line it reads with the line upper-cased, and reports
// on saw what each connection sent in all once the relay ends it.
func upstream(t *testing.T, saw chan<- string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var all strings.Builder
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					all.WriteString(line)
					if err != nil {
						saw <- all.String()
						return
					}
					if _, err := io.WriteString(c, strings.ToUpper(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln
}

// startRelay runs Serve to upstream on a loopback port and returns its
// address, and stop, which closes the listener and fails the test unless
// Serve then returns, without error, within 5 s. stop also runs at cleanup.
func startRelay(t *testing.T, upstreams ...string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(ln, upstreams...) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ln.Close()
			select {
			case err := <-served:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("Serve did not return within 5 s of its listener closing")
			}
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// dial connects to addr, with a 5 s deadline on all it does; the connection
// is closed at cleanup.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

func TestRelayPipesBothWaysAndPassesTheClose(t *testing.T) {
	saw := make(chan string, 1)
	addr, stop := startRelay(t, upstream(t, saw).Addr().String())
	c := dial(t, addr)
	r := bufio.NewReader(c)
	for _, line := range []string{"first\n", "second\n"} {
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
		got, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.ToUpper(line); got != want {
			t.Errorf("relayed answer %q, want %q", got, want)
		}
	}
	// A half close reaches the upstream, whose close ends the client's read.
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case all := <-saw:
		if all != "first\nsecond\n" {
			t.Errorf("upstream got %q", all)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client's close did not reach the upstream")
	}
	if rest, err := io.ReadAll(r); err != nil || len(rest) != 0 {
		t.Errorf("after the upstream closed, the client read %q, %v; want EOF", rest, err)
	}
	c.Close()
	stop()
}

func TestRelayClosesAClientItCannotConnect(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()
	addr, _ := startRelay(t, deadAddr)
	c := dial(t, addr)
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read %d bytes, %v; want EOF as the relay hangs up", n, err)
	}
}

func TestServeEndsOpenRelaysWhenItsListenerCloses(t *testing.T) {
	addr, stop := startRelay(t, upstream(t, make(chan string, 1)).Addr().String())
	c := dial(t, addr)
	// One round trip, so the relay is surely running.
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// The client stays connected: Serve must close it rather than wait.
	stop()
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read %d bytes, %v; want EOF once the relay has shut down", n, err)
	}
}

// Several upstreams take the connections in turn, as an L4 balancer's
// backends do.
func TestRelaySpreadsConnectionsOverItsUpstreams(t *testing.T) {
	sawA, sawB := make(chan string, 4), make(chan string, 4)
	addr, _ := startRelay(t, upstream(t, sawA).Addr().String(), upstream(t, sawB).Addr().String())
	for i := range 4 {
		c := dial(t, addr)
		if _, err := io.WriteString(c, "conn"+strconv.Itoa(i)+"\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
	}
	got := map[string]string{}
	for range 4 {
		select {
		case s := <-sawA:
			got[s] = "a"
		case s := <-sawB:
			got[s] = "b"
		case <-time.After(5 * time.Second):
			t.Fatal("a relayed connection did not end")
		}
	}
	want := map[string]string{"conn0\n": "a", "conn1\n": "b", "conn2\n": "a", "conn3\n": "b"}
	if !maps.Equal(got, want) {
		t.Fatalf("connections went %v; want %v", got, want)
	}
}
