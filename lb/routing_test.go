package lb

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"pdlb/bench/fake"
	"pdlb/health"
	"pdlb/lb/policy"
)

// prefillCluster starts n fake prefills, each keeping a prefix cache, and
// one decode, and pdlb in front of them with cfg and prefill policy name.
// served[i] counts the generations prefill i got.
func (h *harness) prefillCluster(n int, name string, cfg Config) (srv *Server, served func() []int) {
	h.t.Helper()
	var prefills []*fake.Server
	cfg.Prefill = nil
	for i := range n {
		addr := "prefill-" + strconv.Itoa(i) + ":30000"
		prefills = append(prefills, h.fake(addr, fake.Config{Role: fake.RolePrefill, CacheTokens: 1 << 20, CacheReport: true, KVTimeout: 5 * time.Second}))
		cfg.Prefill = append(cfg.Prefill, PrefillSpec{URL: "http://" + addr, BootstrapPort: 8998})
	}
	h.decode = h.fake("decode-0:30010", fake.Config{Role: fake.RoleDecode, CacheReport: true, KVTimeout: 5 * time.Second})
	cfg.PrefillPolicy = name
	srv = h.start(cfg)
	// Until then pdlb avoids a prefill it has not heard from, whatever
	// the policy says (pickPrefill).
	h.waitFirstReads()
	return srv, func() []int {
		counts := make([]int, n)
		for i, p := range prefills {
			counts[i] = int(p.Stats().GenerateRequests)
		}
		return counts
	}
}

// onlyOneGrew reports which of before's counts grew into after's by want,
// or -1 unless exactly one did and the others stayed.
func onlyOneGrew(before, after []int, want int) int {
	grew := -1
	for i := range before {
		switch after[i] - before[i] {
		case 0:
		case want:
			if grew >= 0 {
				return -1
			}
			grew = i
		default:
			return -1
		}
	}
	return grew
}

// cache_aware sends the prompts of one group, which share a long system
// prompt, to one prefill, which then has the prefix cached: every request
// of a group after its first reports cached tokens. On the chat route the
// whole conversation is the key.
func TestCacheAwareKeepsAGroupOnOnePrefill(t *testing.T) {
	for _, route := range []string{"/generate", "/v1/chat/completions"} {
		t.Run(strings.TrimPrefix(route, "/"), func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				_, served := h.prefillCluster(3, PolicyCacheAware, defaultConfig())
				system := func(g int) string { return strings.Repeat("group "+strconv.Itoa(g)+" system prompt words ", 40) }
				body := func(g, q int) string {
					if route == "/generate" {
						return `{"text": "` + system(g) + `question ` + strconv.Itoa(q) + `"}`
					}
					return `{"messages": [{"role": "system", "content": "` + system(g) + `"}, {"role": "user", "content": "question ` +
						strconv.Itoa(q) + `"}]}`
				}
				for g := range 2 {
					before := served()
					for q := range 5 {
						r := h.post(route, body(g, q))
						if r.status != fasthttp.StatusOK {
							t.Fatalf("group %d: got %d %s", g, r.status, r.body)
						}
						cached := gjson.GetBytes(r.body, "meta_info.cached_tokens").Int()
						if route != "/generate" {
							cached = gjson.GetBytes(r.body, "usage.prompt_tokens_details.cached_tokens").Int()
						}
						if q > 0 && cached == 0 {
							t.Fatalf("group %d, request %d: nothing cached; the group left its prefill: %s", g, q, r.body)
						}
					}
					if onlyOneGrew(before, served(), 5) < 0 {
						t.Fatalf("group %d went to prefills %v (were %v); want one prefill", g, served(), before)
					}
				}
			})
		})
	}
}

