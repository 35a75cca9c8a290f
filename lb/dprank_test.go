package lb

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
)

// A list of ranks in a /generate batch is no per-item placement: SGLang
// gives every item the request's one value. pdlb drew rooms that ignored
// the list and sent it on unchecked; it now
// refuses it, before any worker sees it.
func TestListOfDPRanksIsRefused(t *testing.T) {
	inBubble(t, func(t *testing.T) {
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
	})
}

// mixedDP starts prefills with dp_size 1, 2 and 2 and decodes with dp_size 1
// and 2, then pdlb in front of them with cfg (warm-up on, so pdlb learns
// the decodes' dp_size), and returns once every pair is warm.
func (h *harness) mixedDP(cfg Config) (prefills, decodes []*fake.Server) {
	h.t.Helper()
	cfg.Prefill, cfg.Decode = nil, nil
	for i, dp := range []int{1, 2, 2} {
		addr := "prefill-" + strconv.Itoa(i) + ":30000"
		prefills = append(prefills, h.fake(addr, fake.Config{Role: fake.RolePrefill, DPSize: dp, Tokens: 2, KVTimeout: 5 * time.Second}))
		cfg.Prefill = append(cfg.Prefill, PrefillSpec{URL: "http://" + addr, BootstrapPort: 8998})
	}
	for i, dp := range []int{1, 2} {
		addr := "decode-" + strconv.Itoa(i) + ":30010"
		decodes = append(decodes, h.fake(addr, fake.Config{Role: fake.RoleDecode, DPSize: dp, Tokens: 2, KVTimeout: 5 * time.Second}))
		cfg.Decode = append(cfg.Decode, "http://"+addr)
	}
	cfg.NoPrewarm = false
	srv := h.start(cfg)
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range srv.prefills.backends() {
		for _, d := range srv.decodes.backends() {
			if err := srv.warm.ensure(srv.warm.pair(p, d), deadline, nil); err != nil {
				h.t.Fatal(err)
			}
		}
	}
	return prefills, decodes
}

func generations(servers []*fake.Server) []uint64 {
	n := make([]uint64, len(servers))
	for i, s := range servers {
		n[i] = s.Stats().GenerateRequests
	}
	return n
}

// With prefills of different dp_size, a request that names a DP rank went
// to any prefill and got pdlb's 400 (disagg_prefill_dp_rank) or a worker's
// (routed_dp_rank) from those where the rank does not exist (SGLang #10174,
// #13052). It now goes only to workers that have the rank, by each pool's
// policy, and gets a 400 only when none has.
func TestMixedDPSizesPlaceRanksWhereTheyExist(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				cfg := defaultConfig()
				cfg.PrefillPolicy, cfg.DecodePolicy = policy, policy
				prefills, decodes := h.mixedDP(cfg)
				// The same request again and again goes to every worker that
				// may take it under these policies; the others keep a prompt,
				// or a key, on the worker that has it, or weigh loads, which
				// a worker's report may hold up for a poll's interval.
				spreads := policy == PolicyRandom || policy == PolicyRoundRobin
				const n = 60
				for _, tc := range []struct {
					name, path, body string
					headers          []string
					// decodeRanked: the rank applies to the decode too.
					decodeRanked bool
				}{
					{"disagg_prefill_dp_rank", "/generate", `{"text": "a", "disagg_prefill_dp_rank": 1}`, nil, false},
					{"routed_dp_rank", "/generate", `{"text": "a", "routed_dp_rank": 1}`, nil, true},
					{"data_parallel_rank", "/v1/completions", `{"prompt": "a", "data_parallel_rank": 1}`, nil, true},
					{"header", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "a"}]}`, []string{"X-Data-Parallel-Rank", "1"}, true},
				} {
					p0, d0 := generations(prefills), generations(decodes)
					for range n {
						if r := h.post(tc.path, tc.body, tc.headers...); r.status != fasthttp.StatusOK {
							t.Fatalf("%s: got %d %s", tc.name, r.status, r.body)
						}
					}
					p1, d1 := generations(prefills), generations(decodes)
					if p1[0] != p0[0] || spreads && (p1[1] == p0[1] || p1[2] == p0[2]) {
						t.Fatalf("%s: the prefills (dp 1, 2, 2) served %v → %v; want only, and both, dp-2 ones", tc.name, p0, p1)
					}
					if tc.decodeRanked && (d1[0] != d0[0] || d1[1]-d0[1] != n) {
						t.Fatalf("%s: the decodes (dp 1, 2) served %v → %v; want the dp-2 one alone", tc.name, d0, d1)
					}
				}
				// Rank 0 exists everywhere: every worker takes its share.
				p0, d0 := generations(prefills), generations(decodes)
				for range n {
					if r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 0, "routed_dp_rank": 0}`); r.status != fasthttp.StatusOK {
						t.Fatalf("rank 0: got %d %s", r.status, r.body)
					}
				}
				p1, d1 := generations(prefills), generations(decodes)
				if !spreads {
					return
				}
				for i := range p1 {
					if p1[i] == p0[i] {
						t.Fatalf("rank 0: the prefills served %v → %v; want every one", p0, p1)
					}
				}
				for i := range d1 {
					if d1[i] == d0[i] {
						t.Fatalf("rank 0: the decodes served %v → %v; want every one", d0, d1)
					}
				}
			})
		})
	}
}

