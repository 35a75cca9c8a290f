package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
)

// WorkloadSharedPrefix is the name of SGLang bench_serving's
// generated-shared-prefix dataset, which SharedPrefix describes.
const WorkloadSharedPrefix = "generated-shared-prefix"

// RoutingKeyHeader is the header sglang_router's consistent_hashing and
// manual policies read a request's routing key from, and that
// bench_serving sends with --gsp-send-routing-key.
const RoutingKeyHeader = "X-SMG-Routing-Key"

// SharedPrefix's defaults: bench_serving's (python/sglang/benchmark/args.py).
const (
	defaultGSPGroups          = 64
	defaultGSPPromptsPerGroup = 16
	defaultGSPSystemPromptLen = 2048
	defaultGSPQuestionLen     = 128
	defaultGSPOutputLen       = 256
	defaultGSPRangeRatio      = 1.0
)

// maxGSPWords bounds the words a SharedPrefix workload holds in memory
// (about 6 bytes each): every group's system prompt and every request's
// question.
const maxGSPWords = 1 << 25

// SharedPrefix describes SGLang bench_serving's generated-shared-prefix
// workload (python/sglang/benchmark/datasets/generated_shared_prefix.py):
// Groups system prompts, each shared by PromptsPerGroup requests whose
// prompt is the group's system prompt, "\n\n", then a question of the
// request's own. Every request is sent once, in a shuffled order unless
// Ordered. It is plain data; zero fields mean bench_serving's defaults.
//
// Lengths are in tokens, made of words: a word is one token to the fake
// workers (bench/fake splits text at white space) and, being a common
// English word with the space before it, about one to a real BPE
// tokenizer. bench_serving instead decodes random token ids of the model's
// vocabulary, which re-tokenize to about the length asked for. The "\n\n"
// between system prompt and question is white space to the fakes, one
// token to a real tokenizer.
type SharedPrefix struct {
	// Groups is the number of system prompts (default 64).
	Groups int `json:"groups"`
	// PromptsPerGroup is the number of requests sharing each (default 16).
	PromptsPerGroup int `json:"prompts_per_group"`
	// SystemPromptLen, QuestionLen and OutputLen are the longest system
	// prompt and question, in words, and output, in tokens (defaults
	// 2048, 128 and 256).
	SystemPromptLen int `json:"system_prompt_len"`
	QuestionLen     int `json:"question_len"`
	OutputLen       int `json:"output_len"`
	// RangeRatio draws each length uniformly from max(int(len ×
	// RangeRatio), 1) to len, as bench_serving's compute_random_lens does:
	// a system prompt's per group, a question's and an output's per
	// request. Zero means 1, every length exact; bench_serving's 0 (from 1
	// to len) is any ratio below 1/len.
	RangeRatio float64 `json:"range_ratio"`
	// Ordered sends the requests group after group, as generated;
	// otherwise they are shuffled by a generator seeded with Config.Seed.
	Ordered bool `json:"ordered"`
	// SendRoutingKey sends each request with an X-SMG-Routing-Key header
	// naming its group, so a router that routes by key keeps a group on
	// one worker.
	SendRoutingKey bool `json:"send_routing_key"`
	// HotShare, when above 0, skews the workload (pdlb's own, not
	// bench_serving's): the first group takes that share of the
	// Groups × PromptsPerGroup requests, the others share the rest evenly.
	// A router that keeps each group on one worker must not melt that
	// worker.
	HotShare float64 `json:"hot_share,omitempty"`
}