// prefix_hash sends the same prompt prefix to the same prefill; the key
// policies send the same X-SMG-Routing-Key to the same prefill.
func TestKeyedPoliciesKeepAKeyOnOnePrefill(t *testing.T) {
	for _, tc := range []struct {
		policy string
		header bool
	}{
		{PolicyPrefixHash, false},
		{PolicyConsistentHashing, true},
		{PolicyManual, true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				_, served := h.prefillCluster(3, tc.policy, defaultConfig())
				for key := range 4 {
					before := served()
					for q := range 4 {
						// A shared part longer than the 256 tokens (1 KiB)
						// prefix_hash hashes.
						prompt := strings.Repeat("session "+strconv.Itoa(key)+" ", 120) + "turn " + strconv.Itoa(q)
						var headers []string
						if tc.header {
							prompt = "turn " + strconv.Itoa(q) // nothing shared but the key
							headers = []string{"X-SMG-Routing-Key", "user-" + strconv.Itoa(key)}
						}
						if r := h.post("/generate", `{"text": "`+prompt+`"}`, headers...); r.status != fasthttp.StatusOK {
							t.Fatalf("got %d %s", r.status, r.body)
						}
					}
					if onlyOneGrew(before, served(), 4) < 0 {
						t.Fatalf("key %d went to prefills %v (were %v); want one prefill", key, served(), before)
					}
				}
			})
		})
	}
}

// A prefill that leaves (its health checks fail) takes no more of its
// keys, which go elsewhere; back, the ring and manual's keys go to one
// prefill again, and cache_aware's to prefills that hold the prompt.
func TestRoutedPoliciesSkipAWorkerThatLeft(t *testing.T) {
	for _, policy := range []string{PolicyCacheAware, PolicyPrefixHash, PolicyConsistentHashing, PolicyManual} {
		t.Run(policy, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				srv, served := h.prefillCluster(2, policy, defaultConfig())
				body := `{"text": "` + strings.Repeat("the same prompt ", 30) + `"}`
				key := []string{"X-SMG-Routing-Key", "one-user"}
				h.post("/generate", body, key...)
				first := served()
				owner := onlyOneGrew([]int{0, 0}, first, 1)
				if owner < 0 {
					t.Fatalf("one request went to %v", first)
				}
				srv.prefills.backends()[owner].health.Store(int32(health.Down))
				for range 3 {
					if r := h.post("/generate", body, key...); r.status != fasthttp.StatusOK {
						t.Fatalf("with prefill %d down: got %d %s", owner, r.status, r.body)
					}
				}
				if got := served(); got[owner] != first[owner] {
					t.Fatalf("prefill %d, down, still got requests: %v", owner, got)
				}
				srv.prefills.backends()[owner].health.Store(int32(health.Up))
				before := served()
				for range 3 {
					r := h.post("/generate", body, key...)
					if cached := gjson.GetBytes(r.body, "meta_info.cached_tokens").Int(); cached == 0 {
						t.Fatalf("after the prefill came back, a request found nothing cached: %s", r.body)
					}
				}
				if policy != PolicyCacheAware && onlyOneGrew(before, served(), 3) < 0 {
					t.Fatalf("after the prefill came back, the key went to %v (were %v); want one prefill", served(), before)
				}
			})
		})
	}
}

// loadReporter is a fake decode for the load-weighing policies: it answers
// every generation at once, and /v1/loads with its running requests.
type loadReporter struct {
	running int
	mu      sync.Mutex
	served  int
}

func (l *loadReporter) handle(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	if string(ctx.Path()) == "/v1/loads" {
		ctx.SetBodyString(`{"timestamp": "t", "version": "v", "loads": [{"dp_rank": 0, "num_running_reqs": ` +
			strconv.Itoa(l.running) + `, "num_waiting_reqs": 0}]}`)
		return
	}
	l.mu.Lock()
	l.served++
	l.mu.Unlock()
	ctx.SetBodyString(`{"text": "ok", "meta_info": {}}`)
}

// power_of_two and least_load weigh the loads the workers report: a busy
// decode (50 running, of another router's) gets nothing while an idle one
// is there.
func TestLoadPoliciesFollowReportedLoads(t *testing.T) {
	for _, policy := range []string{PolicyPowerOfTwo, PolicyLeastLoad} {
		t.Run(policy, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				h.backend("prefill-0:30000", func(ctx *fasthttp.RequestCtx) {
					ctx.SetContentType("application/json")
					ctx.SetBodyString(`{"text": "", "meta_info": {}}`)
				})
				busy, idle := &loadReporter{running: 50}, &loadReporter{}
				h.backend("decode-0:30010", busy.handle)
				h.backend("decode-1:30010", idle.handle)
				cfg := defaultConfig()
				cfg.Decode = []string{"http://decode-0:30010", "http://decode-1:30010"}
				cfg.DecodePolicy = policy
				srv := h.start(cfg)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				srv.loads.PollOnce(ctx)
				if l, ok := srv.loads.Get("decode-0:30010").Load(); !ok || l != 50 {
					t.Fatalf("decode-0's reported load is %d (known %v); want 50", l, ok)
				}
				for range 10 {
					if r := h.post("/generate", `{"text": "a"}`); r.status != fasthttp.StatusOK {
						t.Fatalf("got %d %s", r.status, r.body)
					}
				}
				if busy.served != 0 || idle.served != 10 {
					t.Fatalf("the busy decode got %d requests, the idle one %d; want 0 and 10", busy.served, idle.served)
				}
			})
		})
	}
}

