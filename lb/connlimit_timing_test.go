package lb

import (
	"math"
	"net"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
)

// BenchmarkConnStateTrack measures what the connection budget adds to each
// request: fasthttp reports the connection active when the request's first
// byte comes, and idle once it is answered.
func BenchmarkConnStateTrack(b *testing.B) {
	ms := metrics.NewSet()
	budget := newConnBudget(math.MaxInt, ms, ms.NewCounter("refusals"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		conn, peer := net.Pipe()
		defer conn.Close()
		defer peer.Close()
		c := newClientConn(conn)
		if !budget.admit(c) {
			panic("BUG: an unbounded budget refused a connection")
		}
		for pb.Next() {
			budget.track(c, fasthttp.StateActive)
			budget.track(c, fasthttp.StateIdle)
		}
	})
}
