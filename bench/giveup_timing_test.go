package bench

import (
	"testing"
	"time"
)

// BenchmarkStreakSuccess measures what the give-up rule costs a request
// that succeeds, from clients in parallel: counting it in flight and out,
// and ending no streak. It must take no lock and not allocate.
func BenchmarkStreakSuccess(b *testing.B) {
	r := &runner{cfg: &Config{GiveUpAfter: time.Second}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			gen := r.streak.begin()
			r.streak.end(gen)
			r.noteOutcome("", nil, time.Time{})
		}
	})
}
