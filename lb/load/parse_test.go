package load

import (
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// loadsEntry is one rank of a /v1/loads answer, as SGLang's LoadSnapshot
// sends its core section.
func loadsEntry(dp, running, waiting, used, total int) string {
	return fmt.Sprintf(`{"dp_rank":%d,"num_running_reqs":%d,"num_waiting_reqs":%d,`+
		`"num_waiting_uncached_tokens":0,"num_used_tokens":%d,"num_total_tokens":%d,`+
		`"max_total_num_tokens":100000,"max_running_requests":256,"token_usage":%g,`+
		`"gen_throughput":1234.5,"cache_hit_rate":0.5,"utilization":0.1}`,
		dp, running, waiting, used, total, float64(used)/100000)
}

// loadsAnswer wraps entries as the /v1/loads route does.
func loadsAnswer(entries ...string) string {
	return `{"timestamp":"2026-07-01T12:00:00+00:00","version":"0.5.9","accelerator":"NVIDIA H100 80GB HBM3",` +
		`"num_accelerators":1,"loads":[` + strings.Join(entries, ",") + `]}`
}

func TestReadLoads(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		var p fastjson.Parser
		ranks, err := readLoads(&p, []byte(body))
		if got := describe(ranks, err); !matches(got, want) {
			t.Errorf("readLoads(%s)\ngot  %s\nwant %s", body, got, want)
		}
	}
	f(loadsAnswer(loadsEntry(0, 3, 2, 4096, 5000)),
		"[{0 run 3 wait 2 reqs 5 used 4096 total 5000 max 100000 usage 0.04096}]")
	// Ranks come back in DP order whatever the worker's order.
	f(loadsAnswer(loadsEntry(1, 7, 0, 10, 10), loadsEntry(0, 1, 1, 20, 30)),
		"[{0 run 1 wait 1 reqs 2 used 20 total 30 max 100000 usage 0.0002} "+
			"{1 run 7 wait 0 reqs 7 used 10 total 10 max 100000 usage 0.0001}]")
	// -1, null, a string, or a missing field is unknown, never a count;
	// Reqs is unknown as soon as one of its terms is.
	f(loadsAnswer(`{"dp_rank":0,"num_running_reqs":-1,"num_waiting_reqs":2,"num_used_tokens":null,`+
		`"num_total_tokens":"7","token_usage":-1}`),
		"[{0 run -1 wait 2 reqs -1 used -1 total -1 max -1 usage -1}]")
	// A float count is truncated; a count too large for one is unknown.
	f(loadsAnswer(`{"dp_rank":0,"num_running_reqs":2.0,"num_waiting_reqs":1e30,"num_used_tokens":5.7}`),
		"[{0 run 2 wait -1 reqs -1 used 5 total -1 max -1 usage -1}]")
	// No dp_rank: the position stands for it.
	f(loadsAnswer(`{"num_running_reqs":1,"num_waiting_reqs":0}`, `{"num_running_reqs":4,"num_waiting_reqs":0}`),
		"[{0 run 1 wait 0 reqs 1 used -1 total -1 max -1 usage -1} {1 run 4 wait 0 reqs 4 used -1 total -1 max -1 usage -1}]")
	// The shape before PR #28634: an aggregate object, no loads array.
	f(`{"timestamp":"x","aggregate":{"total_tokens":10}}`, "error: /v1/loads answer has no loads array")
	f(loadsAnswer(), "error: /v1/loads answer reports no rank")
	f(`[]`, "error: /v1/loads answer is a JSON array; want an object")
	f(`{"loads":{}}`, "error: /v1/loads answer has no loads array")
	f(loadsAnswer(`3`), "error: /v1/loads answer: rank entry 0 is a JSON number; want an object")
	f(loadsAnswer(loadsEntry(0, 1, 1, 1, 1), loadsEntry(0, 1, 1, 1, 1)), "error: /v1/loads answer reports rank 0 twice")
	f(`<html>Internal Server Error</html>`, "error: cannot parse /v1/loads answer: *")
	f(``, "error: cannot parse /v1/loads answer: *")
}