// Every routed policy runs its background work past its period: cache_aware
// evicts its trees down to --max-tree-size, and prefix_hash and manual run
// theirs without fault.
func TestRoutedPoliciesRunTheirBackgroundWork(t *testing.T) {
	for _, name := range []string{PolicyCacheAware, PolicyPrefixHash, PolicyManual, PolicyConsistentHashing} {
		t.Run(name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				h := newHarness(t)
				cfg := defaultConfig()
				cfg.CacheAware = policy.CacheAwareConfig{CacheThreshold: 0.3, BalanceAbsThreshold: 64, BalanceRelThreshold: 1.5,
					MaxTreeSize: 10, EvictionInterval: time.Second}
				srv, _ := h.prefillCluster(2, name, cfg)
				for q := range 4 {
					if r := h.post("/generate", `{"text": "`+strings.Repeat("a long prompt ", 20)+strconv.Itoa(q)+`"}`); r.status != fasthttp.StatusOK {
						t.Fatalf("got %d %s", r.status, r.body)
					}
				}
				time.Sleep(2 * time.Minute) // on the bubble's clock: past every period
				settled(t, "the background work", func() bool { return true })
				if c := srv.prefills.cache; c != nil {
					for i := range srv.prefills.backends() {
						if size := c.Size(i, policy.UnitByte); size > 10 {
							t.Fatalf("prefill %d's tree holds %d bytes after the eviction interval; want at most 10", i, size)
						}
					}
				}
			})
		})
	}
}

// What cache_aware believes a prefill holds is forgotten when its cache is
// known emptied: a sign of a restart (which a return from down is), and
// /flush_cache.
func TestCacheAwareForgetsAnEmptiedCache(t *testing.T) {
	h := newHarness(t)
	cfg := defaultConfig()
	cfg.AdminAPIKey = "admin-key"
	srv, served := h.prefillCluster(2, PolicyCacheAware, cfg)
	tree := srv.prefills.cache
	send := func() int {
		t.Helper()
		before := served()
		if r := h.post("/generate", `{"text": "`+strings.Repeat("kept prompt ", 30)+`"}`); r.status != fasthttp.StatusOK {
			t.Fatalf("got %d %s", r.status, r.body)
		}
		return onlyOneGrew(before, served(), 1)
	}
	owner := send()
	if owner < 0 || tree.Size(owner, policy.UnitByte) == 0 {
		t.Fatalf("the prompt went to prefill %d, whose tree holds %d bytes", owner, tree.Size(max(owner, 0), policy.UnitByte))
	}
	suspectRestart(srv.prefills.backends()[owner])
	if n := tree.Size(owner, policy.UnitByte); n != 0 {
		t.Fatalf("after a sign of a restart, prefill %d's tree still holds %d bytes", owner, n)
	}
	send()
	// SGLang, and the fakes, refuse a flush while a request runs: the
	// prefill's leg may end after the client's answer.
	waitFor(t, "the prefills to be idle", func() bool {
		for _, b := range srv.prefills.backends() {
			if b.inflight.Load() != 0 {
				return false
			}
		}
		return true
	})
	if r := h.post("/flush_cache", "", "Authorization", "Bearer admin-key"); r.status != fasthttp.StatusOK {
		t.Fatalf("/flush_cache got %d %s", r.status, r.body)
	}
	for i := range srv.prefills.backends() {
		if n := tree.Size(i, policy.UnitByte); n != 0 {
			t.Fatalf("after /flush_cache, prefill %d's tree still holds %d bytes", i, n)
		}
	}
}
