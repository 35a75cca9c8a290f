package bench

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestWorkloadBodies(t *testing.T) {
	f := func(cfg Config) {
		t.Helper()
		cfg.URL = "http://x"
		cfg = cfg.withDefaults()
		w := newWorkload(&cfg)
		a, b := string(w.appendBody(nil, 1, nil)), string(w.appendBody(nil, 2, nil))
		for _, body := range []string{a, b} {
			if err := checkBody(cfg, body); err != nil {
				t.Fatalf("route %s stream %v: %v", cfg.Route, cfg.Stream, err)
			}
		}
		if a == b {
			t.Fatalf("got the same body for two requests: %s", a)
		}
	}
	for _, route := range []string{RouteGenerate, RouteCompletions, RouteChatCompletions} {
		f(Config{Route: route})
		f(Config{Route: route, Stream: true, MaxNewTokens: Fixed(100), PromptWords: Fixed(1), Model: `odd "model" \ name`})
		f(Config{Route: route, Stream: true, PromptWords: Fixed(500), Seed: 3})
		f(Config{Route: route, PromptWords: Fixed(2*promptPool + 7)}) // repeats the pool
	}
}

func TestWorkloadPrompt(t *testing.T) {
	prompt := func(seed uint64, seq uint64) string {
		t.Helper()
		cfg := Config{URL: "http://x", PromptWords: Fixed(8), Seed: seed}.withDefaults()
		v, err := fastjson.ParseBytes(newWorkload(&cfg).appendBody(nil, seq, nil))
		if err != nil {
			t.Fatal(err)
		}
		return string(v.GetStringBytes("text"))
	}
	p := prompt(1, 42)
	if !strings.HasPrefix(p, "42 ") {
		t.Fatalf("got prompt %q; want it to start with the request number", p)
	}
	if again := prompt(1, 42); again != p {
		t.Fatalf("got %q then %q with the same seed; want the same prompt", p, again)
	}
	if other := prompt(2, 42); other == p {
		t.Fatalf("got %q with seeds 1 and 2; want different prompts", p)
	}
	if next := prompt(1, 43); strings.TrimPrefix(next, "43") != strings.TrimPrefix(p, "42") {
		t.Fatalf("got %q and %q; want prompts differing only in their number", p, next)
	}
}

func TestWorkloadTokens(t *testing.T) {
	f := func(route, answer string, want int) {
		t.Helper()
		w := &workload{route: route}
		if got := w.completionTokens(fastjson.MustParse(answer)); got != want {
			t.Fatalf("%s answer %s: got %d tokens; want %d", route, answer, got, want)
		}
	}
	f(RouteGenerate, `{"text":"x","output_ids":[1,2,3],"meta_info":{"completion_tokens":5}}`, 5)
	f(RouteGenerate, `{"text":"x","output_ids":[1,2,3]}`, 3)
	f(RouteGenerate, `{"text":"x"}`, 0)
	f(RouteCompletions, `{"choices":[{"text":"x"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`, 4)
	f(RouteChatCompletions, `{"choices":[{"message":{"content":"x"}}]}`, 0)
}

