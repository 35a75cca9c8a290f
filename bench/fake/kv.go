package fake

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The KV transfer is a rendezvous keyed by (bootstrap address, room): the
// prefill at that address arrives with the room once its KV cache is ready,
// the decode arrives once it wants the cache, and whichever comes first
// waits for the other, at most KVTimeout. Each prefill owns the rendezvous
// of its own address; a decode reaches it in process (channels) or over
// HTTP (kvhttp.go).

// side is a leg of a KV transfer.
type side uint8

const (
	sidePrefill side = iota
	sideDecode
)

// meetResult is how a wait at the rendezvous ended.
type meetResult uint8

const (
	met       meetResult = iota
	timedOut             // the other leg never came
	stopped              // the call was aborted or this server closed
	peerGone             // the other leg's server closed or could not be reached
	duplicate            // another request of the same leg holds the room
)

// meeting is one leg waiting in a room; met is closed when the other comes.
type meeting struct {
	side side
	met  chan struct{}
}

// rendezvous pairs the two legs of each room. Entries exist only while one
// leg waits: they are removed when the other leg arrives, or when the
// waiter gives up (timeout, abort, Close), so none leak.
type rendezvous struct {
	mu    sync.Mutex
	rooms map[uint64]*meeting
}

// alreadyMet is the meeting of a leg that found the other one waiting.
var alreadyMet = func() *meeting {
	m := &meeting{met: make(chan struct{})}
	close(m.met)
	return m
}()

// arrive enters room on side sd. It returns a meeting to wait on, or nil if
// a request of the same side already waits in the room: two requests in
// flight with one room corrupt each other's transfer (PROTOCOL.md §2).
func (r *rendezvous) arrive(room uint64, sd side) *meeting {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.rooms[room]; m != nil {
		if m.side == sd {
			return nil
		}
		delete(r.rooms, room)
		close(m.met)
		return alreadyMet
	}
	m := &meeting{side: sd, met: make(chan struct{})}
	r.rooms[room] = m
	return m
}

// leave withdraws m from room and reports false, unless the other leg met
// it meanwhile: then it reports true and the transfer stands.
func (r *rendezvous) leave(room uint64, m *meeting) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rooms[room] == m {
		delete(r.rooms, room)
		return false
	}
	return true
}

// pending is the number of legs waiting.
func (r *rendezvous) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.rooms)
}

// meet arrives in room on side sd and waits for the other leg, at most
// timeout. stop, quit and peerQuit end the wait early; nil ones never do.
func (r *rendezvous) meet(room uint64, sd side, timeout time.Duration, stop, quit, peerQuit <-chan struct{}) meetResult {
	m := r.arrive(room, sd)
	if m == nil {
		return duplicate
	}
	select {
	case <-m.met:
		return met
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	res := timedOut
	select {
	case <-m.met:
		return met
	case <-t.C:
	case <-stop:
		res = stopped
	case <-quit:
		res = stopped
	case <-peerQuit:
		res = peerGone
	}
	if r.leave(room, m) {
		return met
	}
	return res
}

// sendKV is the prefill leg of item it: wait for the decode to claim the
// room.
func (s *Server) sendKV(c *call, it *item) *failure {
	start := time.Now()
	res := s.kv.meet(it.room, sidePrefill, s.cfg.KVTimeout, c.done, s.quit, nil)
	reason := ""
	switch res {
	case met:
		s.st.kvOK.Add(1)
		return nil
	case stopped:
		return &failure{item: it.index, msg: prefillFailure(it, abortMessage), aborted: true}
	case duplicate:
		reason = duplicateReason(it.room)
	default:
		reason = timeoutReason(it.room, time.Since(start), "KVPoll.Bootstrapping")
	}
	s.st.kvFailed.Add(1)
	return &failure{item: it.index, msg: prefillFailure(it, reason)}
}

// receiveKV is the decode leg of item it: learn the prefill's parallel
// info, then wait, until deadline, for the prefill to serve the room.
func (s *Server) receiveKV(c *call, r *request, it *item, deadline time.Time) *failure {
	ep := s.endpoint()
	port := it.port
	if port == 0 {
		port = s.cfg.BootstrapPort // bootstrap_port null: SGLang uses its own
	}
	addr := joinHostPort(it.host, strconv.Itoa(port))
	if _, err := s.prefillInfo(c, ep.net, addr, deadline); err != nil {
		if s.stopped(c) {
			return &failure{item: it.index, msg: decodeFailure("handshake", it, abortMessage), aborted: true}
		}
		s.log.Debug().Err(err).Str("bootstrap_addr", addr).Msg("kv handshake failed")
		s.st.kvFailed.Add(1)
		reason := "Could not fetch prefill parallel info from bootstrap_addr: " + shownAddr(it.host, port)
		return &failure{item: it.index, msg: decodeFailure("handshake", it, reason)}
	}
	var res meetResult
	if p := ep.net.prefill(addr); p != nil {
		res = p.kv.meet(it.room, sideDecode, time.Until(deadline), c.done, s.quit, p.quit)
	} else {
		res = s.meetRemote(c, ep.net, addr, it.room, deadline)
	}
	return s.receiveResult(res, r, it, port)
}

// receiveResult turns the decode's rendezvous result into a failure.
func (s *Server) receiveResult(res meetResult, r *request, it *item, port int) *failure {
	reason := ""
	switch res {
	case met:
		s.st.kvOK.Add(1)
		return nil
	case stopped:
		return &failure{item: it.index, msg: decodeFailure("transfer", it, abortMessage), aborted: true}
	case duplicate:
		reason = duplicateReason(it.room)
	case peerGone:
		reason = "Lost connection with prefill instance (bootstrap_addr: " + shownAddr(it.host, port) + ")"
	default:
		reason = timeoutReason(it.room, time.Since(r.start), "KVPoll.WaitingForInput")
	}
	s.st.kvFailed.Add(1)
	return &failure{item: it.index, msg: decodeFailure("transfer", it, reason)}
}

// shownAddr is a bootstrap address as SGLang prints it: f"{host}:{port}".
func shownAddr(host string, port int) string {
	return host + ":" + strconv.Itoa(port)
}

// prefillFailure is the message of a prefill request whose transfer failed
// (SGLang prefill.py, handle_bootstrap_failure).
func prefillFailure(it *item, reason string) string {
	room := strconv.FormatUint(it.room, 10)
	return "Prefill bootstrap failed for request rank=0 req.rid=" + pyRepr(it.rid) +
		" req.bootstrap_room=" + room + " with exception " + kvTransferError(room, reason)
}

// decodeFailure is the message of a decode request whose handshake or
// transfer failed (SGLang decode.py: "Decode handshake failed", "Decode
// transfer failed").
func decodeFailure(stage string, it *item, reason string) string {
	room := strconv.FormatUint(it.room, 10)
	return "Decode " + stage + " failed for request rank=0 decode_req.req.rid=" + pyRepr(it.rid) +
		" decode_req.req.bootstrap_room=" + room + " with exception " + kvTransferError(room, reason)
}

// kvTransferError is str() of SGLang's KVTransferError.
func kvTransferError(room, reason string) string {
	return "KVTransferError(bootstrap_room=" + room + "): " + reason
}

// timeoutReason is SGLang's record of a leg that waited too long.
func timeoutReason(room uint64, waited time.Duration, state string) string {
	return fmt.Sprintf("Request %d timed out after %.1fs in %s", room, waited.Seconds(), state)
}

func duplicateReason(room uint64) string {
	return fmt.Sprintf("bootstrap_room %d is already used by another request in flight", room)
}
