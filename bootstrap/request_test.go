package bootstrap

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	f := func(body string, want Request) {
		t.Helper()
		got, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%q): unexpected error: %s", body, err)
		}
		got.PromptTokens = 0    // TestParsePromptTokens checks the estimate
		got.RoutingKey = Span{} // TestRoutingKey checks it
		if got != want {
			t.Fatalf("Parse(%q): got %+v; want %+v", body, got, want)
		}
	}
	scalar := Request{Batch: -1}

	f(`{}`, scalar)
	f(" \t\r\n{ \n } \n", scalar)
	f(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":16}`, scalar)
	f(`{"model":"m","messages":[],"stream":true}`, Request{Batch: -1, Stream: true})
	f(`{"text":"hello","sampling_params":{"max_new_tokens":8},"stream":true,"return_logprob":true}`,
		Request{Batch: -1, Stream: true, ReturnLogprob: true, HasReturnLogprob: true})
	f(`{"text":"hi","return_logprob":false}`, Request{Batch: -1, HasReturnLogprob: true})
	f(`{"text":"hi","return_logprob":null,"return_routed_experts":null}`,
		Request{Batch: -1, HasReturnLogprob: true, HasReturnRoutedExperts: true})

	// Nested keys are not top-level fields.
	f(`{"sampling_params":{"stream":true,"return_logprob":true,"text":["a"]}}`, scalar)
	f(`{"a":[{"stream":true}],"b":"\"stream\":true"}`, scalar)

	// The last of duplicate keys wins, as in Python's json.
	f(`{"stream":true,"stream":false}`, scalar)
	f(`{"stream":false,"stream":1}`, Request{Batch: -1, Stream: true})
	f(`{"return_logprob":true,"return_logprob":0}`, Request{Batch: -1, HasReturnLogprob: true})
	f(`{"text":["a","b"],"text":"c"}`, scalar)
	f(`{"text":"c","text":["a","b"]}`, Request{Batch: 2})

	// Keys are compared as the worker decodes them.
	f(`{"str\u0065am":true}`, Request{Batch: -1, Stream: true})
	f(`{"\u0073\u0074\u0072\u0065\u0061\u006D":true}`, Request{Batch: -1, Stream: true})
	f(`{"stream\u0000":true,"stre\nam":true,"stream\/":true}`, scalar)
	f(`{"t\u0065xt":["a"]}`, Request{Batch: 1})
	f(`{"t\u00e9xt":["a"],"te\nxt":["a"],"text\"":["a"],"text\\":["a"]}`, scalar)

	// The fields pdlb owns, under any spelling (Append, Strip).
	kv := Request{Batch: -1, HasKVFields: true}
	f(`{"bootstrap_room":1}`, kv)
	f(`{"bootstrap\u005fhost":"evil"}`, kv)
	f(`{"\u0062ootstrap_port":null}`, kv)
	f(`{"do\u005flocal_prefill":false}`, kv)
	f(`{"bootstrap":1,"bootstrap_roomx":1,"bootstrap\/room":1,"sampling_params":{"bootstrap_room":1}}`, scalar)

	// Strings may hide anything.
	f(`{"a":"{[\"\\","stream":"false"}`, Request{Batch: -1, Stream: true})
	f(`{"a":"caf\u00e9 ☕ \ud83d\ude00","b":"\\\\"}`, scalar)

	// Numbers of any spelling.
	f(`{"a":1e400,"b":-0.0,"c":12345678901234567890123,"d":1.50,"e":1E-2}`, scalar)
}

func TestParseBatch(t *testing.T) {
	f := func(body string, want int) {
		t.Helper()
		got, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%q): unexpected error: %s", body, err)
		}
		if got.Batch != want {
			t.Fatalf("Parse(%q).Batch: got %d; want %d", body, got.Batch, want)
		}
	}
	f(`{"text":"hello"}`, -1)
	f(`{"text":["a","b","c"]}`, 3)
	f(`{"text":[]}`, 0)
	f(`{"text":[ ]}`, 0)
	f(`{"text":["a,b]","[c]"]}`, 2)
	f(`{"text":[["a"],{"b":[1,2]}]}`, 2)
	f(`{"text":{"a":1}}`, -1)
	f(`{"text":5}`, -1)
	f(`{"text":true}`, -1)
	f(`{"input_ids":[[1,2],[3]]}`, 2)
	f(`{"input_ids":[ [1] ]}`, 1)
	f(`{"input_ids":[1,2,3]}`, -1)
	f(`{"input_ids":[]}`, -1)
	f(`{"input_ids":[1,[2]]}`, -1)
	f(`{"input_ids":"abc"}`, -1)
	f(`{"input_ids":null}`, -1)

	// "text" wins over "input_ids" unless it is null.
	f(`{"text":"a","input_ids":[[1],[2]]}`, -1)
	f(`{"input_ids":[[1],[2]],"text":["a"]}`, 1)
	f(`{"text":null,"input_ids":[[1],[2]]}`, 2)
}

