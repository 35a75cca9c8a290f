package relay

import (
	"bufio"
	"io"
	"net"
	"strings"
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

func TestRelayPipesBothWaysAndPassesTheClose(t *testing.T) {
	saw := make(chan string, 1)
	up := upstream(t, saw)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(ln, up.Addr().String()) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
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
	ln.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return once its listener closed")
	}
}

func TestRelayClosesAClientItCannotConnect(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := dead.Addr().String()
	dead.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { _ = Serve(ln, addr) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read %d bytes, %v; want EOF as the relay hangs up", n, err)
	}
}

func TestServeEndsOpenRelaysWhenItsListenerCloses(t *testing.T) {
	up := upstream(t, make(chan string, 1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- Serve(ln, up.Addr().String()) }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	// One round trip, so the relay is surely running.
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ln.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve waited for a client that stays connected")
	}
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("read %d bytes, %v; want EOF once the relay has shut down", n, err)
	}
}
