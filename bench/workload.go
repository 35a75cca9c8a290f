package bench

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"

	"github.com/valyala/fastjson"
)

// vocabulary is what prompts are made of: plain words a tokenizer keeps
// whole, so PromptWords stays close to the prompt length in tokens.
var vocabulary = [...]string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as",
	"was", "with", "be", "by", "on", "not", "he", "this", "are", "or",
	"his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
	"were", "their", "one", "all", "we", "can", "her", "has", "there", "been",
	"if", "more", "when", "will", "would", "who", "so", "no", "time", "river",
	"house", "water", "light", "world", "story", "music", "garden", "number", "market", "window",
	"morning", "paper", "mountain", "system",
}

// workload is what a run sends: one request shape, with bodies built by
// appending the request number between two pre-built halves. It is
// immutable and safe for concurrent use.
type workload struct {
	route  string
	stream bool
	// head is the body up to the prompt's first word, tail the rest.
	head, tail []byte
}

// newWorkload pre-builds the bodies cfg describes; cfg has its defaults.
func newWorkload(cfg *Config) *workload {
	wl := &workload{route: cfg.Route, stream: cfg.Stream}
	model, _ := json.Marshal(cfg.Model) // a string always marshals
	maxTokens := strconv.Itoa(cfg.MaxNewTokens)
	stream := strconv.FormatBool(cfg.Stream)
	// Temperature 0 and ignore_eos make every answer exactly MaxNewTokens
	// long, as SGLang's bench_serving asks by default.
	switch cfg.Route {
	case RouteGenerate:
		wl.head = []byte(`{"text":"`)
		wl.tail = appendWords(nil, cfg.PromptWords, cfg.Seed)
		wl.tail = append(wl.tail, `","sampling_params":{"max_new_tokens":`+maxTokens+
			`,"temperature":0,"ignore_eos":true},"stream":`+stream+`}`...)
	case RouteCompletions, RouteChatCompletions:
		wl.head = append([]byte(`{"model":`), model...)
		if cfg.Route == RouteCompletions {
			wl.head = append(wl.head, `,"prompt":"`...)
		} else {
			wl.head = append(wl.head, `,"messages":[{"role":"user","content":"`...)
		}
		wl.tail = appendWords(nil, cfg.PromptWords, cfg.Seed)
		if cfg.Route == RouteChatCompletions {
			wl.tail = append(wl.tail, `"}]`...)
		} else {
			wl.tail = append(wl.tail, '"')
		}
		wl.tail = append(wl.tail, `,"max_tokens":`+maxTokens+
			`,"temperature":0,"ignore_eos":true,"stream":`+stream...)
		if cfg.Stream {
			// Without it an OpenAI stream never says how many tokens
			// it generated.
			wl.tail = append(wl.tail, `,"stream_options":{"include_usage":true}`...)
		}
		wl.tail = append(wl.tail, '}')
	default:
		panic("BUG: unvalidated route " + cfg.Route)
	}
	return wl
}

// appendWords appends the prompt after its first word: words-1 words, each
// preceded by a space, drawn from vocabulary by a generator seeded with seed.
func appendWords(dst []byte, words int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for range words - 1 {
		dst = append(dst, ' ')
		dst = append(dst, vocabulary[rng.IntN(len(vocabulary))]...)
	}
	return dst
}

// appendBody appends the body of request number seq to dst.
func (wl *workload) appendBody(dst []byte, seq uint64) []byte {
	dst = append(dst, wl.head...)
	dst = strconv.AppendUint(dst, seq, 10)
	return append(dst, wl.tail...)
}

// completionTokens reads the output length from a non-stream answer, or 0
// when the answer does not say.
func (wl *workload) completionTokens(v *fastjson.Value) int {
	if wl.route != RouteGenerate {
		return v.GetInt("usage", "completion_tokens")
	}
	if n := v.Get("meta_info", "completion_tokens"); n != nil {
		return n.GetInt()
	}
	return len(v.GetArray("output_ids"))
}

// chunk reads one stream event: whether it carries generated text, and the
// output length it reports so far (-1 when it reports none). SGLang's
// /generate chunks carry cumulative meta_info.completion_tokens; an OpenAI
// stream reports usage once, in its last chunk.
func (wl *workload) chunk(v *fastjson.Value) (hasText bool, tokens int) {
	tokens = -1
	if wl.route == RouteGenerate {
		if n := v.Get("meta_info", "completion_tokens"); n != nil {
			tokens = n.GetInt()
		}
		return v.Get("text") != nil, tokens
	}
	if n := v.Get("usage", "completion_tokens"); n != nil {
		tokens = n.GetInt()
	}
	for _, c := range v.GetArray("choices") {
		if len(c.GetStringBytes("text")) > 0 ||
			len(c.GetStringBytes("delta", "content")) > 0 ||
			len(c.GetStringBytes("delta", "reasoning_content")) > 0 {
			return true, tokens
		}
	}
	return false, tokens
}