func TestParseTruthiness(t *testing.T) {
	f := func(value string, want bool) {
		t.Helper()
		body := `{"stream":` + value + `}`
		got, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%q): unexpected error: %s", body, err)
		}
		if got.Stream != want {
			t.Fatalf("Parse(%q).Stream: got %t; want %t", body, got.Stream, want)
		}
	}
	for _, v := range []string{`false`, `null`, `0`, `-0`, `0.0`, `-0.0`, `0e5`, `0.000E-3`, `""`, `[]`, `[ ]`, `{}`, "{\n}", `1e-400`} {
		f(v, false)
	}
	for _, v := range []string{`true`, `1`, `-1`, `10`, `0.5`, `1e400`, `-1e-300`, `"0"`, `"false"`, `" "`, `"\u0000"`, `[0]`, `[false]`, `{"a":0}`,
		`NaN`, `Infinity`, `-Infinity`} { // bool(float("nan")) is True
		f(v, true)
	}
}

func TestParseError(t *testing.T) {
	f := func(body string, wantErr error, wantMsg string) {
		t.Helper()
		_, err := Parse([]byte(body))
		if err == nil {
			t.Fatalf("Parse(%q): expecting an error", body)
		}
		if !errors.Is(err, wantErr) {
			t.Fatalf("Parse(%q): got error %q; want one wrapping %q", body, err, wantErr)
		}
		if !strings.Contains(err.Error(), wantMsg) {
			t.Fatalf("Parse(%q): got error %q; want one containing %q", body, err, wantMsg)
		}
	}
	f(``, ErrNotJSON, "request body must be a JSON object, got an empty body")
	f(" \n\t", ErrNotObject, "request body must be a JSON object, got an empty body")
	f(`[1,2]`, ErrNotObject, "request body must be a JSON object, got a JSON array")
	f(` "text" `, ErrNotObject, "got a JSON string")
	f(`42`, ErrNotObject, "got a JSON number")
	f(`null`, ErrNotObject, "got a JSON null")
	f(`true`, ErrNotObject, "got a JSON boolean")
	f(`[1,2`, ErrNotJSON, "request body must be a JSON object, got a body that is not JSON")
	f(`[1,2] x`, ErrNotObject, "got a body that is not JSON")
	f(`nul`, ErrNotJSON, "got a body that is not JSON")
	// Not JSON at all: what a form (curl -d) or plain text sends. Where a
	// reader of JSON stopped ("expected true at offset 0") says nothing
	// to whoever sent it.
	f(`not json`, ErrNotObject, "request body must be a JSON object, got a body that is not JSON")
	f(`text=hi`, ErrNotJSON, "request body must be a JSON object, got a body that is not JSON")
	f(`tree`, ErrNotJSON, "got a body that is not JSON")
	f(`{`, ErrNotJSON, "unexpected end of body")
	f(`{"text":"abc`, ErrNotJSON, "unterminated string")
	f(`{"text":"abc"`, ErrNotJSON, "unexpected end of body")
	f(`{"a":1,}`, ErrNotJSON, "expected a key")
	f(`{"a" 1}`, ErrNotJSON, "expected ':'")
	f(`{"a":1 "b":2}`, ErrNotJSON, "expected ',' or '}'")
	f(`{"a":[1}`, ErrNotJSON, "mismatched")
	f(`{"a":{]}`, ErrNotJSON, "mismatched")
	f(`{"a":1}}`, ErrNotJSON, "unexpected data after the object")
	f(`{"a":1} {"b":2}`, ErrNotJSON, "unexpected data after the object")
	f(`{"a":tru}`, ErrNotJSON, "expected true at offset 5")
	f(`{"a":01}`, ErrNotJSON, `expected ',' or '}' at offset 6`)
	f(`{"a":1.}`, ErrNotJSON, "invalid number at offset 5")
	f(`{"a":-}`, ErrNotJSON, "invalid number at offset 5")
	f(`{"a":1e+}`, ErrNotJSON, "invalid number at offset 5")
	f(`{"a":"\x"}`, ErrNotJSON, "invalid escape at offset 6")
	f(`{"a":"\u12G4"}`, ErrNotJSON, "invalid escape at offset 6")
	f("{\"a\":\"\x01\"}", ErrNotJSON, "a string holds a raw control character at offset 6")
	f(`{a:1}`, ErrNotJSON, "expected a key")
	f(`{"a":}`, ErrNotJSON, "unexpected '}'")
	f("\xef\xbb\xbf{}", ErrNotJSON, "got a body that is not JSON")

	// Raw control characters beside escapes (fastjson 1.6.10, which gave
	// these errors once, accepts them; FuzzParse found them).
	f("{\"a\":\"\x01\\n\"}", ErrNotJSON, "a string holds a raw control character")
	f("{\"a\x1f\\n\":1}", ErrNotJSON, "a string holds a raw control character")
	f("\"\x18\\b\"", ErrNotJSON, "got a body that is not JSON")
}

