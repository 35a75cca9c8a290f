package hostile

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// Issue 19, items 1-3: request bodies that make pdlb commit memory it has
// not received, read slowly, or multiply. The harness's RSS budget is the
// first check of each.

const (
	// declaredLength is just under pdlb's default --max-payload-size.
	declaredLength = 268435455
	// slowBodyLength is what each slow-body connection declares.
	slowBodyLength = 128 << 10
	// trickleEvery is how often a slow body gets its next byte.
	trickleEvery = 500 * time.Millisecond
	// bodyTimeout bounds the exchange of one large body.
	bodyTimeout = 60 * time.Second
	// chunkSize is the size of each chunk of a chunked body.
	chunkSize = 16 << 10
)

// largeBodySlack is what the attacks that send bodies of over a hundred
// megabytes may add to the well-behaved p99, beyond p99Bound: pdlb must
// read and refuse them. Today's pdlb, whose reading of a body with a
// Content-Length is linear, delayed the well-behaved clients by up to
// 500 ms while it read and refused three bodies of 136 MiB, on a quiet
// machine; the same bodies sent to a sink of the suite's own cost them
// nothing, so the delay is pdlb's.
func largeBodySlack(form) time.Duration { return 750 * time.Millisecond }

// declaredLengths (item 1) opens form.declaredConns connections, one every
// 50 ms, that each declare a Content-Length of 268435455 and send one byte,
// then idle; then form.slowBodies connections that each declare 128 KiB and
// trickle it, a byte per connection every half second. It holds them all
// form.hold, then lets go. pdlb must commit memory as bytes arrive, not as
// they are declared: the RSS budget is the check. It stops opening
// connections once pdlb's RSS is past its budget: the failure shows, and
// the machine is spared.
func declaredLengths(a *arena) {
	var conns connSet
	defer conns.closeAll()
	head := "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\nContent-Length: "
	pace := time.NewTicker(50 * time.Millisecond)
	defer pace.Stop()
	for i := range a.form.declaredConns {
		if rss := a.mon.latest().rss; rss > rssBudget {
			a.Logf("stopped opening at %d connections declaring %d bytes: pdlb's RSS is %s", i, declaredLength, mib(rss))
			break
		}
		if conns.openMany(a.env.addr, 1, head+strconv.Itoa(declaredLength)+"\r\n\r\n{") > 0 {
			a.Errorf("could not open connection %d declaring %d bytes", i, declaredLength)
		}
		<-pace.C
	}
	if failed := conns.openMany(a.env.addr, a.form.slowBodies, head+strconv.Itoa(slowBodyLength)+"\r\n\r\n{"); failed > 0 {
		a.Errorf("could not open %d of %d slow-body connections", failed, a.form.slowBodies)
	}
	a.Logf("holding %d connections for %v", conns.len(), a.form.hold)
	trickle := time.NewTicker(trickleEvery)
	defer trickle.Stop()
	for end := time.After(a.form.hold); ; {
		select {
		case <-end:
			return
		case <-trickle.C:
			conns.each(func(c net.Conn) error {
				_ = c.SetWriteDeadline(time.Now().Add(trickleEvery))
				_, err := io.WriteString(c, " ")
				return err
			})
		}
	}
}

// chunkedBodyEnv gives pdlb a --max-payload-size just above the large
// chunked body, which must be read, so that a slightly larger one is over.
func chunkedBodyEnv(f form) envConfig {
	return envConfig{flags: []serveFlag{{"--max-payload-size", strconv.Itoa(f.chunkedBody + 8<<20)}}}
}

