package lb

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// When pdlb gives up on a call a worker may have started (its client went
// away, its peer failed, a retry replaced it), it asks the worker to abort
// the request (SGLang's POST /abort_request), so that what the worker holds
// for it, a KV cache waiting for a peer that will never claim it, is freed
// at once rather than when the worker notices the closed connection (SGLang
// looks every few seconds). That is a courtesy, which must never become a
// load of its own: a dropped 64-item batch used to send up to 128 calls,
// and a client dropping batches on purpose made pdlb send thousands a
// second and hold thousands of descriptors (issue 19, item 8). So a call
// sends at most one abort (abortRID), and each worker gets at most
// Config.MaxAbortsPerSecond a second and maxAbortsInFlight at once
// (abortGate). An abort beyond is dropped and counted: the worker still
// sees the connection closed and aborts the request itself.

// maxAbortsInFlight bounds the /abort_request calls to one worker that are
// under way at once, and so the connections they hold. A worker answers
// one at once (a lookup, a message to its scheduler), so a few keep up
// with the rate; one that does not answer at all holds no more than this
// many connections, each for abortTimeout.
const maxAbortsInFlight = 4

// abortTimeout bounds an /abort_request.
const abortTimeout = 2 * time.Second

// abortRID returns the rid that one /abort_request names for a request
// whose rid value is raw (exchange.rid), and false if it names none.
// SGLang's AbortReq takes one rid, a string (io_struct.py), so a batch
// cannot be named item by item in one call:
//   - a batch given one string rid has items named rid_0, rid_1, ...
//     (GenerateReqInput._normalize_rid); the scheduler matches an abort's
//     rid as a prefix (req.rid.startswith), so the string itself names the
//     whole batch. (With one tokenizer worker, SGLang's default, the
//     tokenizer manager passes on only a rid it holds, so there the call
//     is a no-op, and the closed connection does the work.)
//   - a batch given a list of rids is named by its first item's: the rest
//     abort when the worker sees the connection closed.
func abortRID(raw string) (string, bool) {
	rid := gjson.Parse(raw)
	if rid.IsArray() {
		rid = rid.Get("0")
	}
	return rid.Str, rid.Type == gjson.String && rid.Str != ""
}

// SGLang's scheduler aborts every request whose rid starts with the one an
// abort names: "0" names a sixteenth of the rids it draws (uuid4 hex), ""
// every request. A client could so abort other clients' requests, by
// naming a short rid of its own in /abort_request or by dropping a request
// that has one. pdlb asks the workers to abort a rid only when it names no
// other request: minAbortRID characters at least, against the requests of
// other pdlb replicas and other clients of the workers, and no request pdlb
// serves has a longer rid starting with it.
const minAbortRID = 8

// abortsOne reports whether an abort of rid names no request but those of
// that rid, as far as pdlb can tell (minAbortRID).
func (s *Server) abortsOne(rid string) bool {
	if len(rid) < minAbortRID {
		return false
	}
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	for _, x := range s.flight {
		longer := false
		eachRID(x.rid, func(r string) bool {
			longer = len(r) > len(rid) && strings.HasPrefix(r, rid)
			return !longer
		})
		if longer {
			return false
		}
	}
	return true
}

// abortGate bounds the /abort_request calls to one worker: a rate, and how
// many are under way at once. The zero value is ready to use; it is safe
// for concurrent use.
type abortGate struct {
	// next is the rate's theoretical arrival time (the generic cell rate
	// algorithm), in nanoseconds of Config.Now since the server began (on
	// the monotonic clock, which a step of the wall clock does not move), 0
	// before the first call: when the calls allowed so far would all have
	// been sent, spaced out at the rate.
	next     atomic.Int64
	inFlight atomic.Int32
}

// take reserves a call at the time at (since the server began) for a worker allowed perSecond calls a
// second, perSecond of them at once, and reports whether it may go; done
// must follow one that may, once it is over.
func (g *abortGate) take(at time.Duration, perSecond int) bool {
	if g.inFlight.Add(1) > maxAbortsInFlight {
		g.inFlight.Add(-1)
		return false
	}
	if !g.allow(int64(at), perSecond) {
		g.inFlight.Add(-1)
		return false
	}
	return true
}

// done ends a call that take let go.
func (g *abortGate) done() { g.inFlight.Add(-1) }

// allow reports whether a call at now keeps to perSecond calls a second,
// and counts it if it does. A worker that got none for a second may get
// perSecond at once.
func (g *abortGate) allow(now int64, perSecond int) bool {
	interval := int64(time.Second) / int64(perSecond)
	for {
		next := g.next.Load()
		at := now
		if next != 0 {
			at = max(next, now)
		}
		if at-now > int64(time.Second)-interval {
			return false
		}
		if g.next.CompareAndSwap(next, at+interval) {
			return true
		}
	}
}

// abortRequest asks b to abort the request rid (SGLang's POST
// /abort_request), in the background: the client's answer does not wait.
// Beyond b's abortGate the call is dropped and counted.
func (s *Server) abortRequest(b *Backend, rid string) {
	if !b.aborts.take(s.cfg.Now().Sub(s.began), s.cfg.MaxAbortsPerSecond) {
		s.abortsDropped.Inc()
		b.log.Debug().Str("rid", rid).Msg("abort_request not sent: over the worker's cap")
		return
	}
	s.aborts.Inc()
	s.live.Add(1)
	go func() {
		defer s.live.Add(-1)
		defer b.aborts.done()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.Header.SetMethod(fasthttp.MethodPost)
		b.setURI(req, []byte("/abort_request"))
		req.Header.SetHost(b.addr)
		b.authorize(&req.Header)
		req.Header.SetContentTypeBytes(contentTypeJSON)
		body, _ := json.Marshal(struct {
			RID string `json:"rid"`
		}{rid})
		req.SetBodyRaw(body)
		if err := b.hc.DoTimeout(req, resp, abortTimeout); err != nil || resp.StatusCode() != fasthttp.StatusOK {
			b.log.Debug().Err(err).Int("status", resp.StatusCode()).Str("rid", rid).Msg("abort_request failed")
		}
	}()
}

// maxKeptRID bounds the rid value an exchange keeps: a batch's list of
// --max-batch-size rids fits. A longer one, which no client needs, is not
// kept: pdlb then sends no abort for the request, and an /abort_request
// naming it, which still reaches the workers, does not stop pdlb's retries.
const maxKeptRID = 64 << 10

// eachRID calls f with the rid of raw, a request's rid value as the
// workers read it (exchange.rid), or each of a batch's list, until f
// returns false.
func eachRID(raw string, f func(rid string) bool) {
	switch rid := gjson.Parse(raw); {
	case rid.Type == gjson.String:
		f(rid.Str)
	case rid.IsArray():
		rid.ForEach(func(_, item gjson.Result) bool {
			return item.Type != gjson.String || f(item.Str)
		})
	}
}
