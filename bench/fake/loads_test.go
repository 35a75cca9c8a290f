package fake

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// cacheCfg is a server whose prefix cache holds every prompt of these
// tests, and reports it on the OpenAI routes too.
var cacheCfg = Config{CacheTokens: 1000, CacheReport: true}

// Each route reports the cached part of a prompt sent a second time:
// meta_info.cached_tokens on /generate, in every stream event too, and
// usage.prompt_tokens_details on the OpenAI routes.
func TestCachedTokensOnEachRoute(t *testing.T) {
	t.Parallel()
	sys := strings.Repeat("s", 40) // 10 tokens
	for _, tc := range []struct {
		name, path, first, second string
		field                     []string
		want                      string
	}{
		{"generate text", "/generate", `{"text":"` + sys + `"}`, `{"text":"` + sys + `xxxx"}`,
			[]string{"meta_info", "cached_tokens"}, "10"},
		{"generate input_ids", "/generate", `{"input_ids":[1,2,3,4]}`, `{"input_ids":[1,2,3,5]}`,
			[]string{"meta_info", "cached_tokens"}, "3"},
		{"generate, the same prompt", "/generate", `{"text":"` + sys + `"}`, `{"text":"` + sys + `"}`,
			[]string{"meta_info", "cached_tokens"}, "9"},
		{"completions", "/v1/completions", `{"prompt":"` + sys + `"}`, `{"prompt":"` + sys + `yyyy"}`,
			[]string{"usage", "prompt_tokens_details", "cached_tokens"}, "10"},
		{"chat with a shared system prompt", "/v1/chat/completions",
			`{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"aaaa"}]}`,
			`{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"bbbb"}]}`,
			[]string{"usage", "prompt_tokens_details", "cached_tokens"}, "10"},
		{"chat, another system prompt", "/v1/chat/completions",
			`{"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"aaaa"}]}`,
			`{"messages":[{"role":"system","content":"t` + sys + `"},{"role":"user","content":"aaaa"}]}`,
			[]string{"usage", "prompt_tokens_details"}, "null"},
	} {
		n := NewNetwork()
		startServer(t, n, "agg:30000", cacheCfg)
		do(t, n, "POST", "agg:30000", tc.path, tc.first)
		res := do(t, n, "POST", "agg:30000", tc.path, tc.second)
		if got := str(parseJSON(t, res.body), tc.field...); got != tc.want {
			t.Errorf("%s: got %s %s; want %s: %s", tc.name, strings.Join(tc.field, "."), got, tc.want, res.body)
		}
	}
}

