package lb

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"pdlb/bench/fake"
	"pdlb/lb/wire"
)

// A client that stops reading a stream is let go within ClientStallTimeout
// of its socket buffers filling up, not at ClientWriteTimeout (issue 19,
// item 6: each stalled stream held its decode connection for the 60 s
// write timeout, so as many of them as --max-conns-per-backend took every
// decode connection from the other clients). The stream's decode call is
// cancelled and its worker told to abort the request, the client's
// connection is closed, and the request counts as a 499 (client_gone).
// In memory, where a connection holds four writes, and over loopback TCP,
// where it holds what the kernel's buffers do.
func TestStalledStreamIsLetGo(t *testing.T) {
	t.Parallel() // on sockets or real time: overlaps the other slow tests
	for _, tcp := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "tcp"}[tcp], func(t *testing.T) {
			h := newHarness(t)
			_, decode := h.pair(fake.Config{}, fake.Config{})
			cfg := defaultConfig()
			cfg.ClientWriteTimeout = time.Minute
			cfg.ClientStallTimeout = 200 * time.Millisecond
			srv := h.start(cfg)
			var conn net.Conn
			if tcp {
				conn = dialSmallWindow(t, h.serveTCP(srv))
			} else {
				var err error
				if conn, err = h.nw.Dial("pdlb:8000"); err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
			}
			// The fake streams each token's whole text so far, as SGLang
			// does: megabytes within a thousand tokens. Nothing is read.
			sendRequest(t, conn, "/generate", `{"text": "a", "rid": "stalled-stream", "stream": true, "sampling_params": {"max_new_tokens": 100000}}`)
			waitFor(t, "the decode to be told to abort the stalled stream", func() bool {
				st := decode.Stats()
				return st.AbortRequest == 1 && st.InFlight == 0
			})
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.Copy(io.Discard, conn); wire.IsTimeout(err) {
				t.Fatal("the stalled client's connection is still open")
			}
			waitIdle(t, srv)
			for name, want := range map[string]string{
				`pdlb_requests_total{route="/generate",code="499"}`: "1",
				`pdlb_request_errors_total{reason="client_gone"}`:   "1",
			} {
				if got := h.metric(name); got != want {
					t.Fatalf("got %s %q; want %q", name, got, want)
				}
			}
		})
	}
}

// A client that reads a stream more slowly than the decode writes it keeps
// pdlb's writes to it waiting, each for a moment, for longer in all than
// ClientStallTimeout: it is not cut. Its reading is paced by a ticker, a
// slow client's pace, not a synchronisation: the test waits for the
// stream's end.
func TestSlowReaderOfAStreamIsNotCut(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		h.pair(fake.Config{}, fake.Config{})
		cfg := defaultConfig()
		cfg.ClientStallTimeout = 250 * time.Millisecond
		srv := h.start(cfg)
		conn, err := h.nw.Dial("pdlb:8000")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		// About 180 KB, read at 256 bytes a millisecond: 700 ms.
		sendRequest(t, conn, "/generate", `{"text": "a", "stream": true, "sampling_params": {"max_new_tokens": 180}}`)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		var got []byte
		buf := make([]byte, 512)
		for !bytes.HasSuffix(got, []byte("0\r\n\r\n")) {
			<-tick.C
			n, err := conn.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				t.Fatalf("the stream broke off after %d bytes: %v", len(got), err)
			}
		}
		if took := time.Since(start); took < 2*cfg.ClientStallTimeout {
			t.Fatalf("the stream was read in %s, under twice the stall timeout: the test proves nothing", took)
		}
		if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) || !bytes.Contains(got, []byte("data: [DONE]")) || bytes.Contains(got, []byte(`"error"`)) {
			t.Fatalf("the slow reader got a broken stream:\n%.300s\n...\n%s", got, got[max(len(got)-300, 0):])
		}
		waitIdle(t, srv)
		if got := h.metric(`pdlb_request_errors_total{reason="client_gone"}`); got != "0" {
			t.Fatalf("got %q client_gone; want 0", got)
		}
	})
}

// deadlineRecorder is a connection that records the write deadlines set on
// it.
type deadlineRecorder struct {
	net.Conn
	deadlines []time.Time
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.deadlines = append(d.deadlines, t)
	return nil
}

// Each write of a stream's events may wait for its client between half and
// all of ClientStallTimeout, however long the stream, and the deadline
// moves about twice a stall timeout, not with every event.
func TestStreamWritesWaitWithinTheStallTimeout(t *testing.T) {
	const stall = 10 * time.Second
	now := time.Unix(1_000_000, 0)
	s := &Server{cfg: Config{ClientWriteTimeout: time.Minute, ClientStallTimeout: stall, Now: func() time.Time { return now }}}
	conn := &deadlineRecorder{}
	r := &relay{x: &exchange{s: s}, client: conn}
	const events, every = 1000, 100 * time.Millisecond
	for range events {
		r.pushWriteDeadline()
		if left := conn.deadlines[len(conn.deadlines)-1].Sub(now); left < stall/2 || left > stall {
			t.Fatalf("at %s a write may wait %s; want between %s and %s", now, left, stall/2, stall)
		}
		now = now.Add(every)
	}
	if n, most := len(conn.deadlines), int(events*every/(stall/2))+1; n > most {
		t.Fatalf("the deadline moved %d times for %d events over %s; want at most %d", n, events, events*every, most)
	}
}

// ClientStallTimeout is 10 s unless set, and never more than
// ClientWriteTimeout, which bounds every write to a client.
func TestClientStallTimeoutDefaults(t *testing.T) {
	f := func(write, stall, want time.Duration) {
		t.Helper()
		c := Config{ClientWriteTimeout: write, ClientStallTimeout: stall}
		c.setDefaults()
		if c.ClientStallTimeout != want {
			t.Fatalf("write %s, stall %s: got a stall timeout of %s; want %s", write, stall, c.ClientStallTimeout, want)
		}
	}
	f(0, 0, 10*time.Second)
	f(0, 3*time.Second, 3*time.Second)
	f(2*time.Second, 0, 2*time.Second)
	f(2*time.Second, 5*time.Second, 2*time.Second)
}