func TestWorkloadChunk(t *testing.T) {
	f := func(route, event string, wantText bool, wantTokens int) {
		t.Helper()
		w := &workload{route: route, stream: true}
		text, tokens := w.chunk(fastjson.MustParse(event))
		if text != wantText || tokens != wantTokens {
			t.Fatalf("%s event %s: got text %v, tokens %d; want %v, %d", route, event, text, tokens, wantText, wantTokens)
		}
	}
	f(RouteGenerate, `{"text":" a b","meta_info":{"completion_tokens":2}}`, true, 2)
	f(RouteGenerate, `{"text":" a"}`, true, -1)
	f(RouteCompletions, `{"choices":[{"text":" a"}]}`, true, -1)
	f(RouteCompletions, `{"choices":[{"text":""}]}`, false, -1)
	f(RouteCompletions, `{"choices":[],"usage":{"completion_tokens":16}}`, false, 16)
	f(RouteChatCompletions, `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false, -1)
	f(RouteChatCompletions, `{"choices":[{"delta":{"content":" a"}}],"usage":null}`, true, -1)
	f(RouteChatCompletions, `{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, true, -1)
}

// body returns the body of request seq as the workers build it.
func body(t *testing.T, wl *workload, seq uint64) *fastjson.Value {
	t.Helper()
	var pcg rand.PCG
	rng := rand.New(&pcg)
	if wl.random() {
		wl.seedFor(&pcg, seq)
	}
	b := wl.appendBody(nil, seq, rng)
	v, err := fastjson.ParseBytes(b)
	if err != nil {
		t.Fatalf("got body %s: %v", b, err)
	}
	return v
}

// TestWorkloadDrawn checks drawn sizes: within the law's bounds, varied,
// and the same for the same seed and request number whatever was drawn
// before.
func TestWorkloadDrawn(t *testing.T) {
	cfg := Config{
		URL:          "http://x",
		PromptWords:  Dist{Law: LawUniform, A: 2, B: 2000}, // beyond the pool of words
		MaxNewTokens: Dist{Law: LawNormal, A: 50, B: 10},
		Seed:         7,
	}.withDefaults()
	wl := newWorkload(&cfg)
	words, tokens := map[int]bool{}, map[int]bool{}
	for seq := uint64(1); seq <= 50; seq++ {
		v := body(t, wl, seq)
		if err := checkBody(cfg, v.String()); err != nil {
			t.Fatal(err)
		}
		words[len(strings.Fields(string(v.GetStringBytes("text"))))] = true
		tokens[v.GetInt("sampling_params", "max_new_tokens")] = true
	}
	if len(words) < 40 || len(tokens) < 10 {
		t.Fatalf("got %d prompt lengths and %d output lengths in 50 requests; want them to vary", len(words), len(tokens))
	}
	again := newWorkload(&cfg)
	for _, seq := range []uint64{42, 3, 42} {
		if a, b := body(t, wl, seq).String(), body(t, again, seq).String(); a != b {
			t.Fatalf("request %d: got %s then %s with one seed; want the same body", seq, a, b)
		}
	}
	cfg.Seed = 8
	if a, b := body(t, wl, 42).String(), body(t, newWorkload(&cfg), 42).String(); a == b {
		t.Fatalf("got the same body %s with seeds 7 and 8; want different sizes", a)
	}
}

// TestWorkloadPromptFile checks that file prompts are sent round robin,
// verbatim, in each route's shape, with their own output length if any.
func TestWorkloadPromptFile(t *testing.T) {
	prompts := []Prompt{
		{Text: `say "hi"`, MaxNewTokens: 3},
		{Text: "a\nb", Messages: []byte(`[{"role":"system","content":"a"},{"role":"user","content":"b"}]`)},
	}
	f := func(route string, seq uint64, wantPrompt string, wantTokens int) {
		t.Helper()
		cfg := Config{URL: "http://x", Route: route, Prompts: prompts, MaxNewTokens: Fixed(9)}.withDefaults()
		v := body(t, newWorkload(&cfg), seq)
		var prompt string
		tokens := v.GetInt("max_tokens")
		switch route {
		case RouteGenerate:
			prompt, tokens = string(v.GetStringBytes("text")), v.GetInt("sampling_params", "max_new_tokens")
		case RouteCompletions:
			prompt = string(v.GetStringBytes("prompt"))
		default:
			prompt = v.Get("messages").String()
		}
		if prompt != wantPrompt || tokens != wantTokens {
			t.Fatalf("%s request %d: got prompt %s, %d tokens; want %s, %d", route, seq, prompt, tokens, wantPrompt, wantTokens)
		}
	}
	f(RouteGenerate, 1, `say "hi"`, 3)
	f(RouteGenerate, 2, "a\nb", 9)
	f(RouteGenerate, 3, `say "hi"`, 3)
	f(RouteCompletions, 4, "a\nb", 9)
	f(RouteChatCompletions, 1, `[{"role":"user","content":"say \"hi\""}]`, 3)
	f(RouteChatCompletions, 2, `[{"role":"system","content":"a"},{"role":"user","content":"b"}]`, 9)
}

func TestWorkloadSentAt(t *testing.T) {
	f := func(route, event string, want int64) {
		t.Helper()
		w := &workload{route: route, stream: true}
		if got := w.sentAt(fastjson.MustParse(event)); got != want {
			t.Fatalf("%s event %s: got %d; want %d", route, event, got, want)
		}
	}
	f(RouteGenerate, `{"text":" a","meta_info":{"completion_tokens":1,"sent_unix_nano":1700000000123456789}}`, 1700000000123456789)
	f(RouteGenerate, `{"text":" a","meta_info":{"completion_tokens":1}}`, 0)
	f(RouteGenerate, `{"text":" a","sent_unix_nano":5}`, 0) // not where /generate has it
	f(RouteCompletions, `{"choices":[{"text":" a"}],"sent_unix_nano":42}`, 42)
	f(RouteChatCompletions, `{"choices":[],"usage":{"completion_tokens":1},"sent_unix_nano":42}`, 42)
	f(RouteChatCompletions, `{"choices":[],"sent_unix_nano":"42"}`, 0)
	f(RouteChatCompletions, `{"choices":[],"sent_unix_nano":-1}`, 0)
}
