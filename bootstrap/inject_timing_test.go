package bootstrap

import "testing"

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