// TestParseDeep checks the bound on nesting, which Python's json needs (it
// gives up with RecursionError near it) and which once guarded a recursive
// validator against a fatal stack overflow: a few MiB of '[' would have
// killed the process.
func TestParseDeep(t *testing.T) {
	f := func(body string, wantErr error) {
		t.Helper()
		_, err := Parse([]byte(body))
		if !errors.Is(err, wantErr) {
			t.Fatalf("Parse(%.20q...): got error %v; want one wrapping %q", body, err, wantErr)
		}
	}
	deep := 4 << 20
	f(strings.Repeat("[", deep), errTooDeep)
	f(strings.Repeat("[", deep)+strings.Repeat("]", deep), errTooDeep)
	f(`{"a":`+strings.Repeat(`{"a":`, deep), errTooDeep)
	f(`{"a":`+strings.Repeat("[", maxDepth)+strings.Repeat("]", maxDepth)+`}`, errTooDeep)
	f(strings.Repeat("[", maxDepth+1)+strings.Repeat("]", maxDepth+1), errTooDeep)

	// maxDepth levels, counting the body's object, are fine.
	ok := `{"a":` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}`
	if _, err := Parse([]byte(ok)); err != nil {
		t.Fatalf("Parse at depth %d: unexpected error: %s", maxDepth, err)
	}
	ok = strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if _, err := Parse([]byte(ok)); !errors.Is(err, ErrNotObject) {
		t.Fatalf("Parse of an array at depth %d: got error %v; want one wrapping %q", maxDepth, err, ErrNotObject)
	}
}

func TestParseAllocs(t *testing.T) {
	f := func(body string) {
		t.Helper()
		b := []byte(body)
		n := testing.AllocsPerRun(100, func() {
			if _, err := Parse(b); err != nil {
				t.Fatalf("Parse(%q): unexpected error: %s", body, err)
			}
		})
		if n != 0 {
			t.Fatalf("Parse(%q): got %v allocs; want 0", body, n)
		}
	}
	f(chatBody)
	f(generateBody)
	f(batchBody)
	f(`{"str\u0065am":true,"a":"caf\u00e9 \"q\"","return_logprob":[]}`)
}

func TestParseDPRanks(t *testing.T) {
	f := func(body string, prefill, routed DPRank) {
		t.Helper()
		got, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%q): unexpected error: %s", body, err)
		}
		if got.PrefillDPRank != prefill || got.RoutedDPRank != routed {
			t.Fatalf("Parse(%q): got prefill %+v routed %+v; want %+v %+v", body, got.PrefillDPRank, got.RoutedDPRank, prefill, routed)
		}
	}
	none := DPRank{}
	f(`{"text": "a"}`, none, none)
	// The seed request of the first-request bug (SGLang PR #22990).
	f(`{"text": "Hello World How are you?", "stream": false, "routed_dp_rank": 0, "disagg_prefill_dp_rank": 0}`,
		DPRank{Set: true}, DPRank{Set: true})
	f(`{"disagg_prefill_dp_rank": 3, "data_parallel_rank": 1}`, DPRank{Set: true, Rank: 3}, DPRank{Set: true, Rank: 1})
	f(`{"disagg_prefill_dp_rank": -2}`, DPRank{Set: true, Rank: -2}, none)
	f(`{"disagg_prefill_dp_rank": null, "routed_dp_rank": null}`, none, none)
	f(`{"disagg_prefill_dp_rank": 1, "disagg_prefill_dp_rank": null}`, none, none)
	f(`{"disagg_prefill_d\u0070_rank": 5}`, DPRank{Set: true, Rank: 5}, none)
	// The deprecated data_parallel_rank counts only without routed_dp_rank,
	// wherever either comes in the body, as in SGLang.
	f(`{"routed_dp_rank": 0, "data_parallel_rank": 1}`, none, DPRank{Set: true, Rank: 0})
	f(`{"data_parallel_rank": 1, "routed_dp_rank": 0}`, none, DPRank{Set: true, Rank: 0})
	f(`{"routed_dp_rank": null, "data_parallel_rank": 1}`, none, DPRank{Set: true, Rank: 1})
	// pydantic's lax int, as SGLang's models read these fields.
	f(`{"disagg_prefill_dp_rank": "0", "routed_dp_rank": " +2 "}`, DPRank{Set: true}, DPRank{Set: true, Rank: 2})
	f(`{"disagg_prefill_dp_rank": 3.0, "routed_dp_rank": true}`, DPRank{Set: true, Rank: 3}, DPRank{Set: true, Rank: 1})
	f(`{"disagg_prefill_dp_rank": 1e3, "routed_dp_rank": false}`, DPRank{Set: true, Rank: 1000}, DPRank{Set: true})
	f(`{"disagg_prefill_dp_rank": "1.0", "routed_dp_rank": "1_0"}`, DPRank{Set: true, Rank: 1}, DPRank{Set: true, Rank: 10})

	bad := func(body string) {
		t.Helper()
		_, err := Parse([]byte(body))
		if !errors.Is(err, ErrBadDPRank) || !strings.Contains(err.Error(), "must be an integer rank") {
			t.Fatalf("Parse(%q): got error %v; want one wrapping %q", body, err, ErrBadDPRank)
		}
	}
	bad(`{"disagg_prefill_dp_rank": "zero"}`)
	bad(`{"disagg_prefill_dp_rank": "1.5"}`)
	bad(`{"disagg_prefill_dp_rank": "1."}`)
	bad(`{"disagg_prefill_dp_rank": "_1"}`)
	bad(`{"disagg_prefill_dp_rank": "1__0"}`)
	bad(`{"disagg_prefill_dp_rank": 1.5}`)
	bad(`{"routed_dp_rank": {}}`)
	bad(`{"routed_dp_rank": 1e30}`)
	bad(`{"routed_dp_rank": 12345678901234567890}`)
	// SGLang takes one rank per request, batches included.
	bad(`{"text": ["a", "b"], "disagg_prefill_dp_rank": [1, 9]}`)
	bad(`{"routed_dp_rank": [0, 1]}`)
	bad(`{"data_parallel_rank": []}`)
	if _, err := Parse([]byte(`{"data_parallel_rank": "one"}`)); err == nil || !strings.Contains(err.Error(), "data_parallel_rank must be") {
		t.Fatalf("got %v; want the error to name data_parallel_rank", err)
	}
	// Invalid JSON is reported as such, whatever the rank looks like.
	if _, err := Parse([]byte(`{"routed_dp_rank": "0", }`)); !errors.Is(err, ErrNotJSON) {
		t.Fatalf("got %v; want ErrNotJSON", err)
	}
}

func TestParsePromptTokens(t *testing.T) {
	f := func(body string, want int) {
		t.Helper()
		got, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%q): unexpected error: %s", body, err)
		}
		if got.PromptTokens != want {
			t.Fatalf("Parse(%q): got %d prompt tokens; want %d", body, got.PromptTokens, want)
		}
	}
	f(`{}`, 0)
	f(`{"text": null}`, 0)
	f(`{"input_ids": [1, 2, 3, 4, 5]}`, 5)
	f(`{"input_ids": []}`, 0)
	f(`{"prompt": [7, 8, 9]}`, 3)
	// About four bytes a token, quotes included.
	f(`{"text": "Hello World How are you?"}`, 7)
	f(`{"prompt": "hi"}`, 1)
	f(`{"messages": [{"role": "user", "content": "hi"}]}`, 9)
	f(`{"text": "`+strings.Repeat("word ", 400)+`"}`, 501)
	// Batches are not estimated, an OpenAI list of prompts included.
	f(`{"text": ["a", "b"]}`, 0)
	f(`{"prompt": ["a long prompt", "another"]}`, 0)
	f(`{"prompt": [[1, 2], [3]]}`, 0)
	f(`{"input_ids": [[1, 2], [3]]}`, 0)
}

// Parse tells where the rid the workers read is: the last of duplicates,
// under any spelling of its key, a string or a batch's list as it is.
func TestParseRID(t *testing.T) {
	f := func(body, want string) {
		t.Helper()
		r, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("Parse(%s): %s", body, err)
		}
		if got := string(r.RID.Of([]byte(body))); got != want {
			t.Fatalf("Parse(%s): rid %q; want %q", body, got, want)
		}
	}
	f(`{"text": "a"}`, "")
	f(`{"text": "a", "rid": "r-1"}`, `"r-1"`)
	f(`{"rid": "decoy", "text": "a", "r\u0069d": "real"}`, `"real"`)
	f(`{"text": ["a", "b"], "rid": [ "a", "b" ] }`, `[ "a", "b" ]`)
	f(`{"rid": null}`, `null`)
}
