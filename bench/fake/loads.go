package fake

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// A worker's load, as SGLang reports it and routers poll it.
//
// GET /v1/loads (entrypoints/v1_loads.py) answers {"timestamp",
// "version", "accelerator", "num_accelerators", "loads": [...]}, one entry
// per DP rank (managers/load_snapshot.py, LoadSnapshot.to_dict, filled by
// SchedulerLoadInquirer.get_loads): the core keys only, as SGLang gives
// when no include section is asked for. Query dp_rank keeps one rank;
// include is checked against SGLang's sections (an unknown one is a 400)
// but the fakes have no section to add. format=prometheus is not served.
//
// The fakes fill the core keys from their model (model.go):
// num_running_reqs counts the items being computed or generating;
// num_waiting_reqs those queued for a prefill slot, for KV room, or (on a
// decode) for their KV transfer, as SGLang counts its waiting, prealloc and
// transfer queues; num_used_tokens the KV tokens the items being served
// hold (their prompt, plus their max tokens on a decode); num_total_tokens
// that plus the prompt tokens of the waiting items; token_usage
// num_used_tokens / max_total_num_tokens; cache_hit_rate the cached share
// of the prompt tokens computed so far.
//
// GET /get_load, deprecated in SGLang and kept as a shim over the same
// numbers (entrypoints/http_server.py), answers a list of {"dp_rank",
// "num_reqs" (running + waiting), "num_waiting_reqs", "num_tokens"
// (num_total_tokens), "num_pending_tokens" (num_total_tokens -
// num_used_tokens), "ts_tic"}.

// loadSections are the include values SGLang's /v1/loads accepts.
var loadSections = []string{"core", "memory", "spec", "lora", "disagg", "queues", "all"}

// defaultMaxTotalTokens is the max_total_num_tokens a fake without a KV
// bound reports.
const defaultMaxTotalTokens = 1 << 20

// maxTotalTokens is the KV pool size the server reports.
func (s *Server) maxTotalTokens() int {
	switch {
	case s.cfg.MaxTotalTokens > 0:
		return s.cfg.MaxTotalTokens
	case s.cfg.CacheTokens > 0:
		return s.cfg.CacheTokens
	}
	return defaultMaxTotalTokens
}

// rankSnapshot is one DP rank's load at one moment.
type rankSnapshot struct {
	rank                         int
	running, waiting             int64
	waitingUncached              int64
	usedTokens, totalTokens, max int64
	cacheHitRate                 float64
}

// snapshot reads rank's load.
func (s *Server) snapshot(rank int) rankSnapshot {
	l := &s.ranks[rank].load
	used := l.usedTokens.Load()
	sn := rankSnapshot{
		rank:            rank,
		running:         l.prefilling.Load() + l.decoding.Load(),
		waiting:         l.waiting.Load(),
		waitingUncached: l.waitUncached.Load(),
		usedTokens:      used,
		totalTokens:     used + l.waitTokens.Load(),
		max:             int64(s.maxTotalTokens()),
	}
	if p := l.promptTokens.Load(); p > 0 {
		sn.cacheHitRate = float64(l.cachedTokens.Load()) / float64(p)
	}
	return sn
}

// serveLoads answers GET /v1/loads.
func (s *Server) serveLoads(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx)
		return
	}
	args := ctx.QueryArgs()
	if inc := string(args.Peek("include")); inc != "" {
		for _, sec := range strings.Split(inc, ",") {
			if !slices.Contains(loadSections, strings.TrimSpace(sec)) {
				b := appendString([]byte(`{"detail":`), "Invalid include sections: {'"+strings.TrimSpace(sec)+"'}")
				writeJSON(ctx, fasthttp.StatusBadRequest, append(b, '}'))
				return
			}
		}
	}
	only := -1
	if args.Has("dp_rank") {
		r, err := strconv.Atoi(string(args.Peek("dp_rank")))
		if err != nil {
			writeJSON(ctx, fasthttp.StatusUnprocessableEntity, []byte(`{"detail":"dp_rank: Input should be a valid integer"}`))
			return
		}
		only = r
	}
	b := append(s.getBuf(), `{"timestamp":`...)
	b = appendString(b, time.Now().UTC().Format("2006-01-02T15:04:05.000000+00:00"))
	b = append(b, `,"version":"`+version+`","accelerator":null,"num_accelerators":1,"loads":[`...)
	first := true
	for r := range s.cfg.DPSize {
		if only >= 0 && r != only {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = s.appendLoad(b, s.snapshot(r))
	}
	b = append(b, "]}"...)
	writeJSON(ctx, fasthttp.StatusOK, b)
	s.putBuf(b)
}

// appendLoad appends a /v1/loads entry: LoadSnapshot's core keys.
func (s *Server) appendLoad(dst []byte, sn rankSnapshot) []byte {
	dst = append(dst, `{"dp_rank":`...)
	dst = strconv.AppendInt(dst, int64(sn.rank), 10)
	dst = append(dst, `,"num_running_reqs":`...)
	dst = strconv.AppendInt(dst, sn.running, 10)
	dst = append(dst, `,"num_waiting_reqs":`...)
	dst = strconv.AppendInt(dst, sn.waiting, 10)
	dst = append(dst, `,"num_waiting_uncached_tokens":`...)
	dst = strconv.AppendInt(dst, sn.waitingUncached, 10)
	dst = append(dst, `,"num_used_tokens":`...)
	dst = strconv.AppendInt(dst, sn.usedTokens, 10)
	dst = append(dst, `,"num_total_tokens":`...)
	dst = strconv.AppendInt(dst, sn.totalTokens, 10)
	dst = append(dst, `,"max_total_num_tokens":`...)
	dst = strconv.AppendInt(dst, sn.max, 10)
	dst = append(dst, `,"max_running_requests":`...)
	dst = strconv.AppendInt(dst, int64(s.cfg.MaxPrefills), 10)
	dst = append(dst, `,"token_usage":`...)
	dst = appendFloat(dst, round4(float64(sn.usedTokens)/float64(sn.max)))
	dst = append(dst, `,"gen_throughput":0.0,"cache_hit_rate":`...)
	dst = appendFloat(dst, round4(sn.cacheHitRate))
	return append(dst, `,"utilization":0.0}`...)
}

// serveGetLoad answers the legacy GET /get_load.
func (s *Server) serveGetLoad(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx)
		return
	}
	tic := time.Since(s.created).Seconds() // a monotonic clock, as perf_counter
	b := append(s.getBuf(), '[')
	for r := range s.cfg.DPSize {
		if r > 0 {
			b = append(b, ',')
		}
		sn := s.snapshot(r)
		b = append(b, `{"dp_rank":`...)
		b = strconv.AppendInt(b, int64(r), 10)
		b = append(b, `,"num_reqs":`...)
		b = strconv.AppendInt(b, sn.running+sn.waiting, 10)
		b = append(b, `,"num_waiting_reqs":`...)
		b = strconv.AppendInt(b, sn.waiting, 10)
		b = append(b, `,"num_tokens":`...)
		b = strconv.AppendInt(b, sn.totalTokens, 10)
		b = append(b, `,"num_pending_tokens":`...)
		b = strconv.AppendInt(b, sn.totalTokens-sn.usedTokens, 10)
		b = append(b, `,"ts_tic":`...)
		b = appendFloat(b, tic)
		b = append(b, '}')
	}
	b = append(b, ']')
	writeJSON(ctx, fasthttp.StatusOK, b)
	s.putBuf(b)
}

// round4 rounds f to 4 decimals, as SGLang rounds its ratios.
func round4(f float64) float64 { return math.Round(f*1e4) / 1e4 }
