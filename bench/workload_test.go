package bench

import (
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
		a, b := string(w.appendBody(nil, 1)), string(w.appendBody(nil, 2))
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
		f(Config{Route: route, Stream: true, MaxNewTokens: 100, PromptWords: 1, Model: `odd "model" \ name`})
		f(Config{Route: route, Stream: true, PromptWords: 500, Seed: 3})
	}
}

func TestWorkloadPrompt(t *testing.T) {
	prompt := func(seed uint64, seq uint64) string {
		t.Helper()
		cfg := Config{URL: "http://x", PromptWords: 8, Seed: seed}.withDefaults()
		v, err := fastjson.ParseBytes(newWorkload(&cfg).appendBody(nil, seq))
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
