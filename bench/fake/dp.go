package fake

import (
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// DP ranks (see package bootstrap's documentation, DP ranks). A server with
// DPSize > 1 stands for SGLang run with --dp N --enable-dp-attention: N
// data-parallel ranks, each its own scheduler process with its own KV
// manager. Every item goes to one rank, as SGLang's DataParallelController
// sends it: to its routed_dp_rank when given; else a prefill follows
// bootstrap_room % DPSize (follow_bootstrap_room, the default of a PD
// prefill) and a decode or aggregated server takes the ranks in turn (round
// robin).
//
// The rank matters twice. A prefill refuses an item whose routed rank
// contradicts its room, unless disagg_prefill_dp_rank says where the KV is.
// A decode rank resolves, from its own prefill info cache, the prefill DP
// rank whose KV it waits for; SGLang between 2026-03-18 and PR #22990 (the
// first-request bug, Config.FirstRequestBug) did so without filling that
// cache when the request carried disagg_prefill_dp_rank.

// checkRanks returns SGLang's refusal of an item's routed_dp_rank out of
// range (tokenizer_manager.py), or "" when every item's rank is fine.
func (s *Server) checkRanks(r *request) string {
	d := s.cfg.DPSize
	for i := range r.items {
		rk := r.items[i].routedDPRank
		if rk == noRank || (d == 1 && rk == 0) {
			continue // without DP, SGLang ignores routed_dp_rank 0
		}
		if rk < 0 || rk >= d {
			return "routed_dp_rank=" + strconv.Itoa(rk) + " out of range [0, " + strconv.Itoa(d) + ")"
		}
	}
	return ""
}

// dispatch gives every item of r the DP rank that serves it, and counts it.
// The ranks must have passed checkRanks, and a prefill's items have rooms.
func (s *Server) dispatch(r *request) {
	d := s.cfg.DPSize
	for i := range r.items {
		it := &r.items[i]
		switch {
		case d == 1:
			it.dpRank = 0
		case it.routedDPRank != noRank:
			it.dpRank = it.routedDPRank
		case s.cfg.Role == RolePrefill:
			it.dpRank = int(it.room % uint64(d))
		default:
			it.dpRank = int((s.rr.Add(1) - 1) % uint64(d))
		}
		s.st.ranks[it.dpRank].Add(1)
	}
}

// conflict is the failure SGLang's CommonKVSender records at once for a
// prefill item that routed_dp_rank sent to another rank than its room
// implies, when the request does not say where the KV is with
// disagg_prefill_dp_rank (and SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK
// is unset, as the fakes assume). nil when there is no conflict.
func (s *Server) conflict(it *item) *failure {
	d := uint64(s.cfg.DPSize)
	if d == 1 || it.prefillDPRank != noRank || uint64(it.dpRank) == it.room%d {
		return nil
	}
	s.st.dpConflicts.Add(1)
	s.st.kvFailed.Add(1)
	reason := fmt.Sprintf("follow_bootstrap_room conflict: dispatched to dp_rank %d but bootstrap_room %d implies dp_rank %d. "+
		"Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow mixed routing.", it.dpRank, it.room, it.room%d)
	return &failure{item: it.index, msg: prefillFailure(it, reason)}
}

// resolvePrefillRank is SGLang's _resolve_prefill_dp_rank on the decode DP
// rank serving it, with that rank's own prefill info cache: the prefill DP
// rank whose KV the item waits for. Since PR #22990 the info comes first
// (fetched and cached on a miss), then disagg_prefill_dp_rank, unchecked,
// then 0 for a prefill without DP, then bootstrap_room % dp_size. With
// Config.FirstRequestBug, disagg_prefill_dp_rank comes first, and a decode
// rank without the info fails the item instead of fetching it, so the
// cache stays empty for the next one too. lost is closed if the health
// polls drop the info the rank was resolved with (heartbeat.go).
func (s *Server) resolvePrefillRank(c *call, n *Network, addr string, it *item, port int, deadline time.Time) (rank int, lost <-chan struct{}, f *failure) {
	ic := &s.infos[it.dpRank]
	if s.cfg.FirstRequestBug && it.prefillDPRank != noRank && !ic.cached(addr) {
		s.st.firstRequestFailures.Add(1)
		s.st.kvFailed.Add(1)
		return 0, nil, &failure{item: it.index, msg: decodeFailure("handshake", it, downReason(it, port))}
	}
	info, lost, err := s.prefillInfo(c, ic, n, addr, deadline)
	if err != nil {
		return 0, nil, s.handshakeFailure(c, it, addr, port, err)
	}
	rank = prefillRankOf(info, it)
	if rank >= 0 && rank < info.dpSize {
		return rank, lost, nil
	}
	return rank, lost, s.lookupRank(c, n, addr, info, it, rank, deadline)
}

// prefillRankOf picks the prefill DP rank of it once the info is known. A
// prefill that does not follow bootstrap_room would be asked POST
// /query_dp_ranks; the fake prefill always follows it, and so does the
// old API.
func prefillRankOf(info prefillInfo, it *item) int {
	switch {
	case it.prefillDPRank != noRank:
		return it.prefillDPRank
	case info.dpSize == 1:
		return 0
	}
	return int(it.room % uint64(info.dpSize))
}

// lookupRank asks the bootstrap server at addr where prefill DP rank rank
// receives KV requests, as SGLang's receiver does before its first transfer
// from a rank. The fake asks only for a rank outside the prefill's dp_size,
// the only question whose answer can be a 404: so an out-of-range
// disagg_prefill_dp_rank fails late, inside the handshake, as in SGLang. It
// returns nil when the bootstrap server knows the rank.
func (s *Server) lookupRank(c *call, n *Network, addr string, info prefillInfo, it *item, rank int, deadline time.Time) *failure {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	r := strconv.Itoa(rank)
	query := "/route?prefill_dp_rank=" + r + "&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0"
	if info.old {
		query = "/route?engine_rank=0&target_dp_group=" + r + "&target_pp_rank=0"
	}
	req.SetRequestURI("http://" + addr + query)
	err := s.bootstrapCall(c, nil, n, addr, req, resp, deadline)
	if err == nil && resp.StatusCode() == fasthttp.StatusOK {
		return nil
	}
	if s.stopped(c) {
		return &failure{item: it.index, msg: decodeFailure("handshake", it, abortMessage), aborted: true}
	}
	s.st.kvFailed.Add(1)
	reason := "Could not fetch bootstrap info for: prefill_dp_rank: " + r +
		" prefill_cp_rank: 0 target_tp_rank: 0 and target_pp_rank 0"
	return &failure{item: it.index, msg: decodeFailure("handshake", it, reason)}
}

// downReason is what SGLang's CommonKVReceiver.init records when the
// request's bootstrap address is missing from its prefill_info_table: the
// failure of the first-request bug.
func downReason(it *item, port int) string {
	return "Prefill server with bootstrap_addr: " + shownAddr(it.host, port) +
		" is healthy before, but now it is down. Request (bootstrap_room: " +
		strconv.FormatUint(it.room, 10) + ") has been marked as failed."
}
