package fake

import (
	"time"

	"github.com/valyala/fasthttp"
)

// A decode forgets a prefill that stops answering its health polls, as
// SGLang's decode does (CommonKVManager's _start_heartbeat_checker_thread
// and _handle_node_failure in
// python/sglang/srt/disaggregation/common/conn.py):
//
//   - Once a DP rank has cached the parallel info of a prefill, it polls
//     GET /health on that prefill's bootstrap server: a round every
//     Config.HeartbeatInterval (SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL,
//     5 s), waiting before the first, each poll bounded by 5 s (SGLang's 2 s
//     to connect and 3 s to read). Only cached addresses are polled.
//   - A 200 resets the address's count of failures; anything else (another
//     status, no connection, a timeout) adds one. At
//     Config.HeartbeatMaxFailures (SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE,
//     2) consecutive failures the rank drops the address from its
//     prefill_info_table, so its next request for that prefill fetches the
//     info again: a prefill restarted with another DP size is seen anew.
//   - Every item of that rank that resolved its prefill DP rank with the
//     dropped info and still waits for its KV fails at once with
//     "Lost connection with prefill instance (bootstrap_addr: HOST:PORT)",
//     the reason SGLang records for the rooms it tracks for that address
//     whose transfer has not succeeded. Items that have their KV are
//     unaffected, and so is the prefill's own leg, which waits out its
//     KVTimeout as SGLang's prefill waits out its bootstrap timeout.
//   - SGLang does not reset the count when it drops an address, and nor
//     does the fake: if the address is cached again, a single failed poll
//     drops it again unless a 200 came in between.
//
// So a prefill that restarts between two polls, or is down for fewer than
// HeartbeatMaxFailures rounds, keeps its stale info on the decode, in SGLang
// and here alike. Each DP rank keeps its own counts, as each SGLang DP rank
// is its own scheduler process with its own poller; the fake polls each
// address once a round for all ranks that cache it. A drop counts in
// Stats.PrefillInfoDrops, once per rank.

// heartbeatTimeout bounds one health poll: SGLang's (2, 3) s connect and
// read timeouts.
const heartbeatTimeout = 5 * time.Second

// startHeartbeat starts the health polls of a decode, once: when a rank
// first caches a prefill's info, as there is nothing to poll before.
// Close waits for them to end.
func (s *Server) startHeartbeat() {
	s.hbMu.Lock()
	defer s.hbMu.Unlock()
	if s.hbStarted {
		return
	}
	s.hbStarted = true
	s.hbDone = make(chan struct{})
	go s.heartbeat()
}

// stopHeartbeat keeps the polls from starting, and waits for them to end
// if they had started. It is called by Close, after quit is closed.
func (s *Server) stopHeartbeat() {
	s.hbMu.Lock()
	started, done := s.hbStarted, s.hbDone
	s.hbStarted = true
	s.hbMu.Unlock()
	if started {
		<-done
	}
}

// heartbeat runs a round of polls every HeartbeatInterval until Close.
func (s *Server) heartbeat() {
	defer close(s.hbDone)
	t := time.NewTimer(s.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.quit:
			return
		}
		s.heartbeatRound()
		t.Reset(s.cfg.HeartbeatInterval)
	}
}

// heartbeatRound polls the bootstrap server of every prefill whose info a
// DP rank caches, once each, and applies the result to every rank caching
// it, dropping the info where the failures reach HeartbeatMaxFailures.
func (s *Server) heartbeatRound() {
	n := s.endpoint().net
	healthy := make(map[string]bool)
	for rank := range s.infos {
		ic := &s.infos[rank]
		for _, addr := range ic.cachedAddrs() {
			ok, polled := healthy[addr]
			if !polled {
				ok = s.bootstrapHealthy(n, addr)
				healthy[addr] = ok
			}
			if s.closing() {
				return // a poll failed because the server is closing
			}
			if lost := ic.polled(addr, ok, s.cfg.HeartbeatMaxFailures); lost != nil {
				// Counted before the waiting items fail, so that whoever
				// sees their failure sees the drop counted.
				s.st.prefillInfoDrops.Add(1)
				s.log.Warn().Str("bootstrap_addr", addr).Int("dp_rank", rank).
					Msg("lost connection with prefill instance: its parallel info is dropped")
				close(lost)
			}
		}
	}
}

// bootstrapHealthy reports whether the bootstrap server at addr answers
// GET /health with a 200.
func (s *Server) bootstrapHealthy(n *Network, addr string) bool {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + "/health")
	err := s.bootstrapCall(nil, nil, n, addr, req, resp, time.Now().Add(heartbeatTimeout))
	return err == nil && resp.StatusCode() == fasthttp.StatusOK
}

// cachedAddrs returns the addresses whose info ic holds, fetched.
func (ic *infoCache) cachedAddrs() []string {
	ic.mu.RLock()
	defer ic.mu.RUnlock()
	var addrs []string
	for addr, e := range ic.m {
		if e.kept() {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// polled records a health poll of addr, healthy or not, and drops the
// cached info of addr once maxFailures polls in a row failed. It returns
// the dropped info's lost channel, for the caller to close, failing the
// items waiting on it; nil if it dropped nothing.
func (ic *infoCache) polled(addr string, healthy bool, maxFailures int) chan struct{} {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if healthy {
		ic.fails[addr] = 0
		return nil
	}
	ic.fails[addr]++
	e := ic.m[addr]
	if ic.fails[addr] < maxFailures || !e.kept() {
		return nil
	}
	delete(ic.m, addr)
	return e.lost
}
