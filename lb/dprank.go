package lb

import (
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
)

// dpPlan is where a request's KV cache lives on the prefill side (see package
// bootstrap's documentation, DP ranks). When rank is set, the room is drawn
// so that room % size == rank, which keeps SGLang's follow_bootstrap_room
// placement and the DP-rank fields in agreement; with hint, the prefill is
// sent routed_dp_rank and disagg_prefill_dp_rank, and the decode
// disagg_prefill_dp_rank, all equal to rank.
type dpPlan struct {
	rank int // -1 when the plan places nothing
	size int
	hint bool
	// load counts the request against its rank until the prefill call ends.
	load *rankLoad
}

var noPlan = dpPlan{rank: -1}

// rankLoad is pdlb's view of one prefill's DP ranks for one registry
// generation: requests in flight per rank, and the round-robin cursor.
type rankLoad struct {
	generation uint64
	next       atomic.Uint32
	inflight   []atomic.Int32
}

// planDP places a request on a prefill DP rank: the client's own
// disagg_prefill_dp_rank (checked against the prefill's dp_size, which
// SGLang never does; selection chose a prefill that has it, so this catches
// a registry change since), else the --prefill-dp-policy's choice, else the
// client's routed_dp_rank, to which the room is aligned and which is sent
// as disagg_prefill_dp_rank too, so that the prefill finds no
// follow_bootstrap_room conflict, whatever the items. A plan that tells the
// decode a rank waits for the pair's warm-up (see warm.go).
func (s *Server) planDP(info bootstrap.Request, rt *route, p, d *Backend, deadline time.Time, client net.Conn) (dpPlan, *answerError) {
	hinted := info.PrefillDPRank.Set
	st := s.registry.State(p.index)
	if hinted && info.PrefillDPRank.Rank < 0 {
		size := 0
		if st.Ready {
			size = st.Info.DPSize
		}
		return noPlan, rankOutOfRange(info.PrefillDPRank.Rank, size, p)
	}
	batch := isBatch(rt, info)
	wantsPolicy := !hinted && !batch && s.cfg.PrefillDPPolicy != DPPolicyOff && st.Ready && st.Info.DPSize > 1
	// A client's routed_dp_rank on a prefill with DP is hinted too, when
	// its pair is warm: the aligned room alone keeps only one item in
	// agreement, and a prompt list or n > 1 samples give item i the room
	// room+i (a /generate batch item's j-th sample, its room+j), which the
	// prefill would refuse as a follow_bootstrap_room conflict. Such a
	// request never waits for a warm-up: mini_lb's placement, the room
	// alone, was enough for it before, and is for one item.
	hintRouted := false
	if !hinted && !wantsPolicy && info.RoutedDPRank.Set && st.Ready && st.Info.DPSize > 1 && s.warm != nil {
		hintRouted = s.warm.warmSoon(s.warm.pair(p, d))
	}
	if (hinted || wantsPolicy) && s.warm != nil {
		if warm, ae := s.awaitWarmPair(p, d, wantsPolicy, deadline, client); !warm {
			return noPlan, ae
		}
		st = s.registry.State(p.index)
	}
	return s.placeDP(info, st, p, wantsPolicy, hintRouted)
}

// awaitWarmPair waits for the warm-up of p and d's pair that a plan
// telling the decode a rank needs (see warm.go). When it returns false,
// the request goes without a plan: with the answer to give its client, or
// with none when the plan was only the policy's (wantsPolicy), which is an
// optimisation and no reason to fail or wait for a warm-up failing again.
func (s *Server) awaitWarmPair(p, d *Backend, wantsPolicy bool, deadline time.Time, client net.Conn) (bool, *answerError) {
	pr := s.warm.pair(p, d)
	if wantsPolicy && s.warm.failing(pr) {
		// Its last warm-up failed: the next may take as long, and the
		// policy is no reason to make a request wait for it.
		s.unplaced.Inc()
		return false, nil
	}
	err := s.warm.ensure(pr, deadline, client)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errClientGone):
		return false, &answerError{statusClientGone, reasonClientGone, err.Error()}
	case wantsPolicy:
		// The policy is an optimisation: without a warm pair, fall
		// back to mini_lb's placement rather than fail.
		s.unplaced.Inc()
		return false, nil
	}
	r := reasonNotWarm
	if errors.Is(err, errShutdown) {
		r = reasonShutdown
	}
	return false, &answerError{fasthttp.StatusServiceUnavailable, r, err.Error()}
}

// placeDP is planDP's choice of a rank once the pair is warm, st the
// prefill's bootstrap state by then: the client's disagg_prefill_dp_rank,
// else the policy's pick, else the client's routed_dp_rank.
func (s *Server) placeDP(info bootstrap.Request, st *bootstrap.State, p *Backend, wantsPolicy, hintRouted bool) (dpPlan, *answerError) {
	size := 0
	if st.Ready {
		size = st.Info.DPSize
	}
	switch {
	case info.PrefillDPRank.Set:
		r := info.PrefillDPRank.Rank
		if size > 0 && r >= size {
			return noPlan, rankOutOfRange(r, size, p)
		}
		return dpPlan{rank: r, size: size, hint: true}, nil
	case wantsPolicy && st.Ready && st.Info.DPSize > 1:
		load := p.rankLoad(st)
		r := s.pickRank(load, p)
		load.inflight[r].Add(1)
		return dpPlan{rank: r, size: size, hint: true, load: load}, nil
	case info.RoutedDPRank.Set && size > 1 && info.RoutedDPRank.Rank >= 0 && info.RoutedDPRank.Rank < size:
		return dpPlan{rank: info.RoutedDPRank.Rank, size: size, hint: hintRouted}, nil
	}
	return noPlan, nil
}

