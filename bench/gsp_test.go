package bench

import (
	"bufio"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fastjson"
)

// smallGSP is a SharedPrefix small enough for tests.
func smallGSP() SharedPrefix {
	return SharedPrefix{Groups: 3, PromptsPerGroup: 4, SystemPromptLen: 10, QuestionLen: 5, OutputLen: 7}
}

// groupOf returns each request's group, in sending order.
func groupOf(sp *sharedPrefix) []int {
	var gs []int
	for _, r := range sp.reqs {
		gs = append(gs, r.group)
	}
	return gs
}

func TestSharedPrefixShape(t *testing.T) {
	for _, tc := range []struct {
		name      string
		s         SharedPrefix
		seed      uint64
		exact     bool // every length as asked
		wantOrder bool // group after group
	}{
		{"shuffled", smallGSP(), 1, true, false},
		{"ordered", func() SharedPrefix { s := smallGSP(); s.Ordered = true; return s }(), 1, true, true},
		{"range", func() SharedPrefix { s := smallGSP(); s.RangeRatio = 0.5; s.PromptsPerGroup = 40; return s }(), 7, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.s.withDefaults()
			sp := newSharedPrefix(s, tc.seed)
			if got, want := len(sp.reqs), s.Groups*s.PromptsPerGroup; got != want || s.Requests() != want {
				t.Fatalf("got %d requests (Requests %d); want %d", got, s.Requests(), want)
			}
			perGroup := map[int]int{}
			lengths := map[int]bool{}
			for _, r := range sp.reqs {
				perGroup[r.group]++
				sys, q := len(strings.Fields(string(sp.system[r.group]))), len(strings.Fields(string(r.question)))
				lengths[sys*1e6+q*1e3+r.maxTokens] = true
				lo := func(full int) int { return max(int(float64(full)*s.RangeRatio), 1) }
				if sys < lo(s.SystemPromptLen) || sys > s.SystemPromptLen || q < lo(s.QuestionLen) || q > s.QuestionLen ||
					r.maxTokens < lo(s.OutputLen) || r.maxTokens > s.OutputLen {
					t.Fatalf("got lengths %d, %d, %d; want within %v", sys, q, r.maxTokens, s)
				}
			}
			for g := range s.Groups {
				if perGroup[g] != s.PromptsPerGroup {
					t.Fatalf("got %d requests in group %d; want %d", perGroup[g], g, s.PromptsPerGroup)
				}
			}
			if exact := len(lengths) == 1; exact != tc.exact {
				t.Errorf("got %d distinct lengths; want exact %v", len(lengths), tc.exact)
			}
			gs := groupOf(sp)
			if sorted := slices.IsSorted(gs); sorted != tc.wantOrder {
				t.Errorf("got order %v; want group after group %v", gs, tc.wantOrder)
			}
			if again := groupOf(newSharedPrefix(s, tc.seed)); !slices.Equal(again, gs) {
				t.Errorf("the same seed gave order %v, then %v", gs, again)
			}
			if other := groupOf(newSharedPrefix(s, tc.seed+1)); !tc.wantOrder && slices.Equal(other, gs) {
				t.Errorf("seeds %d and %d gave the same order %v", tc.seed, tc.seed+1, gs)
			}
		})
	}
}

func TestSharedPrefixBest(t *testing.T) {
	s := smallGSP().withDefaults()
	sp := newSharedPrefix(s, 3)
	// 3 groups × 3 later prompts × 10 words, over 12 prompts of 15.
	if want := 90.0 / 180; sp.best != want {
		t.Errorf("got best %v; want %v", sp.best, want)
	}
	d := SharedPrefix{}.withDefaults()
	if got := newSharedPrefix(d, 1).best; fmt.Sprintf("%.3f", got) != "0.882" {
		t.Errorf("got best %v with the defaults; want 15 × 2048 / (16 × 2176) = 0.882", got)
	}
}

