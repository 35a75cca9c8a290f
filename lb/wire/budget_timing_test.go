package wire

import (
	"math"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkConnStateTrack measures what the connection budget adds to each
// request: fasthttp reports the connection active when the request's first
// byte comes, and idle once it is answered.
func BenchmarkConnStateTrack(b *testing.B) {
	budget := NewBudget(math.MaxInt, nil, func() {}, func() {})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		conn, peer := net.Pipe()
		defer conn.Close()
		defer peer.Close()
		c := NewClientConn(conn, NewSteps())
		if !budget.admit(c) {
			panic("BUG: an unbounded budget refused a connection")
		}
		for pb.Next() {
			budget.Track(c, fasthttp.StateActive)
			budget.Track(c, fasthttp.StateIdle)
		}
	})
}