// withDefaults returns s with every zero field set to its default.
func (s SharedPrefix) withDefaults() SharedPrefix {
	for _, f := range []struct {
		v   *int
		def int
	}{
		{&s.Groups, defaultGSPGroups},
		{&s.PromptsPerGroup, defaultGSPPromptsPerGroup},
		{&s.SystemPromptLen, defaultGSPSystemPromptLen},
		{&s.QuestionLen, defaultGSPQuestionLen},
		{&s.OutputLen, defaultGSPOutputLen},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if s.RangeRatio == 0 {
		s.RangeRatio = defaultGSPRangeRatio
	}
	return s
}

// check rejects what no default can fix; s has its defaults.
func (s *SharedPrefix) check() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"groups", s.Groups}, {"prompts per group", s.PromptsPerGroup},
		{"system prompt length", s.SystemPromptLen}, {"question length", s.QuestionLen},
		{"output length", s.OutputLen},
	} {
		if f.v < 1 || f.v > maxDraw {
			return fmt.Errorf("%s %d: want 1 to %d", f.name, f.v, maxDraw)
		}
	}
	if !(s.RangeRatio > 0 && s.RangeRatio <= 1) {
		return fmt.Errorf("range ratio %v: want more than 0, at most 1", s.RangeRatio)
	}
	if !(s.HotShare >= 0 && s.HotShare < 1) {
		return fmt.Errorf("hot share %v: want 0 to less than 1", s.HotShare)
	}
	if words := float64(s.Groups) * (float64(s.SystemPromptLen) + float64(s.PromptsPerGroup)*float64(s.QuestionLen)); words > maxGSPWords {
		return fmt.Errorf("%d groups of %d prompts of up to %d+%d words make %.0f words; at most %d", s.Groups,
			s.PromptsPerGroup, s.SystemPromptLen, s.QuestionLen, words, maxGSPWords)
	}
	return nil
}

// Requests returns the number of requests of the workload: Groups ×
// PromptsPerGroup, defaults applied.
func (s SharedPrefix) Requests() int {
	d := s.withDefaults()
	return d.Groups * d.PromptsPerGroup
}

// sharedPrefix is a SharedPrefix workload, generated: immutable, safe for
// concurrent use.
type sharedPrefix struct {
	system [][]byte // each group's system prompt, words joined by spaces
	keys   [][]byte // each group's routing key; nil when not sent
	reqs   []gspRequest
	best   float64
}

// gspRequest is one request of a sharedPrefix, in sending order.
type gspRequest struct {
	group     int
	question  []byte
	maxTokens int
}

// newSharedPrefix generates the workload s (defaults applied) describes
// from seed: the same seed gives the same texts, lengths and order.
func newSharedPrefix(s SharedPrefix, seed uint64) *sharedPrefix {
	// A stream of its own, apart from the default prompts' and arrivals'.
	rng := rand.New(rand.NewPCG(seed, 0x3c6ef372fe94f82b))
	draw := func(full int) int {
		lo := max(int(float64(full)*s.RangeRatio), 1)
		return lo + rng.IntN(full-lo+1)
	}
	sp := &sharedPrefix{system: make([][]byte, s.Groups)}
	sysLens := make([]int, s.Groups)
	for g := range sysLens {
		sysLens[g] = draw(s.SystemPromptLen)
	}
	for g := range sp.system {
		sp.system[g] = appendWords(nil, rng, sysLens[g])
	}
	if s.SendRoutingKey {
		sp.keys = make([][]byte, s.Groups)
		for g := range sp.keys {
			// Repeatable, unlike bench_serving's (a random run id, the
			// time and the group), but as distinct between groups.
			sp.keys[g] = fmt.Appendf(nil, "gsp-%d-%d", seed, g)
		}
	}
	sp.reqs = make([]gspRequest, 0, s.Groups*s.PromptsPerGroup)
	var promptTokens, bestCached float64
	for g, n := range s.groupSizes() {
		for range n {
			q := draw(s.QuestionLen)
			sp.reqs = append(sp.reqs, gspRequest{group: g, question: appendWords(nil, rng, q), maxTokens: draw(s.OutputLen)})
			promptTokens += float64(sysLens[g] + q)
		}
		bestCached += float64(max(n-1, 0) * sysLens[g])
	}
	sp.best = bestCached / promptTokens
	if !s.Ordered {
		rng.Shuffle(len(sp.reqs), func(i, j int) { sp.reqs[i], sp.reqs[j] = sp.reqs[j], sp.reqs[i] })
	}
	return sp
}

