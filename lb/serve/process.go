package serve

import (
	"os"
	"runtime/debug"

	"github.com/VictoriaMetrics/metrics"
)

// defaultGCPercent is pdlb's garbage collection target unless GOGC sets one.
// pdlb's live heap is small next to its goroutine stacks, and Go's GOGC=100
// lets the heap grow by the heap and the stacks together before collecting:
// at 1,024 streams pdlb's RSS went from 64 MiB to 74 MiB within a minute and
// was still growing, and stacks grown by the first burst are only shrunk
// when a collection comes. At 50 the same minute ended at 67 MiB, and the
// extra collections did not show in the non-stream throughput (README,
// Performance).
const defaultGCPercent = 50

// applyProcessSettings applies what pdlb sets for the whole process: the
// garbage collection target and memory limit (for bodies of at most
// bodyMemory bytes at once), and # HELP and # TYPE lines on /metrics, which
// the metrics library keeps in a global: without them Prometheus takes
// every series for untyped.
func applyProcessSettings(bodyMemory int64) {
	applyGCPercent()
	applyMemoryLimit(bodyMemory)
	metrics.ExposeMetadata(true)
}

// memoryOverhead is what pdlb's memory limit allows beyond its body memory:
// the runtime, connections, streams (4,096 streams take about 250 MiB).
const memoryOverhead = 512 << 20

// applyMemoryLimit sets the runtime's soft memory limit to the body memory
// and memoryOverhead, unless the GOMEMLIMIT environment variable chose one.
// The body memory bounds the bodies held, not the garbage of those let go:
// a burst of large answers, each grown by doubling, left pdlb at 1.75 GB
// with 1 GiB of body memory before its next collection. Near the limit, the
// collector runs sooner.
func applyMemoryLimit(bodyMemory int64) {
	if os.Getenv("GOMEMLIMIT") == "" { // as the runtime reads it
		debug.SetMemoryLimit(bodyMemory + memoryOverhead)
	}
}

// applyGCPercent sets defaultGCPercent unless the GOGC environment variable
// chose a target, which the Go runtime has applied already.
func applyGCPercent() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
}
