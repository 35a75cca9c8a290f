package load

import (
	"fmt"
	"testing"
	"time"

	"github.com/valyala/fastjson"
)

// BenchmarkGet measures what a pick pays to read a worker's load, from all
// CPUs at once, among 64 workers: Get and Load of one of them.
func BenchmarkGet(b *testing.B) {
	p := New(Config{})
	for i := range 64 {
		addr := fmt.Sprintf("10.0.0.%d:30000", i)
		p.Add(Target{Addr: addr})
		(*p.workers.Load())[addr].publish([]Rank{{Reqs: int64(i), TotalTokens: 1}}, RouteLoads, nil, time.Now(), 0)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var sum int64
		for pb.Next() {
			n, _ := p.Get("10.0.0.17:30000").Load()
			sum += n
		}
		if sum < 0 {
			b.Fatal(sum)
		}
	})
}

// BenchmarkReadLoads measures reading one /v1/loads answer of a worker
// with 8 DP ranks, the work of one poll.
func BenchmarkReadLoads(b *testing.B) {
	entries := make([]string, 8)
	for i := range entries {
		entries[i] = loadsEntry(i, 12, 3, 40000, 52000)
	}
	body := []byte(loadsAnswer(entries...))
	var p fastjson.Parser
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := readLoads(&p, body); err != nil {
			b.Fatal(err)
		}
	}
}