// Without Config.CacheReport, the OpenAI usage has no details, as SGLang's
// without --enable-cache-report; /generate reports cached_tokens anyway,
// in every event of a stream.
func TestCachedTokensReport(t *testing.T) {
	t.Parallel()
	n := NewNetwork()
	startServer(t, n, "agg:30000", Config{CacheTokens: 1000})
	body := `{"prompt":"` + strings.Repeat("p", 40) + `","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`
	do(t, n, "POST", "agg:30000", "/v1/completions", body)
	_, evs, err := stream(n, "agg:30000", "/v1/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	if got := str(parseJSON(t, evs[len(evs)-2]), "usage", "prompt_tokens_details"); got != "null" {
		t.Errorf("got prompt_tokens_details %s without CacheReport; want null", got)
	}
	_, evs, err = stream(n, "agg:30000", "/generate", `{"text":"`+strings.Repeat("p", 40)+`","stream":true,"sampling_params":{"max_new_tokens":3}}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs[:len(evs)-1] {
		if got := str(parseJSON(t, ev), "meta_info", "cached_tokens"); got != "9" {
			t.Errorf("got cached_tokens %s in event %s; want 9 in every event", got, ev)
		}
	}
}

// In PD the decode reports the cached tokens of the prefill that computed
// the prompt, as SGLang's decode copies them from the KV transfer's
// metadata; in process and across processes alike.
func TestPDCachedTokensReachTheDecode(t *testing.T) {
	t.Parallel()
	for _, crossProcess := range []bool{false, true} {
		n, p, d := newPD(t, cacheCfg, Config{CacheReport: true})
		if crossProcess {
			n.removePrefill(p.regKeys, p)
		}
		for room, want := range []string{"null", `{"cached_tokens":10}`} {
			body := pdBody(`"prompt":"`+strings.Repeat("q", 40+4*room)+`","max_tokens":1`, "prefill", "8998", uint64(room))
			pres, dres := both(t, n, "/v1/completions", body, body)
			for leg, res := range map[string]result{"prefill": pres, "decode": dres} {
				if got := str(parseJSON(t, res.body), "usage", "prompt_tokens_details"); got != want {
					t.Errorf("crossProcess %v, request %d: got the %s's prompt_tokens_details %s; want %s", crossProcess, room, leg, got, want)
				}
			}
		}
		if got := d.Stats().KVTransfersOK; got != 2 {
			t.Errorf("got %d transfers; want 2", got)
		}
	}
}

// /v1/loads and /get_load report the model's counts in SGLang's shapes:
// three prompts sent at once to a server that computes one at a time.
func TestLoads(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{MaxPrefills: 1, PrefillDelay: time.Second, CacheTokens: 64, MaxTotalTokens: 100})
		defer s.Close()
		get := func(path string) string {
			ctx := newCtx("GET", path, "")
			s.Handler(ctx)
			if ctx.Response.StatusCode() != 200 {
				t.Fatalf("GET %s: status %d: %s", path, ctx.Response.StatusCode(), ctx.Response.Body())
			}
			return string(ctx.Response.Body())
		}
		const idle = `{"dp_rank":0,"num_running_reqs":0,"num_waiting_reqs":0,"num_waiting_uncached_tokens":0,` +
			`"num_used_tokens":0,"num_total_tokens":0,"max_total_num_tokens":100,"max_running_requests":1,` +
			`"token_usage":0,"gen_throughput":0.0,"cache_hit_rate":0,"utilization":0.0}`
		if got := str(parseJSON(t, get("/v1/loads")), "loads", "0"); got != idle {
			t.Errorf("got idle load %s; want %s", got, idle)
		}

		var wg sync.WaitGroup
		body := `{"text":"abcdefgh","sampling_params":{"max_new_tokens":1}}` // 2 tokens, and 1 to generate
		for range 3 {
			wg.Go(func() { s.Handler(newCtx("POST", "/generate", body)) })
		}
		synctest.Wait() // one prompt is computed, two wait
		v := parseJSON(t, get("/v1/loads"))
		for _, key := range []string{"timestamp", "version", "accelerator", "num_accelerators"} {
			if v.Get(key) == nil {
				t.Errorf("/v1/loads has no %s", key)
			}
		}
		const busy = `{"dp_rank":0,"num_running_reqs":1,"num_waiting_reqs":2,"num_waiting_uncached_tokens":4,` +
			`"num_used_tokens":3,"num_total_tokens":7,"max_total_num_tokens":100,"max_running_requests":1,` +
			`"token_usage":0.03,"gen_throughput":0.0,"cache_hit_rate":0,"utilization":0.0}`
		if got := str(v, "loads", "0"); got != busy {
			t.Errorf("got busy load %s; want %s", got, busy)
		}
		legacy := parseJSON(t, get("/get_load")).GetArray()
		if len(legacy) != 1 {
			t.Fatalf("got %d /get_load entries; want 1", len(legacy))
		}
		legacy[0].Del("ts_tic")
		if got, want := legacy[0].String(), `{"dp_rank":0,"num_reqs":3,"num_waiting_reqs":2,"num_tokens":7,"num_pending_tokens":4}`; got != want {
			t.Errorf("got /get_load entry %s; want %s", got, want)
		}
		wg.Wait()
		// The first prompt went in cold, the next two found all but its last
		// token cached: 2 of 6 prompt tokens.
		if got := str(parseJSON(t, get("/v1/loads?dp_rank=0&include=core")), "loads", "0", "cache_hit_rate"); got != "0.3333" {
			t.Errorf("got cache_hit_rate %s; want 0.3333", got)
		}
	})
}

// /v1/loads has one entry per DP rank, keeps one with dp_rank, and refuses
// an unknown include section as SGLang does.
func TestLoadsQuery(t *testing.T) {
	t.Parallel()
	s := New(Config{DPSize: 3})
	defer s.Close()
	f := func(query string, status int, want string) {
		t.Helper()
		ctx := newCtx("GET", "/v1/loads"+query, "")
		s.Handler(ctx)
		v := parseJSON(t, string(ctx.Response.Body()))
		got := str(v, "detail")
		if status == 200 {
			ranks := []string{}
			for _, l := range v.GetArray("loads") {
				ranks = append(ranks, l.Get("dp_rank").String())
			}
			got = strings.Join(ranks, ",")
		}
		if ctx.Response.StatusCode() != status || got != want {
			t.Errorf("%s: got %d %s; want %d %s", query, ctx.Response.StatusCode(), got, status, want)
		}
	}
	f("", 200, "0,1,2")
	f("?dp_rank=1", 200, "1")
	f("?include=all", 200, "0,1,2")
	f("?include=core,bogus", 400, `"Invalid include sections: {'bogus'}"`)
}