// groupSizes returns each group's number of requests: PromptsPerGroup,
// unless HotShare skews them.
func (s SharedPrefix) groupSizes() []int {
	sizes := make([]int, s.Groups)
	total := s.Groups * s.PromptsPerGroup
	if s.HotShare <= 0 || s.Groups == 1 {
		for g := range sizes {
			sizes[g] = s.PromptsPerGroup
		}
		return sizes
	}
	sizes[0] = int(s.HotShare*float64(total) + 0.5)
	rest, others := total-sizes[0], s.Groups-1
	for g := 1; g < s.Groups; g++ {
		sizes[g] = rest / others
		if g <= rest%others {
			sizes[g]++
		}
	}
	return sizes
}

// appendWords appends n words of vocabulary drawn by rng, joined by
// spaces: text a JSON string holds as is.
func appendWords(dst []byte, rng *rand.Rand, n int) []byte {
	for i := range n {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, vocabulary[rng.IntN(len(vocabulary))]...)
	}
	return dst
}

// request returns the request of number seq (from 1); the numbers go round
// the workload, though a run sends each request once.
func (sp *sharedPrefix) request(seq uint64) *gspRequest {
	return &sp.reqs[(seq-1)%uint64(len(sp.reqs))]
}

// appendPrompt appends r's prompt as the route's JSON value: a string of
// the system prompt, "\n\n" and the question, or on the chat route a system
// message with the system prompt and a user message with the question.
func (sp *sharedPrefix) appendPrompt(dst []byte, r *gspRequest, chat bool) []byte {
	if chat {
		dst = append(dst, `[{"role":"system","content":"`...)
		dst = append(dst, sp.system[r.group]...)
		dst = append(dst, `"},{"role":"user","content":"`...)
		dst = append(dst, r.question...)
		return append(dst, `"}]`...)
	}
	dst = append(dst, '"')
	dst = append(dst, sp.system[r.group]...)
	dst = append(dst, `\n\n`...)
	dst = append(dst, r.question...)
	return append(dst, '"')
}

// routingKey returns the routing key of request r, or nil when none is
// sent.
func (sp *sharedPrefix) routingKey(r *gspRequest) []byte {
	if sp.keys == nil {
		return nil
	}
	return sp.keys[r.group]
}

// checkSharedPrefix rejects what the SharedPrefix workload cannot go
// with: a prompt file, a request count (the workload's is its own) and a
// warm-up, whose requests would take the workload's first prompts and
// send them twice, changing the hits of the measured ones.
func (c *Config) checkSharedPrefix() error {
	if c.SharedPrefix == nil {
		return nil
	}
	s := c.SharedPrefix.withDefaults()
	if err := s.check(); err != nil {
		return fmt.Errorf("%s workload: %w", WorkloadSharedPrefix, err)
	}
	switch {
	case len(c.Prompts) > 0:
		return fmt.Errorf("the %s workload makes its own prompts: give no prompt file", WorkloadSharedPrefix)
	case c.Requests > 0:
		return fmt.Errorf("the %s workload sends its %d requests once each: give no request count", WorkloadSharedPrefix, s.Groups*s.PromptsPerGroup)
	case c.Warmup > 0:
		return errors.New("a warm-up would send some of the " + WorkloadSharedPrefix + " workload's prompts twice: give none")
	}
	return nil
}

// sharedPrefixText describes a SharedPrefix workload (defaults applied)
// generated from seed, for people.
func sharedPrefixText(s *SharedPrefix, seed uint64) string {
	order := fmt.Sprintf("shuffled (seed %d)", seed)
	if s.Ordered {
		order = "in order"
	}
	text := fmt.Sprintf("%s: %d groups × %d prompts of a %d-word system prompt and a %d-word question, %d new tokens",
		WorkloadSharedPrefix, s.Groups, s.PromptsPerGroup, s.SystemPromptLen, s.QuestionLen, s.OutputLen)
	if s.RangeRatio < 1 {
		text += fmt.Sprintf(" (each at least %s of that)", strconv.FormatFloat(s.RangeRatio, 'g', 3, 64))
	}
	text += ", " + order
	if s.SendRoutingKey {
		text += ", a " + RoutingKeyHeader + " a group"
	}
	return text
}