// A hot share gives the first group that share of the requests, the
// others the rest evenly; the best hit rate follows the sizes.
func TestSharedPrefixHotShare(t *testing.T) {
	s := SharedPrefix{Groups: 4, PromptsPerGroup: 10, SystemPromptLen: 10, QuestionLen: 5, OutputLen: 1, HotShare: 0.5}.withDefaults()
	sp := newSharedPrefix(s, 1)
	perGroup := map[int]int{}
	for _, r := range sp.reqs {
		perGroup[r.group]++
	}
	if want := map[int]int{0: 20, 1: 7, 2: 7, 3: 6}; !maps.Equal(perGroup, want) {
		t.Fatalf("got groups %v; want %v", perGroup, want)
	}
	// (19 + 6 + 6 + 5) × 10 cached words over 40 prompts of 15.
	if want := 360.0 / 600; math.Abs(sp.best-want) > 1e-12 {
		t.Errorf("got best %v; want %v", sp.best, want)
	}
	if _, err := (&SharedPrefixFlags{NumGroups: 1, PromptsPerGroup: 1, SystemPromptLen: 1, QuestionLen: 1, OutputLen: 1, RangeRatio: 1, HotShare: 1}).sharedPrefix(); err == nil {
		t.Error("--gsp-hot-share 1 was taken; want an error")
	}
	for _, share := range []float64{1, -0.1, math.NaN()} {
		bad := s
		bad.HotShare = share
		if err := bad.check(); err == nil {
			t.Errorf("a hot share of %v passed the check", share)
		}
	}
}

func TestSharedPrefixRoutingKeys(t *testing.T) {
	s := smallGSP()
	for _, send := range []bool{false, true} {
		s.SendRoutingKey = send
		cfg := Config{URL: "http://x", SharedPrefix: &s}.withDefaults()
		wl := newWorkload(&cfg)
		keyOf := map[int]string{}
		keys := map[string]bool{}
		for seq := uint64(1); seq <= uint64(s.Requests()); seq++ {
			key := wl.routingKey(seq)
			if (key != nil) != send {
				t.Fatalf("send %v: got key %q", send, key)
			}
			g := wl.gsp.request(seq).group
			if k, ok := keyOf[g]; ok && k != string(key) {
				t.Fatalf("group %d got keys %q and %q", g, k, key)
			}
			keyOf[g] = string(key)
			keys[string(key)] = true
		}
		if want := map[bool]int{false: 1, true: s.Groups}[send]; len(keys) != want {
			t.Errorf("send %v: got %d distinct keys; want %d", send, len(keys), want)
		}
	}
}

// prefixCache is a fake worker whose prefix cache holds system prompts:
// a prompt finds its system prompt's words cached when an earlier one had
// it. Each word is a token. It records what it answered.
type prefixCache struct {
	route  string
	stream bool
	// forgets makes a cache that keeps nothing: every prompt misses.
	forgets        bool
	mu             sync.Mutex
	seen           map[string]bool
	keys           map[string]string // system prompt → routing key
	bodies         []string
	cached, prompt int
}

func (pc *prefixCache) handle(ctx *fasthttp.RequestCtx) {
	v, err := fastjson.ParseBytes(ctx.PostBody())
	if err != nil {
		ctx.Error(err.Error(), 400)
		return
	}
	var system, question string
	switch pc.route {
	case RouteGenerate:
		system, question, _ = strings.Cut(string(v.GetStringBytes("text")), "\n\n")
	case RouteCompletions:
		system, question, _ = strings.Cut(string(v.GetStringBytes("prompt")), "\n\n")
	default:
		msgs := v.GetArray("messages")
		if len(msgs) != 2 || string(msgs[0].GetStringBytes("role")) != "system" || string(msgs[1].GetStringBytes("role")) != "user" {
			ctx.Error("want a system and a user message", 400)
			return
		}
		system, question = string(msgs[0].GetStringBytes("content")), string(msgs[1].GetStringBytes("content"))
	}
	pc.mu.Lock()
	prompt := len(strings.Fields(system)) + len(strings.Fields(question))
	cached := 0
	if pc.seen[system] {
		cached = len(strings.Fields(system))
	}
	pc.seen[system] = !pc.forgets
	key := string(ctx.Request.Header.Peek(RoutingKeyHeader))
	if k, ok := pc.keys[system]; ok && k != key {
		cached = -1 // a group that changed keys: no answer can count
	}
	pc.keys[system] = key
	pc.bodies = append(pc.bodies, string(ctx.PostBody()))
	pc.cached += cached
	pc.prompt += prompt
	pc.mu.Unlock()
	pc.answer(ctx, cached, prompt)
}

