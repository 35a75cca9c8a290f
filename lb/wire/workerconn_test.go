package wire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"pdlb/lb/internal/loopback"
	"pdlb/lb/internal/race"
)

// workerPair returns both ends of a loopback TCP connection, pdlb's end
// wrapped as its dial wraps it.
func workerPair(t *testing.T) (c *workerConn, worker net.Conn) {
	t.Helper()
	conn, worker, err := loopback.Pair()
	if err != nil {
		t.Fatal(err)
	}
	c = newWorkerConn(conn)
	t.Cleanup(func() { c.Close(); worker.Close() })
	if c.raw == nil {
		t.Fatal("a TCP connection was wrapped without its raw connection: requests would not be staged")
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_ = worker.SetDeadline(time.Now().Add(5 * time.Second))
	return c, worker
}

// stagedWrite writes p as the round trip writes a request.
func stagedWrite(t *testing.T, c *workerConn, p ...[]byte) {
	t.Helper()
	c.stageRequest(true)
	defer c.stageRequest(false)
	for _, b := range p {
		if n, err := c.Write(b); n != len(b) || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
}

// workerAnswers reads want from worker and writes reply.
func workerAnswers(t *testing.T, worker net.Conn, want, reply string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(worker, got); err != nil || string(got) != want {
		t.Errorf("the worker got %.40q, %v; want %.40q", got, err, want)
		return
	}
	if _, err := worker.Write([]byte(reply)); err != nil {
		t.Error(err)
	}
}

func TestStagedRequestGoesOutWithTheFirstRead(t *testing.T) {
	c, worker := workerPair(t)
	const request, reply = "POST /generate HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\n"
	stagedWrite(t, c, []byte(request))
	// Held back: nothing reaches the worker before the answer is read.
	_ = worker.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, err := worker.Read(make([]byte, 1)); n != 0 || !IsTimeout(err) {
		t.Fatalf("the worker read %d bytes (%v) before pdlb read the answer", n, err)
	}
	_ = worker.SetReadDeadline(time.Now().Add(5 * time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		workerAnswers(t, worker, request, reply)
	}()
	p := make([]byte, 64)
	n, err := c.Read(p)
	if err != nil || string(p[:n]) != reply {
		t.Fatalf("read %q, %v; want %q", p[:n], err, reply)
	}
	<-done
	if c.staged != nil {
		t.Fatal("the request is still held once sent")
	}
}

// A request written in several small writes, or too large to hold, or
// written with staging off, goes out before its answer is read.
func TestRequestsNotHeldGoOutAsTheyCome(t *testing.T) {
	big := bytes.Repeat([]byte("b"), maxStagedRequest+1)
	for name, writes := range map[string][][]byte{
		"two writes": {[]byte("head "), []byte("body")},
		"too large":  {big},
	} {
		t.Run(name, func(t *testing.T) {
			c, worker := workerPair(t)
			var want []byte
			for _, w := range writes {
				want = append(want, w...)
			}
			// The worker reads the whole request before pdlb reads: no read
			// sends any of it.
			got := make(chan []byte, 1)
			go func() {
				b := make([]byte, len(want))
				_, _ = io.ReadFull(worker, b)
				got <- b
			}()
			stagedWrite(t, c, writes...)
			if c.staged != nil && !bytes.Equal(*c.staged, writes[len(writes)-1]) {
				t.Fatalf("holds %q", *c.staged)
			}
			// The last write of several may be held; the read sends it.
			go func() { _, _ = c.Read(make([]byte, 1)) }()
			if b := <-got; !bytes.Equal(b, want) {
				t.Fatalf("the worker got %d bytes %.40q, want %d %.40q", len(b), b, len(want), want)
			}
		})
	}
	t.Run("staging off", func(t *testing.T) {
		c, worker := workerPair(t)
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if c.staged != nil {
			t.Fatal("a write outside a round trip was held")
		}
		if n, err := worker.Read(make([]byte, 1)); n != 1 || err != nil {
			t.Fatalf("the worker read %d, %v", n, err)
		}
	})
}

// A request too large for fasthttp's write buffer comes in two writes, the
// full buffer and the rest: the first is held until the second, and both
// go out then, in one writev, with no read needed.
func TestRequestInTwoWritesGoesOutWithTheSecond(t *testing.T) {
	c, worker := workerPair(t)
	start := bytes.Repeat([]byte("s"), maxStagedRequest)
	rest := bytes.Repeat([]byte("r"), 5*maxStagedRequest)
	c.stageRequest(true)
	if _, err := c.Write(start); err != nil || c.staged == nil {
		t.Fatalf("the request's start was not held (%v)", err)
	}
	if n, err := c.Write(rest); n != len(rest) || err != nil {
		t.Fatalf("the rest: %d, %v", n, err)
	}
	c.stageRequest(false)
	if c.staged != nil {
		t.Fatal("the request's start is still held once the rest is written")
	}
	got := make([]byte, len(start)+len(rest))
	if _, err := io.ReadFull(worker, got); err != nil || !bytes.Equal(got, append(start, rest...)) {
		t.Fatalf("the worker got %.40q... (%v); want the start, then the rest", got, err)
	}

	if allocs := testing.AllocsPerRun(20, func() {
		c.stageRequest(true)
		_, _ = c.Write(start)
		_, _ = c.Write(rest)
		c.stageRequest(false)
		_, _ = io.ReadFull(worker, got)
	}); allocs != 0 && !race.Enabled {
		t.Fatalf("a request in two writes costs %v allocations, want 0", allocs)
	}
}

// When the socket cannot take the whole request (the worker is not
// reading), the rest is sent as any write, and the answer then read.
func TestStagedRequestLargerThanTheSocketTakes(t *testing.T) {
	c, worker := workerPair(t)
	// Fill the socket's buffers until a write would wait, to the byte.
	var filled int
	for _, size := range []int{64 << 10, 1 << 10, 1} {
		chunk := bytes.Repeat([]byte("f"), size)
		_ = c.Conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		for {
			n, err := c.Conn.Write(chunk)
			filled += n
			if err != nil {
				if !IsTimeout(err) {
					t.Fatal(err)
				}
				break
			}
		}
	}
	c.writeBy = time.Time{}
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	request := strings.Repeat("r", maxStagedRequest)
	stagedWrite(t, c, []byte(request))
	// The worker reads once pdlb's read has found the socket full.
	full := make(chan struct{})
	sendAndRead := c.sendThenRead
	c.sendThenRead = func(fd uintptr) bool {
		done := sendAndRead(fd)
		if c.got.full {
			close(full)
		}
		return done
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-full:
		case <-time.After(5 * time.Second):
			t.Error("the socket took the whole request: the test filled it too little")
			return
		}
		if _, err := io.CopyN(io.Discard, worker, int64(filled)); err != nil {
			t.Error(err)
			return
		}
		workerAnswers(t, worker, request, "ok")
	}()
	p := make([]byte, 8)
	n, err := c.Read(p)
	if err != nil || string(p[:n]) != "ok" {
		t.Fatalf("read %q, %v; want the answer", p[:n], err)
	}
	<-done
}

// waitReadable waits, through the poller, until c's socket has something to
// read (data, or its peer's end), and reads none of it.
func waitReadable(t *testing.T, c *workerConn) {
	t.Helper()
	var peek [1]byte
	err := c.raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return err != syscall.EAGAIN
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A worker that closed the connection fails the read as a dropped
// connection, which the round trip takes for a stale one to resend on;
// a worker that never answers, with the read deadline.
func TestStagedRequestFailures(t *testing.T) {
	t.Run("worker gone", func(t *testing.T) {
		c, worker := workerPair(t)
		worker.Close()
		waitReadable(t, c)
		stagedWrite(t, c, []byte("GET / HTTP/1.1\r\n\r\n"))
		_, err := c.Read(make([]byte, 64))
		if !IsConnDrop(err) {
			t.Fatalf("read after the worker left: %v, want a dropped connection", err)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		c, _ := workerPair(t)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		stagedWrite(t, c, []byte("GET / HTTP/1.1\r\n\r\n"))
		_, err := c.Read(make([]byte, 64))
		if !IsTimeout(err) {
			t.Fatalf("read with no answer: %v, want a timeout", err)
		}
		if c.staged != nil {
			t.Fatal("the request is still held after the read failed")
		}
	})
	t.Run("connection closed by pdlb", func(t *testing.T) {
		c, _ := workerPair(t)
		stagedWrite(t, c, []byte("GET / HTTP/1.1\r\n\r\n"))
		c.Close() // as a cancelled call's
		if _, err := c.Read(make([]byte, 64)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v", err)
		}
	})
}

// Sending a request and reading its answer allocates nothing: the buffer
// is pooled and the poller's callback is bound once.
func TestStagedRoundTripAllocatesNothing(t *testing.T) {
	c, worker := workerPair(t)
	request, reply := []byte("POST / HTTP/1.1\r\n\r\n"), []byte("HTTP/1.1 200 OK\r\n\r\n")
	// The worker answers each request on a goroutine started before the
	// count, so that only pdlb's side is counted.
	requests := make(chan struct{})
	go func() {
		in := make([]byte, len(request))
		for range requests {
			_, _ = io.ReadFull(worker, in)
			_, _ = worker.Write(reply)
		}
	}()
	defer close(requests)
	p := make([]byte, 64)
	roundTrip := func() {
		c.stageRequest(true)
		_, _ = c.Write(request)
		c.stageRequest(false)
		requests <- struct{}{}
		if n, err := c.Read(p); err != nil || n != len(reply) {
			t.Fatalf("read %d, %v", n, err)
		}
	}
	roundTrip() // fills the pool
	if allocs := testing.AllocsPerRun(100, roundTrip); allocs != 0 && !race.Enabled {
		t.Fatalf("a staged round trip costs %v allocations, want 0", allocs)
	}
}