func TestReadGetLoad(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		var p fastjson.Parser
		ranks, err := readGetLoad(&p, []byte(body))
		if got := describe(ranks, err); !matches(got, want) {
			t.Errorf("readGetLoad(%s)\ngot  %s\nwant %s", body, got, want)
		}
	}
	// The newest shim: num_tokens and num_pending_tokens give the tokens
	// in use.
	f(`[{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":2,"num_tokens":5000,"num_pending_tokens":904,"ts_tic":1.5}]`,
		"[{0 run 3 wait 2 reqs 5 used 4096 total 5000 max -1 usage -1}]")
	// Older workers: no num_pending_tokens, and dp_rank null without DP.
	f(`[{"dp_rank":null,"num_reqs":4,"num_waiting_reqs":0,"num_tokens":300}]`,
		"[{0 run 4 wait 0 reqs 4 used -1 total 300 max -1 usage -1}]")
	// A fork that counts pages instead of tokens: the requests still count.
	f(`[{"dp_rank":1,"num_reqs":1,"num_waiting_reqs":0,"num_pages":3},{"dp_rank":0,"num_reqs":2,"num_waiting_reqs":1,"num_pages":9}]`,
		"[{0 run 1 wait 1 reqs 2 used -1 total -1 max -1 usage -1} {1 run 1 wait 0 reqs 1 used -1 total -1 max -1 usage -1}]")
	// Inconsistent counts leave what cannot be derived unknown.
	f(`[{"num_reqs":1,"num_waiting_reqs":3,"num_tokens":10,"num_pending_tokens":20}]`,
		"[{0 run -1 wait 3 reqs 1 used -1 total 10 max -1 usage -1}]")
	f(`[{"num_reqs":-1,"num_waiting_reqs":-1,"num_tokens":-1}]`,
		"[{0 run -1 wait -1 reqs -1 used -1 total -1 max -1 usage -1}]")
	f(`{"load":3}`, "error: /get_load answer is a JSON object; want an array")
	f(`[]`, "error: /get_load answer reports no rank")
	f(`[1`, "error: cannot parse /get_load answer: *")
}

// describe renders what a reader returned, for comparing with a want.
func describe(ranks []Rank, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprintf("{%d run %d wait %d reqs %d used %d total %d max %d usage %g}",
			r.DPRank, r.Running, r.Waiting, r.Reqs, r.UsedTokens, r.TotalTokens, r.MaxTokens, r.TokenUsage)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// matches reports whether got is want or, when want ends in "*", starts
// with the rest of it: fastjson's own wording of a parse error is not
// pdlb's to pin.
func matches(got, want string) bool {
	if prefix, ok := strings.CutSuffix(want, "*"); ok {
		return strings.HasPrefix(got, prefix)
	}
	return got == want
}

// FuzzReaders checks that no answer makes a reader panic, and that what
// it accepts holds no negative count other than Unknown, ranks in strictly
// increasing order.
func FuzzReaders(f *testing.F) {
	f.Add([]byte(loadsAnswer(loadsEntry(0, 3, 2, 4096, 5000), loadsEntry(1, 0, 0, 0, 0))))
	f.Add([]byte(`[{"dp_rank":0,"num_reqs":5,"num_waiting_reqs":2,"num_tokens":5000,"num_pending_tokens":904}]`))
	f.Add([]byte(`{"loads":[{"dp_rank":-3,"num_running_reqs":-1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var p fastjson.Parser
		for _, read := range []func(*fastjson.Parser, []byte) ([]Rank, error){readLoads, readGetLoad} {
			ranks, err := read(&p, body)
			if err != nil {
				continue
			}
			for i, r := range ranks {
				if i > 0 && r.DPRank <= ranks[i-1].DPRank {
					t.Fatalf("ranks out of order: %v", ranks)
				}
				for _, c := range []int64{r.Running, r.Waiting, r.Reqs, r.UsedTokens, r.TotalTokens, r.MaxTokens} {
					if c < Unknown {
						t.Fatalf("count %d in %+v", c, r)
					}
				}
				if r.TokenUsage < 0 && r.TokenUsage != Unknown {
					t.Fatalf("token usage %g in %+v", r.TokenUsage, r)
				}
			}
		}
	})
}