// A rank that no worker has gets pdlb's 400, naming the largest dp_size.
func TestMixedDPSizesRefuseARankNoWorkerHas(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		prefills, decodes := h.mixedDP(defaultConfig())
		p0, d0 := generations(prefills), generations(decodes)
		for _, tc := range []struct{ body, want string }{
			{`{"text": "a", "disagg_prefill_dp_rank": 2}`, "disagg_prefill_dp_rank=2 out of range [0, 2)"},
			{`{"text": "a", "routed_dp_rank": 2}`, "routed_dp_rank=2 out of range [0, 2)"},
			{`{"text": "a", "disagg_prefill_dp_rank": 0, "routed_dp_rank": 5}`, "routed_dp_rank=5 out of range [0, 2)"},
		} {
			r := h.post("/generate", tc.body)
			msg := gjson.GetBytes(r.body, "error.message").String()
			if r.status != fasthttp.StatusBadRequest || !strings.Contains(msg, tc.want) {
				t.Fatalf("%s: got %d %s; want a 400 saying %q", tc.body, r.status, r.body, tc.want)
			}
		}
		if p1, d1 := generations(prefills), generations(decodes); !slices.Equal(p0, p1) || !slices.Equal(d0, d1) {
			t.Fatalf("refused requests reached the workers: prefills %v → %v, decodes %v → %v", p0, p1, d0, d1)
		}
	})
}

// With --prefill-dp-policy, a client's routed_dp_rank stays the decode's,
// and the prefill gets the policy's rank instead: any prefill with DP will
// do, but not one without, which would refuse the client's rank.
func TestMixedDPSizesWithADPPolicy(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		cfg := defaultConfig()
		cfg.PrefillDPPolicy = DPPolicyRoundRobin
		prefills, decodes := h.mixedDP(cfg)
		p0, d0 := generations(prefills), generations(decodes)
		const n = 40
		for range n {
			if r := h.post("/v1/completions", `{"prompt": "a", "routed_dp_rank": 1}`); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		}
		p1, d1 := generations(prefills), generations(decodes)
		if p1[0] != p0[0] || d1[0] != d0[0] || d1[1]-d0[1] != n {
			t.Fatalf("prefills (dp 1, 2, 2) served %v → %v, decodes (dp 1, 2) %v → %v; want the dp-2 ones alone", p0, p1, d0, d1)
		}
		for _, p := range prefills {
			if c := p.Stats().DPConflicts; c != 0 {
				t.Fatalf("%d follow_bootstrap_room conflicts", c)
			}
		}
	})
}

