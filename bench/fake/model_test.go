package fake

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The performance model's timing, on the clock of a synctest bubble: the
// requests go straight to Handler, so nothing but the model's own timers
// runs, and every duration is exact.

// serveAtOnce serves every body on path of s at the same moment of the
// bubble's clock, in turn: each starts once the one before waits, so they
// meet the model in order. It returns how long each took, in the bubble's
// time, and each answer. It must run in a bubble.
func serveAtOnce(s *Server, path string, bodies ...string) ([]time.Duration, []string) {
	took := make([]time.Duration, len(bodies))
	answers := make([]string, len(bodies))
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Go(func() {
			start := time.Now()
			ctx := newCtx("POST", path, body)
			s.Handler(ctx)
			answers[i] = string(ctx.Response.Body()) // runs a stream to its end
			took[i] = time.Since(start)
		})
		synctest.Wait()
	}
	wg.Wait()
	return took, answers
}

// inBubble runs f in a synctest bubble on a fresh server for cfg.
func inBubble(t *testing.T, cfg Config, f func(t *testing.T, s *Server)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		s := New(cfg)
		defer s.Close()
		f(t, s)
	})
}

// A prompt costs PrefillDelay plus PrefillTokenDelay per uncached token.
func TestPrefillCost(t *testing.T) {
	t.Parallel()
	cfg := Config{CacheTokens: 100, PrefillDelay: 100 * time.Millisecond, PrefillTokenDelay: time.Millisecond}
	gen := func(text string) string {
		return `{"text":"` + text + `","sampling_params":{"max_new_tokens":0}}`
	}
	steps := []struct {
		name   string
		text   string // 4 bytes a token
		took   time.Duration
		cached string
	}{
		{"cold", strings.Repeat("a", 40), 110 * time.Millisecond, "0"},
		{"same prompt: all but its last token cached", strings.Repeat("a", 40), 101 * time.Millisecond, "9"},
		{"same first half", strings.Repeat("a", 20) + strings.Repeat("b", 20), 105 * time.Millisecond, "5"},
		{"other first token", "b" + strings.Repeat("a", 39), 110 * time.Millisecond, "0"},
	}
	inBubble(t, cfg, func(t *testing.T, s *Server) {
		for _, st := range steps {
			took, answers := serveAtOnce(s, "/generate", gen(st.text))
			got := str(parseJSON(t, answers[0]), "meta_info", "cached_tokens")
			if took[0] != st.took || got != st.cached {
				t.Errorf("%s: took %s with cached_tokens %s; want %s with %s", st.name, took[0], got, st.took, st.cached)
			}
		}
	})
}

// noTokens is an aggregated request that only prefills.
const noTokens = `{"text":"abcdefgh","sampling_params":{"max_new_tokens":0}}`

// At most MaxPrefills prompts are computed at once; the others queue.
func TestMaxPrefills(t *testing.T) {
	t.Parallel()
	s := time.Second
	for _, tc := range []struct {
		max  int
		want []time.Duration
	}{
		{0, []time.Duration{s, s, s}},
		{1, []time.Duration{s, 2 * s, 3 * s}},
		{2, []time.Duration{s, s, 2 * s}},
	} {
		inBubble(t, Config{MaxPrefills: tc.max, PrefillDelay: s}, func(t *testing.T, srv *Server) {
			took, _ := serveAtOnce(srv, "/generate", noTokens, noTokens, noTokens)
			slices.Sort(took)
			if !slices.Equal(took, tc.want) {
				t.Errorf("MaxPrefills %d: three prompts at once took %v; want %v", tc.max, took, tc.want)
			}
		})
	}
}

// A token step takes TokenDelay plus BatchTokenDelay for each other item
// generating on the rank when it starts, streamed or not. Requests sent at
// the same moment join the batch one after the other: the first one's first
// step sees a batch of one, the next one's a batch of two, and so on.
func TestDecodeBatchSlowsTokens(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	const one = `{"text":"hi","sampling_params":{"max_new_tokens":4}}`
	for _, tc := range []struct {
		name   string
		bodies []string
		batch  time.Duration
		want   []time.Duration
	}{
		{"alone", []string{one}, 5 * ms, []time.Duration{40 * ms}},
		{"two", []string{one, one}, 5 * ms, []time.Duration{55 * ms, 60 * ms}},
		{"three", []string{one, one, one}, 5 * ms, []time.Duration{70 * ms, 75 * ms, 80 * ms}},
		{"three streamed", slices.Repeat([]string{`{"text":"hi","stream":true,"sampling_params":{"max_new_tokens":4}}`}, 3),
			5 * ms, []time.Duration{70 * ms, 75 * ms, 80 * ms}},
		{"a batch of two prompts", []string{`{"text":["hi","ho"],"sampling_params":{"max_new_tokens":4}}`}, 5 * ms, []time.Duration{60 * ms}},
		{"no batch cost", []string{one, one, one}, 0, []time.Duration{40 * ms, 40 * ms, 40 * ms}},
	} {
		inBubble(t, Config{TokenDelay: 10 * ms, BatchTokenDelay: tc.batch}, func(t *testing.T, s *Server) {
			took, _ := serveAtOnce(s, "/generate", tc.bodies...)
			slices.Sort(took)
			if !slices.Equal(took, tc.want) {
				t.Errorf("%s: took %v; want %v", tc.name, took, tc.want)
			}
		})
	}
}

// Items that do not fit in a decode's KV pool wait for room.
func TestMaxTotalTokens(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	body := `{"text":"abcd","sampling_params":{"max_new_tokens":10}}` // 1 + 10 tokens
	for _, tc := range []struct {
		max  int
		want []time.Duration
	}{
		{0, []time.Duration{100 * ms, 100 * ms}},
		{22, []time.Duration{100 * ms, 100 * ms}},
		{21, []time.Duration{100 * ms, 200 * ms}},
		{5, []time.Duration{100 * ms, 200 * ms}}, // larger than the pool: one at a time
	} {
		inBubble(t, Config{MaxTotalTokens: tc.max, TokenDelay: 10 * ms}, func(t *testing.T, s *Server) {
			took, _ := serveAtOnce(s, "/generate", body, body)
			slices.Sort(took)
			if !slices.Equal(took, tc.want) {
				t.Errorf("MaxTotalTokens %d: two requests took %v; want %v", tc.max, took, tc.want)
			}
		})
	}
}
