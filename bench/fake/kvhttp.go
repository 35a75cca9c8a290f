package fake

import (
	"bufio"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// The cross-process leg of the rendezvous: a decode whose prefill is not in
// its Network's registry (another process) meets it through the prefill's
// bootstrap server, on a fake-only endpoint:
//
//	POST /fake/kv_transfer {"bootstrap_room": R, "prefill_dp_rank": D, "timeout": SECONDS}
//
// It waits at the prefill's rendezvous as the decode leg of room R on
// prefill DP rank D (default 0) for at most timeout (default the prefill's
// KVTimeout), and answers 200 when rank D of the prefill served R, 504 on
// timeout, 409 when another decode holds R on D, 503 when the prefill
// closes, 400 on a bad body; the body is
// {"status": "ok"|"timeout"|"duplicate"|"closing"}, plus, with "ok",
// "cached_tokens": the prefill's cached prompt tokens (kv.go, meeting).

// kvTransferPath is the fake-only bootstrap endpoint.
const kvTransferPath = "/fake/kv_transfer"

// callGrace is how long past a leg's deadline its HTTP call may take to
// bring back the answer.
const callGrace = time.Second

// errNoNetwork fails the KV transfers of a decode without a Network.
var errNoNetwork = errors.New("no network to reach the bootstrap server")

// meetRemote meets the prefill at addr over HTTP in room k; closing lost
// ends the wait as the prefill gone.
func (s *Server) meetRemote(c *call, lost <-chan struct{}, n *Network, addr string, k roomKey, deadline time.Time) (meetResult, int) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + addr + kvTransferPath)
	req.Header.SetContentType(contentJSON)
	b := append(make([]byte, 0, 64), `{"bootstrap_room":`...)
	b = strconv.AppendUint(b, k.room, 10)
	b = append(b, `,"prefill_dp_rank":`...)
	b = strconv.AppendInt(b, int64(k.rank), 10)
	b = append(b, `,"timeout":`...)
	b = appendFloat(b, max(time.Until(deadline), 0).Seconds())
	req.SetBody(append(b, '}'))
	if err := s.bootstrapCall(c, lost, n, addr, req, resp, deadline.Add(callGrace)); err != nil {
		if s.stopped(c) {
			return stopped, 0
		}
		s.log.Debug().Err(err).Str("bootstrap_addr", addr).Msg("kv transfer call failed")
		return peerGone, 0
	}
	switch resp.StatusCode() {
	case fasthttp.StatusOK:
		return met, fastjson.GetInt(resp.Body(), "cached_tokens")
	case fasthttp.StatusGatewayTimeout:
		return timedOut, 0
	case fasthttp.StatusConflict:
		return duplicate, 0
	}
	return peerGone, 0
}

// serveKVTransfer is the bootstrap server's side of meetRemote.
func (s *Server) serveKVTransfer(ctx *fasthttp.RequestCtx) {
	if !ctx.IsPost() {
		writeText(ctx, fasthttp.StatusMethodNotAllowed, "405: Method Not Allowed")
		return
	}
	s.st.kvTransferHTTP.Add(1)
	p := s.parsers.Get()
	v, err := loadJSON(p, ctx.PostBody())
	var k roomKey
	if err == nil {
		k.room, err = roomField(v)
	}
	if err == nil {
		k.rank, err = rankField(v)
	}
	timeout := s.cfg.KVTimeout
	if err == nil && v.Exists("timeout") {
		timeout = time.Duration(v.GetFloat64("timeout") * float64(time.Second))
	}
	s.parsers.Put(p)
	if err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, []byte(`{"status":"bad request"}`))
		return
	}
	res, cached := s.kv.meet(k, sideDecode, 0, timeout, nil, s.quit, nil, nil)
	switch res {
	case met:
		b := strconv.AppendInt([]byte(`{"status":"ok","cached_tokens":`), int64(cached), 10)
		writeJSON(ctx, fasthttp.StatusOK, append(b, '}'))
	case duplicate:
		writeJSON(ctx, fasthttp.StatusConflict, []byte(`{"status":"duplicate"}`))
	case stopped:
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, []byte(`{"status":"closing"}`))
	default:
		writeJSON(ctx, fasthttp.StatusGatewayTimeout, []byte(`{"status":"timeout"}`))
	}
}

// roomField reads a required bootstrap_room.
func roomField(v *fastjson.Value) (uint64, error) {
	room, ok, err := roomOf(v.Get("bootstrap_room"), 0, 0, 0)
	if err == nil && !ok {
		err = badRequest("bootstrap_room is required")
	}
	return room, err
}

// rankField reads an optional prefill_dp_rank: absent or null is 0, which
// is what a decode of a fake without DP ranks means.
func rankField(v *fastjson.Value) (int, error) {
	rank, _, err := intField(v.Get("prefill_dp_rank"))
	if err != nil {
		err = badRequest("prefill_dp_rank must be an integer")
	}
	return rank, err
}

// bootstrapCall sends req to the bootstrap server at addr on a connection
// of its own and reads resp, by deadline. Aborting c, closing lost or
// closing the server closes the connection, so the call ends at once; c and
// lost may be nil. A fresh connection per call keeps no pool, hence no pool
// goroutine to outlive Close; these calls are rare (once per address, per
// item across processes, or per health poll).
func (s *Server) bootstrapCall(c *call, lost <-chan struct{}, n *Network, addr string, req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error {
	if n == nil {
		return errNoNetwork
	}
	var done <-chan struct{} // nil: never
	if c != nil {
		done = c.done
	}
	conn, err := n.Dial(addr)
	if err != nil {
		return err
	}
	finished := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-done:
		case <-lost:
		case <-s.quit:
		case <-finished:
		}
		_ = conn.Close()
	}()
	defer func() {
		close(finished)
		wg.Wait()
		_ = conn.SetDeadline(time.Time{}) // stop the deadline's timer
	}()
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	req.SetConnectionClose()
	bw := bufio.NewWriter(conn)
	if err := req.Write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return resp.Read(bufio.NewReader(conn))
}
