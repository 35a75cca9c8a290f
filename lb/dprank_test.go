package lb

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// A list of ranks in a /generate batch is no per-item placement: SGLang
// gives every item the request's one value. pdlb drew rooms that ignored
// the list and sent it on unchecked (tester report hA, item 10); it now
// refuses it, before any worker sees it.
func TestListOfDPRanksIsRefused(t *testing.T) {
	h := newHarness(t)
	p, d := h.dpPair()
	h.start(defaultConfig())
	h.waitBootstrap()
	for _, body := range []string{
		`{"text": ["a", "b"], "disagg_prefill_dp_rank": [1, 9]}`,
		`{"text": ["a", "b"], "disagg_prefill_dp_rank": [1, 2]}`,
		`{"input_ids": [[1], [2]], "routed_dp_rank": [0, 1]}`,
	} {
		r := h.post("/generate", body)
		msg := gjson.GetBytes(r.body, "error.message").String()
		if r.status != fasthttp.StatusBadRequest || !strings.Contains(msg, "_dp_rank must be an integer rank") {
			t.Fatalf("%s: got %d %s; want a 400 saying the rank must be one integer", body, r.status, r.body)
		}
	}
	if n := p.Stats().GenerateRequests + d.Stats().GenerateRequests; n != 0 {
		t.Fatalf("%d refused requests reached the workers", n)
	}
}
