package lb

import (
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// healthGenerateReuse is how long the answer of one /health_generate
// fan-out is served again. SGLang's /health_generate has each worker
// generate a token, and anyone may call it (SGLang serves /health* without
// a key, as pdlb does): one answer a second at most is what lets no client
// make the workers generate at will.
const healthGenerateReuse = time.Second

// sharedFanOut serves every caller the answer of one fan-out: the one
// under way, which callers arriving meanwhile wait for, or the last one
// for reuse after it ended. The zero value is ready; it is safe for
// concurrent use.
type sharedFanOut struct {
	mu sync.Mutex
	// running is closed when the fan-out under way ends; nil when none
	// runs.
	running chan struct{}
	// waiting counts the callers waiting for it.
	waiting int
	answer  fanOutAnswer
	ended   time.Time // when answer was made; zero before the first
}

// get returns the answer of a fan-out that ended less than
// healthGenerateReuse ago by now, or of the one under way, or else makes
// one with fetch.
func (f *sharedFanOut) get(now func() time.Time, fetch func() fanOutAnswer) fanOutAnswer {
	f.mu.Lock()
	if !f.ended.IsZero() && now().Sub(f.ended) < healthGenerateReuse {
		defer f.mu.Unlock()
		return f.answer
	}
	if running := f.running; running != nil {
		f.waiting++
		f.mu.Unlock()
		<-running
		f.mu.Lock()
		defer f.mu.Unlock()
		f.waiting--
		return f.answer
	}
	running := make(chan struct{})
	f.running = running
	f.mu.Unlock()
	var a fanOutAnswer
	made := false
	defer func() {
		// Even if fetch panicked: the waiting callers must not hang.
		f.mu.Lock()
		if made {
			f.answer, f.ended = a, now()
		}
		f.running = nil
		f.mu.Unlock()
		close(running)
	}()
	a = fetch()
	made = true
	return a
}

// waiters returns how many callers wait for the fan-out under way.
func (f *sharedFanOut) waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

// checkGeneration asks every worker's /health_generate. It sends no
// client's Authorization header, only pdlb's key if it has one: its answer
// goes to every caller, and SGLang asks no key there anyway.
func (s *Server) checkGeneration() fanOutAnswer {
	return s.fanOutReport(controlCall{method: fasthttp.MethodGet, uri: "/health_generate", timeout: controlTimeout},
		fasthttp.StatusServiceUnavailable, false)
}