// answer writes the answer, with the counts where SGLang puts them: on a
// /generate stream every event has them (the first here says 0 cached, to
// check that the last one counts), on an OpenAI stream the usage chunk.
func (pc *prefixCache) answer(ctx *fasthttp.RequestCtx, cached, prompt int) {
	meta := fmt.Sprintf(`"meta_info":{"completion_tokens":%%d,"prompt_tokens":%d,"cached_tokens":%%d}`, prompt)
	usage := fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}`, prompt, cached)
	var events []string
	switch pc.route {
	case RouteGenerate:
		events = []string{`{"text":"a",` + fmt.Sprintf(meta, 1, 0) + `}`, `{"text":"ab",` + fmt.Sprintf(meta, 2, cached) + `}`}
	default:
		events = []string{`{"choices":[{"text":"a","delta":{"content":"a"}}]}`, `{"choices":[],` + usage + `}`}
	}
	if !pc.stream {
		ctx.SetContentType("application/json")
		if pc.route == RouteGenerate {
			ctx.SetBodyString(events[1])
		} else {
			ctx.SetBodyString(`{"choices":[{"text":"ab","message":{"content":"ab"}}],` + usage + `}`)
		}
		return
	}
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		for _, ev := range events {
			fmt.Fprintf(w, "data: %s\n\n", ev)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
}

// TestSharedPrefixRun sends the workload on each route, streamed or not, to
// a worker that caches system prompts: every request must be sent once,
// with the route's body, and the hit rate is then the best possible.
func TestSharedPrefixRun(t *testing.T) {
	for _, route := range routes {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream %v", route, stream), func(t *testing.T) {
				t.Parallel()
				pc := &prefixCache{route: route, stream: stream, seen: map[string]bool{}, keys: map[string]string{}}
				cfg := serve(t, pc.handle)
				s := smallGSP()
				s.SendRoutingKey = true
				cfg.Route, cfg.Stream, cfg.SharedPrefix, cfg.Concurrency = route, stream, &s, 2
				rep, err := Run(t.Context(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				if rep.OK != s.Requests() || rep.Requests != s.Requests() {
					t.Fatalf("got %d requests, %d ok (errors %v %v); want %d", rep.Requests, rep.OK, rep.Errors, rep.ErrorMessages, s.Requests())
				}
				checkSharedPrefixBodies(t, cfg, pc.bodies)
				if rep.CacheReports != s.Requests() || rep.CachedTokens != int64(pc.cached) || rep.PromptTokens != int64(pc.prompt) {
					t.Errorf("got %d reports, %d of %d tokens cached; want %d, %d of %d",
						rep.CacheReports, rep.CachedTokens, rep.PromptTokens, s.Requests(), pc.cached, pc.prompt)
				}
				if rep.CacheHitRate != rep.BestCacheHitRate || rep.BestCacheHitRate != 0.5 {
					t.Errorf("got hit rate %v, best %v; want both 0.5", rep.CacheHitRate, rep.BestCacheHitRate)
				}
			})
		}
	}
}

// checkSharedPrefixBodies checks the bodies a SharedPrefix run sent (cfg
// before its defaults): each request of the workload once, as the route
// wants it.
func checkSharedPrefixBodies(t *testing.T, cfg Config, bodies []string) {
	t.Helper()
	cfg = cfg.withDefaults()
	wl := newWorkload(&cfg)
	var want []string
	for seq := uint64(1); seq <= uint64(len(wl.gsp.reqs)); seq++ {
		want = append(want, string(wl.appendBody(nil, seq, nil)))
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(bodies))
	if !slices.Equal(got, want) {
		t.Fatalf("got bodies\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	v, err := fastjson.Parse(bodies[0])
	if err != nil {
		t.Fatal(err)
	}
	r := wl.gsp.reqs[0]
	for _, r2 := range wl.gsp.reqs {
		if strings.Contains(bodies[0], string(r2.question)) {
			r = r2
		}
	}
	system, question := string(wl.gsp.system[r.group]), string(r.question)
	var gotPrompt string
	var gotMax int
	switch cfg.Route {
	case RouteGenerate:
		gotPrompt, gotMax = string(v.GetStringBytes("text")), v.GetInt("sampling_params", "max_new_tokens")
		if !v.GetBool("sampling_params", "ignore_eos") {
			t.Errorf("got no ignore_eos in %s", bodies[0])
		}
	case RouteCompletions:
		gotPrompt, gotMax = string(v.GetStringBytes("prompt")), v.GetInt("max_tokens")
	default:
		msgs := v.GetArray("messages")
		gotPrompt = string(msgs[0].GetStringBytes("content")) + "\n\n" + string(msgs[1].GetStringBytes("content"))
		gotMax = v.GetInt("max_tokens")
	}
	if gotPrompt != system+"\n\n"+question || gotMax != r.maxTokens {
		t.Errorf("got prompt %q, max tokens %d; want %q, %d", gotPrompt, gotMax, system+"\n\n"+question, r.maxTokens)
	}
	if v.GetBool("stream") != cfg.Stream {
		t.Errorf("got stream %v; want %v", v.GetBool("stream"), cfg.Stream)
	}
}

func TestSharedPrefixReportText(t *testing.T) {
	s := smallGSP().withDefaults()
	for _, tc := range []struct {
		name string
		r    Report
		want []string
	}{
		{"hits", Report{SharedPrefix: &s, Seed: 5, CacheReports: 12, CachedTokens: 90, PromptTokens: 180, CacheHitRate: 0.5, BestCacheHitRate: 0.5}, []string{
			"workload     generated-shared-prefix: 3 groups × 4 prompts of a 10-word system prompt and a 5-word question, 7 new tokens, shuffled (seed 5)\n",
			"cache hits   0.500 of prompt tokens cached (90 of 180, in 12 answers); best possible 0.500\n",
		}},
		{"not reported", Report{SharedPrefix: &s, BestCacheHitRate: 0.5}, []string{
			"cache hits   not reported by the answers (SGLang's OpenAI routes report them with --enable-cache-report); best possible 0.500\n",
		}},
		{"other workload", Report{MaxNewTokens: Fixed(16), PromptWords: Fixed(32), CacheReports: 1, CachedTokens: 1, PromptTokens: 4, CacheHitRate: 0.25}, []string{
			"cache hits   0.250 of prompt tokens cached (1 of 4, in 1 answer)\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := tc.r.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(b.String(), want) {
					t.Errorf("got\n%s\nwant the line %q", b.String(), want)
				}
			}
		})
	}
	var b strings.Builder
	if err := (&Report{MaxNewTokens: Fixed(16)}).WriteText(&b); err != nil || strings.Contains(b.String(), "cache hits") {
		t.Errorf("got\n%s\nwant no cache line without reports", b.String())
	}
}

// TestSharedPrefixCompare sends the workload to two targets in turns: each
// gets every request once, and the table compares their hit rates.
func TestSharedPrefixCompare(t *testing.T) {
	hot := &prefixCache{route: RouteGenerate, seen: map[string]bool{}, keys: map[string]string{}}
	// A cache that keeps nothing; forgetting after each answer instead
	// let a second request in flight find the first one's prompt.
	cold := &prefixCache{route: RouteGenerate, forgets: true, seen: map[string]bool{}, keys: map[string]string{}}
	targets, cfg := serveTargets(t, []string{"hot", "cold"}, hot.handle, cold.handle)
	s := smallGSP()
	cfg.SharedPrefix, cfg.Concurrency, cfg.Round = &s, 2, minRound
	c, err := Compare(t.Context(), cfg, targets)
	if err != nil {
		t.Fatal(err)
	}
	for i, pc := range []*prefixCache{hot, cold} {
		if r := c.Reports[i]; r.OK != s.Requests() || len(pc.bodies) != s.Requests() {
			t.Fatalf("%s: got %d ok of %d sent; want %d", r.Name, r.OK, len(pc.bodies), s.Requests())
		}
	}
	var b strings.Builder
	if err := c.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	checkRow(t, b.String(), "cache hit rate", "0.500", "0.000", "0.000")
	if want := "best hits    0.500, the best hit rate any router could reach on this workload\n"; !strings.Contains(b.String(), want) {
		t.Errorf("got\n%s\nwant the line %q", b.String(), want)
	}
}

func TestSharedPrefixFlags(t *testing.T) {
	c, err := parse(t, "http://x", "--workload", "generated-shared-prefix")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.config()
	if err != nil {
		t.Fatal(err)
	}
	want := SharedPrefix{Groups: 64, PromptsPerGroup: 16, SystemPromptLen: 2048, QuestionLen: 128, OutputLen: 256, RangeRatio: 1}
	if cfg.SharedPrefix == nil || *cfg.SharedPrefix != want {
		t.Fatalf("got %+v; want bench_serving's defaults %+v", cfg.SharedPrefix, want)
	}
	if c, _ := parse(t, "http://x"); c.Workload != "unique-prefix" {
		t.Errorf("got workload %q by default; want unique-prefix", c.Workload)
	}
	c, _ = parse(t, "http://x", "--workload", "generated-shared-prefix", "--gsp-num-groups", "2", "--gsp-prompts-per-group", "3",
		"--gsp-system-prompt-len", "4", "--gsp-question-len", "5", "--gsp-output-len", "6", "--gsp-range-ratio", "0", "--gsp-ordered", "--gsp-send-routing-key")
	cfg, err = c.config()
	if err != nil {
		t.Fatal(err)
	}
	want = SharedPrefix{Groups: 2, PromptsPerGroup: 3, SystemPromptLen: 4, QuestionLen: 5, OutputLen: 6, RangeRatio: math.SmallestNonzeroFloat64, Ordered: true, SendRoutingKey: true}
	if *cfg.SharedPrefix != want {
		t.Errorf("got %+v; want %+v", *cfg.SharedPrefix, want)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gsp-num-groups", "0"}, "--gsp-num-groups 0: want at least 1"},
		{[]string{"--gsp-output-len=-1"}, "--gsp-output-len -1: want at least 1"},
		{[]string{"--gsp-range-ratio", "1.5"}, "--gsp-range-ratio 1.5: want 0 to 1"},
		{[]string{"-n", "5"}, "the generated-shared-prefix workload sends its 1024 requests once each: give no request count"},
		{[]string{"--warmup", "1s"}, "a warm-up would send some of the generated-shared-prefix workload's prompts twice: give none"},
		{[]string{"--gsp-num-groups", "2000000"}, "generated-shared-prefix workload: groups 2000000: want 1 to 1048576"},
	} {
		c, err := parse(t, append([]string{"http://x", "--workload", "generated-shared-prefix"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		err = c.run(t.Context(), &out, &out)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: got %v; want %q", tc.args, err, tc.want)
		}
	}
}

// On the OpenAI routes SGLang leaves prompt_tokens_details null when
// nothing was cached: such an answer counts as 0 cached, unless no answer
// had them at all (no --enable-cache-report), which is no report.
func TestCacheUseWithoutDetails(t *testing.T) {
	wl := &workload{route: RouteChatCompletions}
	answer := func(usage string) cacheUse { return wl.cacheUse(fastjson.MustParse(`{"usage":` + usage + `}`)) }
	var withReport, without cacheTally
	withReport.add(answer(`{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":90}}`))
	withReport.add(answer(`{"prompt_tokens":100,"prompt_tokens_details":null}`))
	without.add(answer(`{"prompt_tokens":100}`))
	without.add(answer(`{"prompt_tokens":100,"prompt_tokens_details":null}`))
	var r Report
	r.setCache(withReport)
	if r.CacheReports != 2 || r.CachedTokens != 90 || r.PromptTokens != 200 {
		t.Errorf("with a report: got %d reports, %d of %d cached; want 2, 90 of 200", r.CacheReports, r.CachedTokens, r.PromptTokens)
	}
	r.setCache(without)
	if r.CacheReports != 0 || r.CacheHitRate != 0 {
		t.Errorf("without any details: got %d reports, rate %v; want none", r.CacheReports, r.CacheHitRate)
	}
}
