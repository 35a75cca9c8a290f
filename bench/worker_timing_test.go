package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// BenchmarkStreamEvents measures the per-event cost of reading an OpenAI
// stream: splitting, parsing, classifying, reading the lag stamp and the
// cache counts. It should not allocate.
func BenchmarkStreamEvents(b *testing.B) {
	const event = `data: {"id":"x","object":"chat.completion.chunk","sent_unix_nano":1700000000000000000,"choices":[{"index":0,"delta":{"content":" tok"}}]}` + "\n\n"
	stream := []byte(strings.Repeat(event, 64) + "data: [DONE]\n\n")
	w := &workload{route: RouteChatCompletions, stream: true}
	var (
		s  sseReader
		p  fastjson.Parser
		rd bytes.Reader
	)
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		rd.Reset(stream)
		s.reset(&rd)
		for {
			data, _, err := s.next()
			if err != nil || string(data) == "[DONE]" {
				break
			}
			v, err := p.ParseBytes(data)
			if err != nil || isError(v) || isAbort(v) {
				b.Fatal("bad event")
			}
			w.chunk(v)
			w.cacheUse(v)
			if w.sentAt(v) == 0 {
				b.Fatal("no stamp")
			}
		}
	}
}

// BenchmarkAppendBody measures building one request body.
func BenchmarkAppendBody(b *testing.B) {
	cfg := Config{URL: "http://x", Route: RouteChatCompletions, Stream: true, PromptWords: Fixed(256)}.withDefaults()
	w := newWorkload(&cfg)
	var buf []byte
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		buf = w.appendBody(buf[:0], seq, nil)
	}
}

// BenchmarkAppendBodySharedPrefix measures building one chat body of the
// generated-shared-prefix workload with its defaults (2,176 words).
func BenchmarkAppendBodySharedPrefix(b *testing.B) {
	cfg := Config{URL: "http://x", Route: RouteChatCompletions, SharedPrefix: &SharedPrefix{}}.withDefaults()
	w := newWorkload(&cfg)
	var buf []byte
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		buf = w.appendBody(buf[:0], seq, nil)
	}
}