// chunkedBody (item 2) sends a body of form.chunkedBody bytes, a JSON
// object made invalid by its last bytes so that pdlb reads it whole before
// it refuses it with a 400: once with a Content-Length, then chunked, in
// 16 KiB chunks. The chunked one must be read in time linear with its size:
// at most three times the Content-Length one, plus a second (the attack
// gives up there, sparing the machine the rest of a superlinear read).
// Then a chunked body 16 MiB beyond --max-payload-size must get a 413 in as
// little time. Both forms send more than 128 MiB: fasthttp rounds a body
// buffer up to a power of two only below 100 MB, so a chunked body of up to
// 128 MiB fits the buffer its first chunks got, and beyond, the buffer is
// reallocated and copied for each chunk, which made 150 MB take 21 s.
func chunkedBody(a *arena) {
	body := invalidObject(a.form.chunkedBody)
	fixed, err := sendBody(a.env.addr, body, false, bodyTimeout)
	if err != nil || fixed.status != 400 {
		a.Fatalf("a %s body with a Content-Length: got %d %s (%v) after %v; want 400",
			mib(int64(len(body))), fixed.status, fixed.body, err, fixed.took)
	}
	bound := 3*fixed.took + time.Second
	chunked, err := sendBody(a.env.addr, body, true, bound)
	a.Logf("a %s body: %v with a Content-Length, %v chunked", mib(int64(len(body))), fixed.took, chunked.took)
	if err != nil || chunked.status != 400 {
		a.Errorf("the same body chunked: got %d %s (%v) after %v; want 400 within %v (3 × %v with a Content-Length, plus 1 s)",
			chunked.status, chunked.body, err, chunked.took, bound, fixed.took)
	}
	over, err := sendBody(a.env.addr, invalidObject(a.form.chunkedBody+16<<20), true, bound)
	if over.status != 413 {
		a.Errorf("a chunked body over --max-payload-size: got %d %s (%v) after %v; want 413 within %v",
			over.status, over.body, err, over.took, bound)
	}
}

// invalidObject returns a JSON object of n bytes that only its last two
// bytes make invalid: a trailing comma.
func invalidObject(n int) []byte {
	b := make([]byte, 0, n)
	b = append(b, `{"text":"`...)
	b = append(b, bytes.Repeat([]byte("a"), n-len(b)-3)...)
	return append(b, `",}`...)
}

// sent is the answer to a body.
type sent struct {
	status int
	body   string
	took   time.Duration // from the first byte sent to the answer
}

// sendBody posts body to /generate on a connection of its own, chunked or
// with a Content-Length, reading the answer while it writes (pdlb may
// answer before the body ends), and gives up after timeout.
func sendBody(addr string, body []byte, chunked bool, timeout time.Duration) (sent, error) {
	c, err := dial(addr)
	if err != nil {
		return sent{}, err
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	answer := make(chan sent, 1)
	var readErr error
	go func() {
		var s sent
		s.status, s.body, readErr = readAnswer(c)
		s.took = time.Since(start)
		answer <- s
	}()
	writeErr := writeBody(c, body, chunked)
	s := <-answer
	if readErr != nil && writeErr != nil {
		readErr = fmt.Errorf("%w (sending: %v)", readErr, writeErr)
	}
	return s, readErr
}

// writeBody writes a POST /generate of body, chunked or not.
func writeBody(w io.Writer, body []byte, chunked bool) error {
	head := "POST /generate HTTP/1.1\r\nHost: pdlb\r\nContent-Type: application/json\r\n"
	if !chunked {
		_, err := io.WriteString(w, head+"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n")
		if err == nil {
			_, err = w.Write(body)
		}
		return err
	}
	if _, err := io.WriteString(w, head+"Transfer-Encoding: chunked\r\n\r\n"); err != nil {
		return err
	}
	buf := make([]byte, 0, chunkSize+32)
	for len(body) > 0 {
		n := min(chunkSize, len(body))
		buf = strconv.AppendInt(buf[:0], int64(n), 16)
		buf = append(append(append(buf, "\r\n"...), body[:n]...), "\r\n"...)
		if _, err := w.Write(buf); err != nil {
			return err
		}
		body = body[n:]
	}
	_, err := io.WriteString(w, "0\r\n\r\n")
	return err
}

// emptyBatchItems (item 3) sends /generate bodies of form.batchBodies bytes,
// each a batch of empty input_ids items ({"input_ids":[[],[],...]}: 24 MB
// is 8 million items), which pdlb once multiplied 13.6 times on their way
// to the workers, and a 90 MB one crashed it. Each must get a 400
// (--max-batch-size) within a minute.
func emptyBatchItems(a *arena) {
	for _, size := range a.form.batchBodies {
		res, err := sendBody(a.env.addr, emptyItems(size), false, bodyTimeout)
		a.Logf("a batch of %d empty items: %d after %v", (size-len(`{"input_ids":[]}`))/3, res.status, res.took)
		if err != nil || res.status != 400 {
			a.Errorf("a %s batch of empty items: got %d %.200s (%v) after %v; want 400 (--max-batch-size)",
				mib(int64(size)), res.status, res.body, err, res.took)
		}
	}
}

// emptyItems returns {"input_ids":[[],[],...]} of about n bytes.
func emptyItems(n int) []byte {
	b := make([]byte, 0, n+2)
	b = append(b, `{"input_ids":[[]`...)
	for len(b)+3+2 <= n {
		b = append(b, ",[]"...)
	}
	return append(b, "]}"...)
}
