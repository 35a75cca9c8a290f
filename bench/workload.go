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

// promptPool is the number of words generated prompts are cut from; longer
// prompts repeat them.
const promptPool = 1024

// workload is what a run sends: bodies appended from pre-built pieces,
// with the prompt and the output length chosen per request. It is
// immutable and safe for concurrent use.
type workload struct {
	route  string
	stream bool
	seed   uint64
	// A body is open, the prompt (a JSON value), mid, the output length,
	// then tail.
	open, mid, tail []byte
	// A generated prompt is quote, the request number, words from pool,
	// then unquote; ends[i] is the end of word i+1 in pool.
	quote, unquote []byte
	pool           []byte
	ends           []int
	promptWords    Dist
	maxTokens      Dist
	// prompts are the file's prompts as JSON values for the route, and
	// promptMax their own output lengths (0: drawn from maxTokens).
	prompts   [][]byte
	promptMax []int
	// gsp, when not nil, is the SharedPrefix workload, which makes every
	// prompt and output length instead.
	gsp *sharedPrefix
}

// newWorkload pre-builds the pieces of the bodies cfg describes; cfg has
// its defaults.
func newWorkload(cfg *Config) *workload {
	wl := &workload{
		route: cfg.Route, stream: cfg.Stream, seed: cfg.Seed,
		promptWords: cfg.PromptWords, maxTokens: cfg.MaxNewTokens,
	}
	model, _ := json.Marshal(cfg.Model) // a string always marshals
	stream := strconv.FormatBool(cfg.Stream)
	// Temperature 0 and ignore_eos make every answer exactly as long as
	// asked, as SGLang's bench_serving asks by default.
	switch cfg.Route {
	case RouteGenerate:
		wl.open = []byte(`{"text":`)
		wl.mid = []byte(`,"sampling_params":{"max_new_tokens":`)
		wl.tail = []byte(`,"temperature":0,"ignore_eos":true},"stream":` + stream + `}`)
	case RouteCompletions, RouteChatCompletions:
		wl.open = append([]byte(`{"model":`), model...)
		if cfg.Route == RouteCompletions {
			wl.open = append(wl.open, `,"prompt":`...)
		} else {
			wl.open = append(wl.open, `,"messages":`...)
		}
		wl.mid = []byte(`,"max_tokens":`)
		wl.tail = []byte(`,"temperature":0,"ignore_eos":true,"stream":` + stream)
		if cfg.Stream {
			// Without it an OpenAI stream never says how many tokens
			// it generated.
			wl.tail = append(wl.tail, `,"stream_options":{"include_usage":true}`...)
		}
		wl.tail = append(wl.tail, '}')
	default:
		panic("BUG: unvalidated route " + cfg.Route)
	}
	wl.quote, wl.unquote = []byte(`"`), []byte(`"`)
	if cfg.Route == RouteChatCompletions {
		wl.quote, wl.unquote = []byte(`[{"role":"user","content":"`), []byte(`"}]`)
	}
	if cfg.SharedPrefix != nil {
		wl.gsp = newSharedPrefix(*cfg.SharedPrefix, cfg.Seed)
		return wl
	}
	wl.pool, wl.ends = poolWords(promptPool, cfg.Seed)
	for _, p := range cfg.Prompts {
		wl.prompts = append(wl.prompts, wl.promptValue(p))
		wl.promptMax = append(wl.promptMax, p.MaxNewTokens)
	}
	return wl
}

// promptValue encodes a file prompt as the route's prompt value.
func (wl *workload) promptValue(p Prompt) []byte {
	text, _ := json.Marshal(p.Text) // a string always marshals
	switch {
	case wl.route != RouteChatCompletions:
		return text
	case p.Messages != nil:
		return p.Messages
	}
	return append(append([]byte(`[{"role":"user","content":`), text...), `}]`...)
}

// poolWords returns n words, each preceded by a space, drawn from
// vocabulary by a generator seeded with seed, and the end of each.
func poolWords(n int, seed uint64) ([]byte, []int) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	var (
		pool []byte
		ends = make([]int, n)
	)
	for i := range n {
		pool = append(pool, ' ')
		pool = append(pool, vocabulary[rng.IntN(len(vocabulary))]...)
		ends[i] = len(pool)
	}
	return pool, ends
}

// random reports whether bodies need a per-request generator: whether a
// size is drawn.
func (wl *workload) random() bool {
	if wl.gsp != nil {
		return false // drawn when generated
	}
	_, fixedWords := wl.promptWords.fixed()
	_, fixedTokens := wl.maxTokens.fixed()
	return !fixedWords && len(wl.prompts) == 0 || !fixedTokens
}

// seedFor seeds pcg for request number seq, so each request's sizes depend
// on Seed and its number only, not on which client sends it when.
func (wl *workload) seedFor(pcg *rand.PCG, seq uint64) {
	// splitmix64's finaliser, so consecutive numbers give unrelated states.
	z := seq + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	pcg.Seed(wl.seed, z^z>>31)
}

// appendBody appends the body of request number seq (from 1) to dst. rng
// draws its sizes, seeded by seedFor; it may be nil when random is false.
func (wl *workload) appendBody(dst []byte, seq uint64, rng *rand.Rand) []byte {
	dst = append(dst, wl.open...)
	maxTokens := 0
	switch n := uint64(len(wl.prompts)); {
	case wl.gsp != nil:
		r := wl.gsp.request(seq)
		dst = wl.gsp.appendPrompt(dst, r, wl.route == RouteChatCompletions)
		maxTokens = r.maxTokens
	case n > 0:
		i := (seq - 1) % n
		dst = append(dst, wl.prompts[i]...)
		maxTokens = wl.promptMax[i]
	default:
		dst = wl.appendPrompt(dst, seq, wl.promptWords.draw(rng))
	}
	if maxTokens == 0 {
		maxTokens = wl.maxTokens.draw(rng)
	}
	dst = append(dst, wl.mid...)
	dst = strconv.AppendInt(dst, int64(maxTokens), 10)
	return append(dst, wl.tail...)
}

// routingKey returns the routing key to send with request number seq, or
// nil for none.
func (wl *workload) routingKey(seq uint64) []byte {
	if wl.gsp == nil {
		return nil
	}
	return wl.gsp.routingKey(wl.gsp.request(seq))
}

// appendPrompt appends a generated prompt of words words, the first of
// which is the request number so that no two prompts share a prefix.
func (wl *workload) appendPrompt(dst []byte, seq uint64, words int) []byte {
	dst = append(dst, wl.quote...)
	dst = strconv.AppendUint(dst, seq, 10)
	rest := words - 1
	for ; rest >= len(wl.ends); rest -= len(wl.ends) {
		dst = append(dst, wl.pool...)
	}
	if rest > 0 {
		dst = append(dst, wl.pool[:wl.ends[rest-1]]...)
	}
	return append(dst, wl.unquote...)
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

// sentAt reads when the server says it sent a stream event: the
// sent_unix_nano stamp of the fake servers (inside meta_info on /generate,
// at the top level of an OpenAI chunk), as Unix nanoseconds; 0 when the
// event has none, as real servers' events do not.
func (wl *workload) sentAt(v *fastjson.Value) int64 {
	var n *fastjson.Value
	if wl.route == RouteGenerate {
		n = v.Get("meta_info", "sent_unix_nano")
	} else {
		n = v.Get("sent_unix_nano")
	}
	if n == nil {
		return 0
	}
	ns, err := n.Int64()
	if err != nil || ns < 0 {
		return 0
	}
	return ns
}
