package fake

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The KV transfer is a rendezvous keyed by (bootstrap address, room,
// prefill DP rank): the prefill at that address arrives with the room, on
// the DP rank it dispatched the item to, once its KV cache is ready; the
// decode arrives with the room and the prefill DP rank it resolved (dp.go)
// once it wants the cache; whichever comes first waits for the other, at
// most KVTimeout. Legs that disagree on the rank never meet, as a decode
// waiting on a prefill DP rank that never got the request never gets its
// KV. Each prefill owns the rendezvous of its own address; a decode reaches
// it in process (channels) or over HTTP (kvhttp.go).

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

// roomKey names a rendezvous of one prefill: a room on one of its DP ranks.
type roomKey struct {
	room uint64
	rank int
}

// meeting is one leg waiting in a room; met is closed when the other comes.
// cached is what the prefill leg hands over with the KV: the prompt tokens
// its prefix cache held, which SGLang's prefill sends in its metadata
// buffer and the decode reports as its own cached_tokens
// (disaggregation/decode.py, _commit_transfer_to_req). It is written
// before met is closed, and read after.
type meeting struct {
	side   side
	met    chan struct{}
	cached int
}

// rendezvous pairs the two legs of each room. Entries exist only while one
// leg waits: they are removed when the other leg arrives, or when the
// waiter gives up (timeout, abort, Close), so none leak.
type rendezvous struct {
	mu    sync.Mutex
	rooms map[roomKey]*meeting
}

// arrive enters room k on side sd, a prefill leg bringing cached. It
// returns a meeting to wait on; alreadyMet, with the prefill's cached as
// handed, when the other leg was waiting; or nil if a request of the same
// side already waits in the room: two requests in flight with one room
// corrupt each other's transfer.
func (r *rendezvous) arrive(k roomKey, sd side, cached int) (m *meeting, handed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.rooms[k]; m != nil {
		if m.side == sd {
			return nil, 0
		}
		delete(r.rooms, k)
		if sd == sidePrefill {
			m.cached = cached
		}
		close(m.met)
		return alreadyMet, m.cached
	}
	m = &meeting{side: sd, met: make(chan struct{}), cached: cached}
	r.rooms[k] = m
	return m, 0
}

// alreadyMet is the meeting of the leg that arrives second: nothing to
// wait for, and no allocation.
var alreadyMet = &meeting{}

// leave withdraws m from room k and reports false, unless the other leg met
// it meanwhile: then it reports true and the transfer stands.
func (r *rendezvous) leave(k roomKey, m *meeting) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rooms[k] == m {
		delete(r.rooms, k)
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

// meet arrives in room k on side sd, a prefill leg bringing cached, and
// waits for the other leg, at most timeout. stop and quit end the wait
// early as stopped, peerQuit (the other server closing) and lost (its info
// dropped by the health polls) as peerGone; nil ones never do. Once met, it
// returns the prefill's cached.
func (r *rendezvous) meet(k roomKey, sd side, cached int, timeout time.Duration, stop, quit, peerQuit, lost <-chan struct{}) (meetResult, int) {
	m, handed := r.arrive(k, sd, cached)
	switch m {
	case nil:
		return duplicate, 0
	case alreadyMet:
		return met, handed
	}
	select {
	case <-m.met:
		return met, m.cached
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	res := timedOut
	select {
	case <-m.met:
		return met, m.cached
	case <-t.C:
	case <-stop:
		res = stopped
	case <-quit:
		res = stopped
	case <-peerQuit:
		res = peerGone
	case <-lost:
		res = peerGone
	}
	if r.leave(k, m) {
		<-m.met // closed under r.mu by the leg that met it
		return met, m.cached
	}
	return res, 0
}

// sendKV is the prefill leg of item it: wait for the decode to claim the
// room on the DP rank the item was dispatched to.
func (s *Server) sendKV(c *call, it *item) *failure {
	start := time.Now()
	res, _ := s.kv.meet(roomKey{it.room, it.dpRank}, sidePrefill, it.cached, s.cfg.KVTimeout, c.done, s.quit, nil, nil)
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

// receiveKV is the decode leg of item it: resolve the prefill DP rank that
// holds the KV (learning the prefill's parallel info on the way), then wait,
// until deadline, for that rank to serve the room, or until the health polls
// drop that info (heartbeat.go).
func (s *Server) receiveKV(c *call, r *request, it *item, deadline time.Time) *failure {
	ep := s.endpoint()
	port := it.port
	if port == 0 {
		port = s.cfg.BootstrapPort // bootstrap_port null: SGLang uses its own
	}
	addr := joinHostPort(it.host, strconv.Itoa(port))
	rank, lost, f := s.resolvePrefillRank(c, ep.net, addr, it, port, deadline)
	if f != nil {
		return f
	}
	k := roomKey{it.room, rank}
	var res meetResult
	if p := ep.net.prefill(addr); p != nil {
		res, it.cached = p.kv.meet(k, sideDecode, 0, time.Until(deadline), c.done, s.quit, p.quit, lost)
	} else {
		res, it.cached = s.meetRemote(c, lost, ep.net, addr, k, deadline)
	}
	return s.receiveResult(res, r, it, port)
}

// handshakeFailure is the failure of a decode item whose prefill parallel
// info could not be had: aborted, or SGLang's fetch failure.
func (s *Server) handshakeFailure(c *call, it *item, addr string, port int, err error) *failure {
	if s.stopped(c) {
		return &failure{item: it.index, msg: decodeFailure("handshake", it, abortMessage), aborted: true}
	}
	s.log.Debug().Err(err).Str("bootstrap_addr", addr).Msg("kv handshake failed")
	s.st.kvFailed.Add(1)
	reason := "Could not fetch prefill parallel info from bootstrap_addr: " + shownAddr(it.host, port)
	return &failure{item: it.index, msg: decodeFailure("handshake", it, reason)}
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
// (SGLang prefill.py, handle_bootstrap_failure). rank is the tp_rank of the
// scheduler: with DP attention and an attention TP size of 1, as the fake
// reports, the DP rank.
func prefillFailure(it *item, reason string) string {
	room := strconv.FormatUint(it.room, 10)
	return "Prefill bootstrap failed for request rank=" + strconv.Itoa(it.dpRank) + " req.rid=" + pyRepr(it.rid) +
		" req.bootstrap_room=" + room + " with exception " + kvTransferError(room, reason)
}

// decodeFailure is the message of a decode request whose handshake or
// transfer failed (SGLang decode.py: "Decode handshake failed", "Decode
// transfer failed"); rank as in prefillFailure.
func decodeFailure(stage string, it *item, reason string) string {
	room := strconv.FormatUint(it.room, 10)
	return "Decode " + stage + " failed for request rank=" + strconv.Itoa(it.dpRank) + " decode_req.req.rid=" + pyRepr(it.rid) +
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
