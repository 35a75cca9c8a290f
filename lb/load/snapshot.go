package load

import (
	"errors"
	"time"
)

// Unknown is the value of a Rank's count that the worker did not report:
// the field was missing, not a number, or negative. SGLang's router once
// cached such values as loads and sent everything to the worker that
// "reported" -1 (SGLang PRs #28634, #32070); read counts through
// Snapshot.Load and Snapshot.RankLoad, which say when they do not know.
const Unknown = -1

// Route is the worker route a Snapshot was read from.
type Route uint8

const (
	// RouteNone means no route has answered yet.
	RouteNone Route = iota
	// RouteLoads is GET /v1/loads, SGLang's current load report.
	RouteLoads
	// RouteGetLoad is GET /get_load, the older report, deprecated in
	// current SGLang but all that older workers have.
	RouteGetLoad
)

// String returns the route's path, or "none".
func (r Route) String() string {
	switch r {
	case RouteLoads:
		return pathLoads
	case RouteGetLoad:
		return pathGetLoad
	}
	return "none"
}

// Rank is the load of one data-parallel rank of a worker, as it reported
// it. A count the worker did not report is Unknown.
type Rank struct {
	// DPRank is the rank's index, as the worker numbers it.
	DPRank int
	// Running and Waiting count requests in the running batch and in the
	// queues (including, in PD, the bootstrap and transfer queues).
	Running, Waiting int64
	// Reqs is Running + Waiting, SGLang's num_reqs: the load that
	// power_of_two, least_load and least_inflight compare.
	Reqs int64
	// UsedTokens is the KV-cache tokens in use (num_used_tokens).
	UsedTokens int64
	// TotalTokens is UsedTokens plus the tokens of the queued requests
	// (num_total_tokens; /get_load's num_tokens).
	TotalTokens int64
	// MaxTokens is the KV-cache capacity in tokens (max_total_num_tokens).
	MaxTokens int64
	// TokenUsage is UsedTokens / MaxTokens as the worker computed it
	// (token_usage), or Unknown.
	TokenUsage float64
	// Own is Config.Own's count on this rank as the answer arrived.
	Own int64
}

// Snapshot is what a Poller knows of one worker's load at one time. It is
// immutable once published: callers share it and must not modify it,
// Ranks included. Its methods accept a nil *Snapshot, which knows nothing.
type Snapshot struct {
	// Addr is the worker's host:port.
	Addr string
	// Route is the route the latest poll read, or tried last when it
	// failed; RouteNone before the first answer.
	Route Route
	// Ranks holds one entry per DP rank, in increasing DPRank; nil when
	// the load is unknown (Err says why).
	Ranks []Rank
	// Err is why the load is unknown, nil when Ranks holds it.
	Err error
	// At is when the poll that produced this snapshot ended; zero before
	// the first poll.
	At time.Time
	// Since is when the load became known, or unknown, this time: the
	// start of the current state, which lasts across polls.
	Since time.Time
	// Own is Config.Own's count as the answer arrived, 0 without it.
	Own int64
}

// errNotPolled is the Err of a worker that no poll has finished for yet.
var errNotPolled = errors.New("not polled yet")

// Known reports whether s holds a load report.
func (s *Snapshot) Known() bool {
	return s != nil && s.Err == nil && len(s.Ranks) > 0
}

// Load returns the requests running and waiting on the worker, summed over
// its ranks, and false when it is unknown: no report, or a rank that did
// not say. The caller then falls back to its own count of requests in
// flight.
func (s *Snapshot) Load() (int64, bool) {
	return s.sum(func(r *Rank) int64 { return r.Reqs })
}

// Others returns the requests running and waiting on the worker that were
// not the caller's own (Load less Own, at least 0), and false when the load
// is unknown.
func (s *Snapshot) Others() (int64, bool) {
	load, ok := s.Load()
	if !ok {
		return 0, false
	}
	return max(load-s.Own, 0), true
}

// Tokens returns the tokens in use and queued on the worker (TotalTokens
// summed over its ranks), and false when it is unknown.
func (s *Snapshot) Tokens() (int64, bool) {
	return s.sum(func(r *Rank) int64 { return r.TotalTokens })
}

// sum adds up a count of every rank, and reports false when the load is
// unknown or a rank did not say: a partial sum would make the worker look
// lighter than it is.
func (s *Snapshot) sum(count func(*Rank) int64) (int64, bool) {
	if !s.Known() {
		return 0, false
	}
	var total int64
	for i := range s.Ranks {
		n := count(&s.Ranks[i])
		if n == Unknown {
			return 0, false
		}
		total += n
	}
	return total, true
}

// Rank returns the report of DP rank dp, and false if s has none.
func (s *Snapshot) Rank(dp int) (Rank, bool) {
	if !s.Known() {
		return Rank{}, false
	}
	// Ranks are few (a worker's DP size) and usually 0..n-1 in order.
	if dp >= 0 && dp < len(s.Ranks) && s.Ranks[dp].DPRank == dp {
		return s.Ranks[dp], true
	}
	for i := range s.Ranks {
		if s.Ranks[i].DPRank == dp {
			return s.Ranks[i], true
		}
	}
	return Rank{}, false
}

// RankLoad returns the requests running and waiting on DP rank dp, and
// false when it is unknown; for --prefill-dp-policy least_inflight.
func (s *Snapshot) RankLoad(dp int) (int64, bool) {
	r, ok := s.Rank(dp)
	if !ok || r.Reqs == Unknown {
		return 0, false
	}
	return r.Reqs, true
}

// RankOthers is Others for DP rank dp: its load less the caller's own
// requests on it as the answer arrived (Rank.Own), at least 0.
func (s *Snapshot) RankOthers(dp int) (int64, bool) {
	r, ok := s.Rank(dp)
	if !ok || r.Reqs == Unknown {
		return 0, false
	}
	return max(r.Reqs-r.Own, 0), true
}
