package fake

import (
	"time"

	"github.com/valyala/fastjson"
)

// Local prefill on a decode: SGLang PR #34773, an open draft, adds the
// decode flag --disaggregation-decode-enable-conditional-agg
// (Config.ConditionalAgg) and the request field do_local_prefill, so a
// router can send a request to a decode alone and have it prefilled there.
// The fake follows the draft where its description is explicit and the rest
// of the fake where it is not:
//
//   - Only /generate takes the field: the draft adds it to GenerateReqInput
//     alone, so the OpenAI routes ignore it and refuse a roomless request
//     with the usual 400 (rejectNoRoom). A decode without the flag, and
//     every other role, ignore it too.
//   - The marker chooses the path, bootstrap fields or not: in the draft "a
//     marked request uses the decode worker's normal prefill scheduler,
//     while an unmarked request keeps the existing PD transfer path". So a
//     marked item that also carries a room is prefilled locally and its
//     bootstrap fields are only validated, never used: no prefill info
//     fetch, no rendezvous. A prefill sent the same room waits for a decode
//     that never comes and fails after its KVTimeout, as SGLang's prefill
//     does after its bootstrap timeout: a load balancer that sends both legs
//     of a marked request sees it fail.
//   - Per item, as every other field: do_local_prefill is a scalar for the
//     whole /generate batch or a list with one entry per prompt, and the n
//     samples of a prompt share it. In a mixed batch the marked items
//     prefill locally while the others wait for their KV, concurrently; an
//     unmarked item without a room still gets the whole request refused.
//   - A local item goes to a DP rank as any decode item does (its
//     routed_dp_rank, else in turn) and resolves no prefill DP rank, so
//     Config.FirstRequestBug cannot touch it.
//
// The answer is an aggregated server's: same shapes, and logprobs over the
// whole prompt, as nothing is merged.

// localPrefill reports whether the decode prefills prompt p of a request on
// route rt itself: it has ConditionalAgg, rt is /generate, and the prompt's
// do_local_prefill is truthy, as Python tests it.
func (s *Server) localPrefill(rt route, v *fastjson.Value, p int) bool {
	if s.cfg.Role != RoleDecode || !s.cfg.ConditionalAgg || rt != routeGenerate {
		return false
	}
	return truthy(at(v.Get("do_local_prefill"), p))
}

// decodeItem is a decode's work on it before its first token: take room
// for its KV, then prefill it locally, or wait for the KV cache of the
// prefill its bootstrap fields name (counted as waiting, as SGLang counts
// its transfer queue).
func (s *Server) decodeItem(c *call, r *request, it *item, deadline time.Time) *failure {
	if !s.reserve(c, it) {
		return abortedAt(it.index)
	}
	if it.local {
		return s.prefillLocally(c, it)
	}
	var f *failure
	s.wait(&s.ranks[it.dpRank], it, func() bool {
		f = s.receiveKV(c, r, it, deadline)
		return f == nil
	})
	return f
}

// prefillLocally computes it on the decode, as an aggregated server does
// (a decode keeps no prefix cache), and counts it once done.
func (s *Server) prefillLocally(c *call, it *item) *failure {
	if !s.compute(c, it) {
		return abortedAt(it.index)
	}
	s.st.localPrefills.Add(1)
	return nil
}
