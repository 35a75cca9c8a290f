package lb

import (
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// bodyMemory is the budget of request bodies held at once
// (Config.MaxBodyMemory): the clients' bodies as they are read, and the
// copies rewritten for the workers, batch expansion included. Bytes are
// taken before they are allocated and given back once released, so the
// bodies in flight together never exceed the limit, whatever clients
// declare or send. It is safe for concurrent use.
type bodyMemory struct {
	limit int64
	used  atomic.Int64
	// refused counts requests refused for want of room.
	refused atomic.Uint64
	// large is signalled when a large block is given back, for returnToOS.
	large chan struct{}
}

// largeBlock is the size of a given-back block after which the process
// hands its free memory back to the OS (returnToOS).
const largeBlock = 32 << 20

func newBodyMemory(limit int64) *bodyMemory {
	return &bodyMemory{limit: limit, large: make(chan struct{}, 1)}
}

// take reserves n bytes, reporting whether they fit under the limit.
func (m *bodyMemory) take(n int) bool {
	if m.used.Add(int64(n)) > m.limit {
		m.used.Add(-int64(n))
		m.refused.Add(1)
		return false
	}
	return true
}

// give returns n bytes taken before.
func (m *bodyMemory) give(n int) {
	if n == 0 {
		return
	}
	if m.used.Add(-int64(n)) < 0 {
		panic("BUG: more body memory given back than taken")
	}
	if n >= largeBlock {
		select {
		case m.large <- struct{}{}:
		default:
		}
	}
}

// exhausted is the answer to a request the budget has no room for: a 503,
// as the request itself is fine and may succeed a moment later.
func (m *bodyMemory) exhausted() *answerError {
	return &answerError{fasthttp.StatusServiceUnavailable, reasonBodyMemory,
		"pdlb's memory for bodies is in use by other requests (" + strconv.FormatInt(m.limit, 10) +
			" bytes, --max-body-memory); retry later"}
}

// returnToOS hands the process's free memory back to the OS soon after a
// large body is released, at most once every returnInterval, until stop.
// Go would keep it until its next collection, which a quiet pdlb may not
// run for minutes: the peak of a burst of large bodies would stay resident.
func (m *bodyMemory) returnToOS(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-m.large:
		}
		debug.FreeOSMemory()
		select {
		case <-stop:
			return
		case <-time.After(returnInterval):
		}
	}
}

// returnInterval bounds how often returnToOS runs a collection.
const returnInterval = time.Second