// A prefill that restarts with a smaller dp_size is known by its old one
// until the registry reads it again; pdlb picked ranks it no longer had, and
// the clients got the prefill's 400. A refused rank now
// makes pdlb read the prefill again and place the request anew.
func TestPrefillRestartedWithFewerRanks(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, _ := h.pair(fake.Config{DPSize: 4, Tokens: 2}, fake.Config{DPSize: 4, Tokens: 2})
		cfg := defaultConfig()
		cfg.PrefillDPPolicy = DPPolicyRoundRobin
		cfg.BootstrapRefresh = time.Hour // the registry reads the prefill once, unless asked
		srv := h.start(cfg)
		h.waitBootstrap()
		const body = `{"prompt": "a", "max_tokens": 2}`
		for range 4 {
			if r := h.post("/v1/completions", body); r.status != fasthttp.StatusOK {
				t.Fatalf("before the restart: got %d %s", r.status, r.body)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		p = h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, DPSize: 2, Tokens: 2, KVTimeout: 5 * time.Second})
		for i := range 8 {
			b := body
			if i%2 == 1 {
				b = `{"prompt": "a", "max_tokens": 2, "stream": true}`
			}
			r := h.post("/v1/completions", b)
			if r.status != fasthttp.StatusOK || strings.Contains(string(r.body), `"error"`) {
				t.Fatalf("request %d after the restart: got %d %s", i, r.status, r.body)
			}
		}
		if n := p.Stats().DPConflicts; n != 0 {
			t.Fatalf("%d follow_bootstrap_room conflicts", n)
		}
		if st := srv.registry.State(0); st.Info.DPSize != 2 {
			t.Fatalf("the registry says dp_size %d; want 2", st.Info.DPSize)
		}
		// The client's own rank is checked against the prefill as it is now.
		r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 3}`)
		if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusBadRequest ||
			!strings.Contains(msg, "disagg_prefill_dp_rank=3 out of range [0, 2)") {
			t.Fatalf("got %d %s; want pdlb's 400 for a rank the prefill no longer has", r.status, r.body)
		}
	})
}

// Without warm-ups, pdlb does not know a decode's dp_size until the decode
// refuses a client's routed_dp_rank: it then reads the decode's dp_size and
// tries a decode that has the rank, instead of passing the 400 on.
func TestDecodeRefusingARankIsLearned(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p := h.fake("prefill-0:30000", fake.Config{Role: fake.RolePrefill, DPSize: 4, Tokens: 2, KVTimeout: 5 * time.Second})
		var decodes []*fake.Server
		cfg := defaultConfig() // no warm-up
		cfg.Decode = nil
		cfg.DecodePolicy = PolicyRoundRobin
		for i, dp := range []int{1, 2} {
			addr := "decode-" + strconv.Itoa(i) + ":30010"
			decodes = append(decodes, h.fake(addr, fake.Config{Role: fake.RoleDecode, DPSize: dp, Tokens: 2, KVTimeout: 5 * time.Second}))
			cfg.Decode = append(cfg.Decode, "http://"+addr)
		}
		h.start(cfg)
		h.waitBootstrap()
		for range 6 {
			if r := h.post("/v1/completions", `{"prompt": "a", "routed_dp_rank": 1}`); r.status != fasthttp.StatusOK {
				t.Fatalf("got %d %s", r.status, r.body)
			}
		}
		if n := decodes[1].Stats().GenerateRequests; n != 6 {
			t.Fatalf("the dp-2 decode served %d of 6", n)
		}
		if n := p.Stats().DPConflicts; n != 0 {
			t.Fatalf("%d follow_bootstrap_room conflicts", n)
		}
		r := h.post("/v1/completions", `{"prompt": "a", "routed_dp_rank": 2}`)
		if msg := gjson.GetBytes(r.body, "error.message").String(); r.status != fasthttp.StatusBadRequest ||
			!strings.Contains(msg, "routed_dp_rank=2 out of range [0, 2): the largest dp_size among the decodes is 2") {
			t.Fatalf("got %d %s; want pdlb's 400 naming the decodes' largest dp_size", r.status, r.body)
		}
	})
}

// The requests a decode refuses at once for a DP rank share one read of its
// /server_info, as those a prefill refuses share one registry refresh.
func TestRefusedRanksShareOneRead(t *testing.T) {
	h := newHarness(t)
	var reads atomic.Int32
	release := make(chan struct{})
	h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString(`{}`) })
	h.backend("decode-0:30010", func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/server_info" {
			reads.Add(1)
			<-release
		}
		ctx.SetBodyString(`{"dp_size": 2}`)
	})
	srv := h.start(defaultConfig())
	d := srv.decodes.backends()[0]
	seen := d.dpReads.Load()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { srv.relearnDecode(d, seen, time.Now().Add(5*time.Second)) })
	}
	waitFor(t, "the first read", func() bool { return reads.Load() == 1 })
	close(release)
	wg.Wait()
	if n := reads.Load(); n != 1 || d.dpSize.Load() != 2 {
		t.Fatalf("got %d reads and dp_size %d; want 1 read, and 2", n, d.dpSize.Load())
	}
}

// A client's routed_dp_rank on a multi-item request (a prompt list, n > 1
// samples) reached the prefill with an aligned room alone; item i has the
// room room+i, which the prefill refused as a follow_bootstrap_room
// conflict. The rank now goes as disagg_prefill_dp_rank too.
func TestRoutedRankOnMultiItemRequests(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, _ := h.pair(fake.Config{DPSize: 4, Tokens: 2}, fake.Config{DPSize: 4, Tokens: 2})
		srv := h.start(warmConfig())
		h.waitBootstrap()
		// The hint needs a warm pair (a decode with the first-request bug would
		// fail it otherwise); these requests do not wait for one.
		pr := srv.warm.pair(srv.prefills.backends()[0], srv.decodes.backends()[0])
		waitFor(t, "the pair to be warm", func() bool { return srv.warm.isWarm(pr) })
		for _, req := range []struct {
			path, body string
			headers    []string
		}{
			{"/v1/completions", `{"prompt": ["a", "b"], "max_tokens": 2, "routed_dp_rank": 1}`, nil},
			{"/v1/chat/completions", `{"messages": [{"role": "user", "content": "a"}], "n": 3, "max_tokens": 2, "routed_dp_rank": 2}`, nil},
			{"/generate", `{"text": "a", "sampling_params": {"n": 3, "max_new_tokens": 2}, "routed_dp_rank": 3}`, nil},
			{"/generate", `{"text": ["a", "b"], "sampling_params": {"n": 2, "max_new_tokens": 2}, "routed_dp_rank": 1}`, nil},
			{"/generate", `{"text": ["a", "b"], "sampling_params": {"n": 2, "max_new_tokens": 2}, "routed_dp_rank": 0, "stream": true}`, nil},
			{"/v1/completions", `{"prompt": ["a", "b"], "max_tokens": 2}`, []string{"X-Data-Parallel-Rank", "1"}},
		} {
			if r := h.post(req.path, req.body, req.headers...); r.status != fasthttp.StatusOK {
				t.Fatalf("%s %s: got %d %s", req.path, req.body, r.status, r.body)
			}
		}
		if c := p.Stats().DPConflicts; c != 0 {
			t.Fatalf("%d follow_bootstrap_room conflicts", c)
		}
	})
}

// A decode restarted with more DP ranks was known by its old dp_size until
// a warm-up read it again, which only a request carrying
// disagg_prefill_dp_rank caused: clients naming the new ranks got pdlb's
// 400 indefinitely. pdlb now reads the decode again before refusing.
func TestDecodeRestartedWithMoreRanks(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		_, d := h.pair(fake.Config{DPSize: 4, Tokens: 2}, fake.Config{Tokens: 2})
		var ahead atomic.Int64 // how far the clock pdlb reads is ahead of time
		cfg := warmConfig()
		cfg.Now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
		srv := h.start(cfg)
		h.waitBootstrap()
		if r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 0}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		if n := srv.decodes.backends()[0].dpSize.Load(); n != 1 {
			t.Fatalf("pdlb knows the decode's dp_size as %d; want 1", n)
		}
		ahead.Add(int64(dpRereadInterval)) // since the warm-up read it
		reads := srv.decodes.backends()[0].dpReads.Load()
		for range 3 {
			if r := h.post("/generate", `{"text": "a", "routed_dp_rank": 3}`); r.status != fasthttp.StatusBadRequest {
				t.Fatalf("got %d %s; want a 400, no decode having rank 3", r.status, r.body)
			}
		}
		// Bad ranks make one read a dpRereadInterval, not one each.
		if n := srv.decodes.backends()[0].dpReads.Load() - reads; n != 1 {
			t.Fatalf("3 bad ranks made %d reads of the decode; want 1", n)
		}
		_ = d.Close()
		h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, DPSize: 4, Tokens: 2})
		ahead.Add(int64(dpRereadInterval)) // since the read the 400 caused
		if r := h.post("/generate", `{"text": "a", "routed_dp_rank": 3}`); r.status != fasthttp.StatusOK {
			t.Fatalf("after the decode came back with 4 ranks: got %d %s", r.status, r.body)
		}
	})
}

// A prefill that is down may come back with other ranks: its old dp_size is
// no reason to refuse a rank beyond it (the request waits for a prefill,
// or goes to the fallback, as for one whose dp_size was never known).
func TestDownPrefillRanksAreUnknown(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		h := newHarness(t)
		p, _ := h.pair(fake.Config{DPSize: 2, Tokens: 2}, fake.Config{DPSize: 4, Tokens: 2})
		h.fake("agg-0:30020", fake.Config{Role: fake.RoleAggregated, DPSize: 4})
		cfg := fallbackConfig()
		cfg.BootstrapRefresh = 20 * time.Millisecond
		cfg.HealthCheck = HealthCheckConfig{Interval: 20 * time.Millisecond, Timeout: time.Second, Rise: 1, Fall: 1}
		srv := h.start(cfg)
		h.waitBootstrap()
		if r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 3}`); r.status != fasthttp.StatusBadRequest {
			t.Fatalf("got %d %s; want a 400, the prefill having 2 ranks", r.status, r.body)
		}
		_ = p.Close()
		waitFor(t, "the prefill's ranks to be unknown", func() bool { return srv.prefills.backends()[0].dpSize.Load() == 0 })
		if r := h.post("/generate", `{"text": "a", "disagg_prefill_dp_rank": 3}`); r.status != fasthttp.StatusOK {
			t.Fatalf("with the prefill down: got %d %s; want the fallback's answer", r.status, r.body)
		}
	})
}
