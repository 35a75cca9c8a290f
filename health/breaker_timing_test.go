package health

import (
	"testing"
	"time"
)

// BenchmarkBreakerAllow measures the check made on every pick, from all
// CPUs at once, in each state of the breaker.
func BenchmarkBreakerAllow(b *testing.B) {
	f := func(name string, prepare func(br *Breaker)) {
		b.Run(name, func(b *testing.B) {
			br := NewBreaker(BreakerConfig{Threshold: 1, MinBackoff: time.Hour})
			prepare(br)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					br.Allow()
				}
			})
		})
	}
	f("closed", func(*Breaker) {})
	f("open", func(br *Breaker) { br.Failure() })
}

// BenchmarkBreakerSuccess measures the report made after every served
// request, which must not write shared memory while the breaker is closed.
func BenchmarkBreakerSuccess(b *testing.B) {
	br := NewBreaker(BreakerConfig{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			br.Success()
		}
	})
}