// rankNeeds returns the DP rank q's prefill and decode must have, -1 for
// any, going by what planDP and inject send them. The prefill gets the
// client's disagg_prefill_dp_rank as its routed_dp_rank; else the client's
// routed_dp_rank, unless --prefill-dp-policy replaces it, as it does on a
// prefill with dp_size > 1 (then any such prefill will do, and one without
// DP only for rank 0). The decode gets the client's routed_dp_rank as it
// is. SGLang range-checks routed_dp_rank on both (tokenizer_manager.py).
// Negative ranks are left for planDP and the workers to refuse.
func (s *Server) rankNeeds(q *clientRequest) (prefill, decode int) {
	prefill, decode = -1, -1
	if routed := q.info.RoutedDPRank; routed.Set {
		prefill, decode = routed.Rank, routed.Rank
		if s.cfg.PrefillDPPolicy != DPPolicyOff && !isBatch(q.rt, q.info) {
			// Rank 1: any prefill with DP, whose rank the policy picks;
			// rank 0 stays 0, which every prefill has.
			prefill = min(prefill, 1)
		}
	}
	if hint := q.info.PrefillDPRank; hint.Set {
		prefill = hint.Rank
	}
	return prefill, decode
}

// noWorkerFor answers q when pool has no worker for it: pdlb's 400 when no
// worker of the pool has the DP rank q needs there (by the dp_size each
// last reported), else the answer for a pool whose workers are all down,
// since one that has the rank may come back.
func (s *Server) noWorkerFor(q *clientRequest, pool *Pool, rank int, why decodeOnly) {
	if rank >= 0 {
		if largest, known := pool.largestDPSize(); known && rank >= largest {
			s.answerError(q, noWorkerHasRank(q, pool.role, largest))
			return
		}
		q.explain("no available " + pool.role + " has DP rank " + strconv.Itoa(rank))
	}
	s.serveDecodeOnly(q, why)
}

// noWorkerHasRank is the 400 for a request whose DP rank no worker of role
// has, largest being their largest dp_size.
func noWorkerHasRank(q *clientRequest, role string, largest int) *answerError {
	field, rank := "routed_dp_rank", q.info.RoutedDPRank.Rank
	if role == rolePrefill && q.info.PrefillDPRank.Set {
		field, rank = "disagg_prefill_dp_rank", q.info.PrefillDPRank.Rank
	}
	size := strconv.Itoa(largest)
	return &answerError{fasthttp.StatusBadRequest, reasonInvalidRequest,
		field + "=" + strconv.Itoa(rank) + " out of range [0, " + size + "): the largest dp_size among the " + role + "s is " + size}
}

// rankOutOfRange is the 400 for a rank prefill p does not have; size is
// its dp_size, 0 if unknown (then only a negative rank is known to be out).
func rankOutOfRange(rank, size int, p *Backend) *answerError {
	valid := "(ranks start at 0)"
	if size > 0 {
		valid = "[0, " + strconv.Itoa(size) + ")"
	}
	return &answerError{fasthttp.StatusBadRequest, reasonInvalidRequest,
		"disagg_prefill_dp_rank=" + strconv.Itoa(rank) + " out of range " + valid + " for prefill " + p.url}
}

// pickRank chooses a DP rank of prefill p, whose ranks' loads are l, by
// the policy.
func (s *Server) pickRank(l *rankLoad, p *Backend) int {
	n := len(l.inflight)
	start := int(l.next.Add(1)-1) % n
	if s.cfg.PrefillDPPolicy == DPPolicyRoundRobin {
		return start
	}
	best, bestLoad := start, s.rankLoadOf(p, start, int64(l.inflight[start].Load()))
	for i := 1; i < n; i++ {
		r := (start + i) % n
		if load := s.rankLoadOf(p, r, int64(l.inflight[r].Load())); load < bestLoad {
			best, bestLoad = r, load
		}
	}
	return best
}

// rooms fills rooms with n fresh rooms placed on the plan's rank.
func (pl *dpPlan) rooms(rooms []uint64, n int, newRoom func() uint64) []uint64 {
	rooms = rooms[:0]
	for range n {
		room := newRoom()
		if pl.rank >= 0 && pl.size > 1 {
			room = bootstrap.AlignRoom(room, pl.size, pl.rank)
		}
		rooms = append(rooms, room)
	}
	return rooms
}

// release ends the request's claim on its rank.
func (pl *dpPlan) release() {
	if pl.load != nil {
		pl.load.inflight[pl.rank].Add(-1)
		pl.load = nil
	}
}
