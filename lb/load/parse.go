package load

import (
	"fmt"
	"math"
	"sort"

	"github.com/valyala/fastjson"
)

// Paths of the two load reports. /v1/loads is asked for its core section
// only: the per-rank counts are all pdlb reads, and the other sections
// (memory, speculative, LoRA, ...) cost the worker work to gather.
const (
	pathLoads   = "/v1/loads"
	pathGetLoad = "/get_load"
	queryLoads  = pathLoads + "?include=core"
)

// maxCount bounds the counts taken from a report: larger numbers (or a
// float that would overflow int64) are not counts any worker has.
const maxCount = 1 << 53

// readLoads reads a GET /v1/loads answer: an object whose "loads" array
// has one object per DP rank with num_running_reqs, num_waiting_reqs,
// num_used_tokens, num_total_tokens, max_total_num_tokens and token_usage
// (SGLang python/sglang/srt/entrypoints/v1_loads.py,
// python/sglang/srt/managers/load_snapshot.py). The other top-level keys
// (timestamp, version, accelerator, num_accelerators, and the aggregate
// object of older versions) are not read.
func readLoads(p *fastjson.Parser, body []byte) ([]Rank, error) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("cannot parse %s answer: %w", pathLoads, err)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("%s answer is a JSON %s; want an object", pathLoads, v.Type())
	}
	loads := v.Get("loads")
	if loads == nil || loads.Type() != fastjson.TypeArray {
		return nil, fmt.Errorf("%s answer has no loads array", pathLoads)
	}
	items, _ := loads.Array()
	return readRanks(pathLoads, items, rankOfLoads)
}

// readGetLoad reads a GET /get_load answer: an array with one object per
// DP rank, with num_reqs (running + waiting), num_waiting_reqs and
// num_tokens (tokens in use plus those queued); the newest shim adds
// num_pending_tokens (num_tokens less those in use). SGLang's
// http_server.py and, in older versions, Scheduler.get_load.
func readGetLoad(p *fastjson.Parser, body []byte) ([]Rank, error) {
	v, err := p.ParseBytes(body)
	if err != nil {
		return nil, fmt.Errorf("cannot parse %s answer: %w", pathGetLoad, err)
	}
	if v.Type() != fastjson.TypeArray {
		return nil, fmt.Errorf("%s answer is a JSON %s; want an array", pathGetLoad, v.Type())
	}
	items, _ := v.Array()
	return readRanks(pathGetLoad, items, rankOfGetLoad)
}

// readRanks turns the per-rank objects of a report into Ranks sorted by
// DP rank. An entry without a usable dp_rank (older /get_load sends null
// when the worker has no DP) takes its position in the array.
func readRanks(path string, items []*fastjson.Value, rank func(*fastjson.Value) Rank) ([]Rank, error) {
	if len(items) == 0 {
		return nil, fmt.Errorf("%s answer reports no rank", path)
	}
	ranks := make([]Rank, len(items))
	for i, item := range items {
		if item.Type() != fastjson.TypeObject {
			return nil, fmt.Errorf("%s answer: rank entry %d is a JSON %s; want an object", path, i, item.Type())
		}
		ranks[i] = rank(item)
		ranks[i].DPRank = i
		if dp := count(item, "dp_rank"); dp != Unknown {
			ranks[i].DPRank = int(dp)
		}
	}
	sort.Slice(ranks, func(i, j int) bool { return ranks[i].DPRank < ranks[j].DPRank })
	for i := 1; i < len(ranks); i++ {
		if ranks[i].DPRank == ranks[i-1].DPRank {
			return nil, fmt.Errorf("%s answer reports rank %d twice", path, ranks[i].DPRank)
		}
	}
	return ranks, nil
}

func rankOfLoads(v *fastjson.Value) Rank {
	r := Rank{
		Running:     count(v, "num_running_reqs"),
		Waiting:     count(v, "num_waiting_reqs"),
		UsedTokens:  count(v, "num_used_tokens"),
		TotalTokens: count(v, "num_total_tokens"),
		MaxTokens:   count(v, "max_total_num_tokens"),
		TokenUsage:  ratio(v, "token_usage"),
		Reqs:        Unknown,
	}
	if r.Running != Unknown && r.Waiting != Unknown {
		r.Reqs = r.Running + r.Waiting
	}
	return r
}

func rankOfGetLoad(v *fastjson.Value) Rank {
	r := Rank{
		Reqs:        count(v, "num_reqs"),
		Waiting:     count(v, "num_waiting_reqs"),
		TotalTokens: count(v, "num_tokens"),
		Running:     Unknown,
		UsedTokens:  Unknown,
		MaxTokens:   Unknown,
		TokenUsage:  Unknown,
	}
	if r.Reqs != Unknown && r.Waiting != Unknown && r.Reqs >= r.Waiting {
		r.Running = r.Reqs - r.Waiting
	}
	if pending := count(v, "num_pending_tokens"); pending != Unknown && r.TotalTokens != Unknown && r.TotalTokens >= pending {
		r.UsedTokens = r.TotalTokens - pending
	}
	return r
}

// count returns the non-negative number under key, or Unknown when it is
// missing, null, not a number, negative or too large to be a count. A
// float is truncated: SGLang sends integers, but JSON does not say so.
func count(v *fastjson.Value, key string) int64 {
	f := number(v, key)
	if f < 0 || f >= maxCount {
		return Unknown
	}
	return int64(f)
}

// ratio returns the non-negative number under key, or Unknown.
func ratio(v *fastjson.Value, key string) float64 {
	f := number(v, key)
	if f < 0 {
		return Unknown
	}
	return f
}

// number returns the finite number under key, or -1.
func number(v *fastjson.Value, key string) float64 {
	x := v.Get(key)
	if x == nil || x.Type() != fastjson.TypeNumber {
		return -1
	}
	f, err := x.Float64()
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return -1
	}
	return f
}
