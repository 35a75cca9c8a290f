package wire

import (
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"pdlb/lb/internal/loopback"
	"pdlb/lb/internal/race"
)

// acceptedPair returns both ends of a loopback TCP connection, the server's
// wrapped as pdlb's listener wraps it.
func acceptedPair(t *testing.T) (client net.Conn, server *ClientConn) {
	t.Helper()
	client, c, err := loopback.Pair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	server = NewClientConn(c, NewSteps())
	if server.raw == nil {
		t.Fatal("a TCP connection was accepted without its raw connection: reads would not read ahead")
	}
	return client, server
}

func TestShortReadReadsTheWholeRequestAhead(t *testing.T) {
	client, c := acceptedPair(t)
	const request = "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	if _, err := client.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	first := make([]byte, 1)
	if n, err := c.Read(first); n != 1 || err != nil || first[0] != 'P' {
		t.Fatalf("first read: %d %q %v, want the request's first byte", n, first[:n], err)
	}
	if len(c.ahead) != len(request)-1 {
		t.Fatalf("after a one-byte read %d bytes are held ahead, want the other %d of the request", len(c.ahead), len(request)-1)
	}
	// The rest comes from the buffer, however it is asked for.
	got := string(first)
	for len(got) < len(request) {
		p := make([]byte, 7)
		n, err := c.Read(p)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got += string(p[:n])
	}
	if got != request {
		t.Fatalf("read %q, want %q", got, request)
	}
	if c.ahead != nil || c.aheadBuf != nil {
		t.Fatal("the buffer is still held once everything read ahead was returned")
	}
}

