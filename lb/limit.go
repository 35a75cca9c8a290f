package lb

import (
	"strconv"
	"sync/atomic"
	"time"

	"pdlb/lb/wire"

	"github.com/valyala/fasthttp"
)

// admission bounds the generate requests in flight (--max-concurrent-
// requests). Requests beyond the bound wait in a queue of bounded size
// (--queue-size) for at most --queue-timeout-secs; past either bound they
// get a 429 with Retry-After at once, so an overloaded pdlb sheds load
// instead of piling it on the workers.
type admission struct {
	// slots holds a token per admitted request; nil means no bound.
	slots     chan struct{}
	queued    atomic.Int32
	queueSize int32
	timeout   time.Duration
}

func newAdmission(cfg *Config) admission {
	if cfg.MaxConcurrentRequests <= 0 {
		return admission{}
	}
	return admission{
		slots:     make(chan struct{}, cfg.MaxConcurrentRequests),
		queueSize: int32(max(cfg.QueueSize, 0)),
		timeout:   cfg.QueueTimeout,
	}
}

// admit takes a slot for q, waiting in the queue if need be; on success q
// holds a permit that whoever answers q releases.
func (s *Server) admit(q *clientRequest) *answerError {
	a := &s.admission
	if a.slots == nil {
		return nil
	}
	select {
	case a.slots <- struct{}{}:
		q.permit = true
		return nil
	default:
	}
	if a.queued.Add(1) > a.queueSize {
		a.queued.Add(-1)
		if a.queueSize == 0 {
			return overloaded("no request waits (--queue-size 0)")
		}
		return overloaded("the wait queue is full (" + strconv.Itoa(int(a.queueSize)) + " requests)")
	}
	defer a.queued.Add(-1)
	wait := time.NewTimer(min(a.timeout, time.Until(q.deadline)))
	defer wait.Stop()
	// A client that gives up while queued must not take the slot of one
	// still waiting, nor reach the workers: it is watched meanwhile.
	watch := wire.WatchClient(q.ctx.Conn())
	defer watch.Stop()
	select {
	case a.slots <- struct{}{}:
		q.permit = true
		return nil
	case <-wait.C:
		return overloaded("no slot freed up within " + a.timeout.String())
	case <-watch.Gone:
		return &answerError{statusClientGone, reasonClientGone, "the client went away while queued"}
	case <-s.cut:
		return &answerError{fasthttp.StatusServiceUnavailable, reasonShutdown, errShutdown.Error()}
	}
}

// releasePermit frees the slot of a request that has been answered.
func (s *Server) releasePermit() {
	<-s.admission.slots
}

func overloaded(why string) *answerError {
	return &answerError{fasthttp.StatusTooManyRequests, reasonOverloaded, "pdlb is at its limit of concurrent requests: " + why + "; retry later"}
}
