package bootstrap

import (
	"strings"
	"testing"
)

// longChatBody is a chat request with a long prompt (about 16 KiB, some
// 4,000 tokens), whose text has escaped newlines and quotes and non-ASCII
// letters, as pasted documents do. Long prompts are where a per-byte cost
// of the scan shows.
var longChatBody = `{"model":"Qwen/Qwen3-8B","messages":[{"role":"user","content":"` +
	strings.Repeat(`Summarise this: the caf\u00e9 \"Le Zinc\" opened in 1902, and its owner wrote that «the stove never went out».\n`, 150) +
	`"}],"max_tokens":256,"stream":true}`

func BenchmarkParse(b *testing.B) {
	f := func(name, body string) {
		b.Run(name, func(b *testing.B) {
			body := []byte(body)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := Parse(body); err != nil {
					b.Fatalf("unexpected error: %s", err)
				}
			}
		})
	}
	f("chat", chatBody)
	f("generate", generateBody)
	f("batch", batchBody)
	f("long", longChatBody)
}

func BenchmarkAppend(b *testing.B) {
	f := func(name, body string, fields Fields) {
		b.Run(name, func(b *testing.B) {
			body := []byte(body)
			dst := make([]byte, 0, 2*len(body)+256)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var err error
				if dst, err = Append(dst[:0], body, fields); err != nil {
					b.Fatalf("unexpected error: %s", err)
				}
			}
		})
	}
	f("chat", chatBody, Fields{Host: "10.0.0.5", Port: 8998, Rooms: []uint64{NewRoom()}})
	f("generate", generateBody, Fields{Host: "prefill-0.svc", Port: 8998, Rooms: []uint64{NewRoom()}})
	f("batch", batchBody, Fields{Host: "10.0.0.5", Port: 8998, Rooms: []uint64{NewRoom(), NewRoom(), NewRoom()}, Batch: true})
}

// BenchmarkParseAppend is the request path's whole share of this package.
func BenchmarkParseAppend(b *testing.B) {
	body := []byte(chatBody)
	dst := make([]byte, 0, 2*len(body)+256)
	rooms := make([]uint64, 1)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatalf("unexpected error: %s", err)
		}
		rooms[0] = NewRoom()
		var err error
		if dst, err = Append(dst[:0], body, Fields{Host: "10.0.0.5", Port: 8998, Rooms: rooms}); err != nil {
			b.Fatalf("unexpected error: %s", err)
		}
	}
}