func TestLongReadsGoStraightToTheSocket(t *testing.T) {
	client, c := acceptedPair(t)
	if _, err := client.Write([]byte("0123456789abcdefghij")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	p := make([]byte, 64)
	n, err := c.Read(p)
	if err != nil || string(p[:n]) == "" {
		t.Fatalf("read %q, %v", p[:n], err)
	}
	if c.aheadBuf != nil {
		t.Fatal("a read with room for the request took a read-ahead buffer")
	}
}

// A keep-alive request read through the read-ahead path allocates
// nothing: the buffer is pooled and the poller's callback is bound once.
func TestReadAheadAllocatesNothing(t *testing.T) {
	client, c := acceptedPair(t)
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	const request = "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	req, p := []byte(request), make([]byte, len(request))
	readOne := func() {
		if _, err := client.Write(req); err != nil {
			t.Fatal(err)
		}
		// fasthttp's way: the first byte alone, then the rest.
		if n, err := c.Read(p[:1]); n != 1 || err != nil {
			t.Fatalf("first byte: %d, %v", n, err)
		}
		for got := 1; got < len(request); {
			n, err := c.Read(p[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	readOne() // fills the pool
	if allocs := testing.AllocsPerRun(100, readOne); allocs != 0 && !race.Enabled {
		t.Fatalf("a request read ahead costs %v allocations, want 0", allocs)
	}
}

// readWaits returns a channel that gets a value each time a read of c
// finds the socket empty and waits for the poller (a few at most are
// kept).
func readWaits(c *ClientConn) <-chan struct{} {
	waits := make(chan struct{}, 16)
	readOnce := c.readSocket
	c.readSocket = func(fd uintptr) bool {
		ready := readOnce(fd)
		if !ready {
			select {
			case waits <- struct{}{}:
			default:
			}
		}
		return ready
	}
	return waits
}

// A request that arrives in pieces, each after the read found the socket
// empty, is read whole, as fasthttp reads it: a byte, then the rest.
func TestRequestInPiecesIsReadWhole(t *testing.T) {
	client, c := acceptedPair(t)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	const request = "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
	pieces := []string{request[:1], request[1:30], request[30:]}
	sent := make(chan error, 1)
	waits := readWaits(c)
	go func() {
		for _, piece := range pieces {
			<-waits
			if _, err := client.Write([]byte(piece)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	// Reads short enough to read ahead, as fasthttp's first one is.
	got := make([]byte, 0, len(request))
	p := make([]byte, maxAheadRead)
	for len(got) < len(request) {
		n, err := c.Read(p)
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, p[:n]...)
	}
	if string(got) != request {
		t.Fatalf("read %q, want %q", got, request)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

func TestReadAheadReportsEndAndDeadline(t *testing.T) {
	t.Run("client closes", func(t *testing.T) {
		client, c := acceptedPair(t)
		client.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("read on a closed connection: %d, %v; want 0, EOF", n, err)
		}
	})
	t.Run("deadline passes", func(t *testing.T) {
		_, c := acceptedPair(t)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("read past its deadline: %v, want a timeout", err)
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past its deadline: %v, want it to wrap os.ErrDeadlineExceeded as a plain read's does", err)
		}
	})
	t.Run("data after a wait", func(t *testing.T) {
		client, c := acceptedPair(t)
		waits := readWaits(c)
		go func() {
			<-waits
			_, _ = client.Write([]byte("late"))
		}()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		p := make([]byte, 1)
		if n, err := c.Read(p); n != 1 || err != nil || p[0] != 'l' {
			t.Fatalf("read after a wait: %d %q %v", n, p[:n], err)
		}
	})
}

// deadlineCounter counts the read deadlines given to its connection.
type deadlineCounter struct {
	net.Conn
	moves int
}

func (d *deadlineCounter) SetReadDeadline(t time.Time) error {
	d.moves++
	return d.Conn.SetReadDeadline(t)
}

// fasthttp's deadlines reach the socket only when a read goes to it, and
// a deadline in the step the socket has already moves nothing.
func TestClientReadDeadlineMovesOncePerStep(t *testing.T) {
	client, c := acceptedPair(t)
	socket := &deadlineCounter{Conn: c.Conn}
	c.Conn = socket
	readOne := func(what string, wantMoves int) {
		t.Helper()
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); n != 1 || err != nil {
			t.Fatalf("%s: read %d, %v", what, n, err)
		}
		if socket.moves != wantMoves {
			t.Fatalf("%s: the socket's deadline moved %d times in all, want %d", what, socket.moves, wantMoves)
		}
	}
	// Early in a step, so that 10 ms later is still in it.
	first := c.steps.Round(time.Now().Add(time.Minute)).Add(-DeadlineStep + time.Millisecond)
	_ = c.SetReadDeadline(first)
	_ = c.SetReadDeadline(first.Add(time.Millisecond))
	if socket.moves != 0 {
		t.Fatal("SetReadDeadline moved the socket's deadline before any read")
	}
	readOne("first deadline", 1)
	if want := c.steps.Round(first); !c.armed.Equal(want) {
		t.Fatalf("the socket has %v, want %v (the deadline rounded up)", c.armed, want)
	}
	_ = c.SetReadDeadline(first.Add(10 * time.Millisecond))
	readOne("a deadline in the same step", 1)
	_ = c.SetReadDeadline(first.Add(DeadlineStep))
	readOne("a deadline in the next step", 2)
	_ = c.SetReadDeadline(time.Time{})
	readOne("no deadline", 3)
	if !c.armed.IsZero() {
		t.Fatalf("the socket keeps the deadline %v after it was cleared", c.armed)
	}
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := c.Read(make([]byte, 1)); !IsTimeout(err) {
		t.Fatalf("a read past its deadline: %v, want a timeout", err)
	}
}

// A watch interrupts its read with a deadline of its own; the connection's
// deadline holds again once the watch is over.
func TestUnwatchRestoresTheReadDeadline(t *testing.T) {
	_, c := acceptedPair(t)
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := c.armRead(); err != nil {
		t.Fatal(err)
	}
	c.Watch(func() { t.Error("the client was taken for gone") })
	if c.done == nil {
		t.Fatal("the watch did not start")
	}
	c.Unwatch()
	read := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		read <- err
	}()
	select {
	case err := <-read:
		if !IsTimeout(err) {
			t.Fatalf("read after the watch: %v, want a timeout", err)
		}
	case <-time.After(2 * time.Second):
		c.Close() // ends the read
		t.Fatalf("a read after the watch outlived its deadline (at most %s away) by seconds", 50*time.Millisecond+DeadlineStep)
	}
}

// The Watcher's timer keeps running from one request to the next: a
// request armed while it runs for an earlier one is watched only once it
// has itself waited WatchAfter, and then its client's leaving is seen. On
// an in-memory connection, in a bubble: WatchAfter passes on its clock.
func TestWatcherWaitsForTheRequestArmedLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, conn := net.Pipe()
		c := NewClientConn(conn, NewSteps())
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		gone := make(chan time.Time, 1)
		var w Watcher
		w.Init(func() { gone <- time.Now() }, time.Now)

		w.Arm(c, time.Now()) // a short request: its timer keeps running
		w.Disarm()
		time.Sleep(WatchAfter / 2) // on the bubble's clock
		second := time.Now()
		w.Arm(c, second)
		client.Close()
		select {
		case at := <-gone:
			if waited := at.Sub(second); waited != WatchAfter {
				t.Fatalf("the watch saw the client leave %s after the request; want WatchAfter (%s)", waited, WatchAfter)
			}
		case <-time.After(WatchAfter + 3*time.Second):
			t.Fatal("the client's leaving was never seen")
		}
		w.Disarm()
	})
}

func TestWatchDoesNotStartWhileBytesAreReadAhead(t *testing.T) {
	client, c := acceptedPair(t)
	if _, err := client.Write([]byte("GET / HTTP/1.1\r\n\r\nGET /next")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c.Watch(func() { t.Error("the client was taken for gone") })
	if c.done != nil {
		t.Fatal("a watch started though the client's next bytes are already read")
	}
}

// An answer larger than the write buffer goes out in one writev: its first
// write, the full buffer, is held back until the second comes.
func TestLargeAnswerIsHeldForOneWrite(t *testing.T) {
	client, c := acceptedPair(t)
	full := []byte(strings.Repeat("h", ClientWriteBufferSize))
	rest := []byte(strings.Repeat("r", 3000))
	expect := func(want string) {
		t.Helper()
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(want))
		if _, err := io.ReadFull(client, got); err != nil || string(got) != want {
			t.Fatalf("the client read %.40q... (%d bytes), %v; want %.40q... (%d bytes)", got, len(got), err, want, len(want))
		}
	}

	c.HoldLargeAnswer()
	if n, err := c.Write(full); n != len(full) || err != nil {
		t.Fatalf("the held write returned %d, %v", n, err)
	}
	if c.held == nil {
		t.Fatal("the full buffer of a large answer was written at once")
	}
	if n, err := c.Write(rest); n != len(rest) || err != nil {
		t.Fatalf("the second write returned %d, %v", n, err)
	}
	if c.held != nil || c.holdNext {
		t.Fatal("the held write was not sent with the second")
	}
	expect(string(full) + string(rest))

	// Unasked, or with a first write that is not the full buffer (the
	// answer fit after all), nothing is held.
	if _, err := c.Write(full); err != nil || c.held != nil {
		t.Fatalf("an unannounced write was held (%v)", err)
	}
	expect(string(full))
	c.HoldLargeAnswer()
	if _, err := c.Write(rest); err != nil || c.held != nil || c.holdNext {
		t.Fatalf("a write shorter than the buffer was held, or the hold stayed armed (%v)", err)
	}
	expect(string(rest))

	// A read sends what is held first: the client may wait for it.
	c.HoldLargeAnswer()
	_, _ = c.Write(full)
	if _, err := client.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 64)); err != nil || c.held != nil {
		t.Fatalf("the read failed (%v) or left the write held", err)
	}
	expect(string(full))

	if n := testing.AllocsPerRun(100, func() {
		c.HoldLargeAnswer()
		_, _ = c.Write(full)
		_, _ = c.Write(rest)
		_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.ReadFull(client, make([]byte, len(full)+len(rest)))
	}); n > 1 && !race.Enabled { // the read buffer of the check
		t.Fatalf("a held answer cost %.1f allocations; want none", n-1)
	}
}
