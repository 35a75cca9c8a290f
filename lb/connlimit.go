package lb

import (
	"math"
	"strconv"
	"syscall"

	"github.com/valyala/fasthttp"

	"pdlb/lb/wire"
)

// Every client connection holds a file descriptor, and so does each of
// pdlb's calls to the workers, its health probes and its listeners. Issue
// 19: 20,000 idle client connections, the process's limit, left none for
// anyone else; the workers' calls and probes failed with "too many open
// files", the probes took both workers down, and clients got 503s for
// seconds after the attacker let go. So client connections are a budget
// (Config.MaxConnections, a wire.Budget), kept below the limit by what pdlb needs itself.
//
// At the budget, a new connection takes the place of one that waits for
// its client: first one that has sent nothing since it connected, then one
// waiting for its next request (keep-alive) or for the rest of the one it
// is sending (a header or a body sent slowly), each the one waiting
// longest. A real client sends its request as soon as it connects, and
// keeps a connection waiting for milliseconds; a flood's connections send
// nothing, or wait for seconds: they make room for each other before any
// real client's is touched, whether the flood opens thousands of empty
// connections a second, sends one request and then nothing, or sends its
// requests a byte at a time (slowloris). A keep-alive client whose
// connection closes while it waits opens another, as after the idle
// timeout. A connection whose
// request is being served is never closed to make room. With none
// waiting, the new connection is refused: it gets a short JSON 503 and is
// closed, which tells a client why and when to retry (Retry-After) where a
// reset would not, and costs pdlb one write on a socket whose buffer is
// empty. Nothing is queued: a refusal holds no descriptor past the accept.

// Descriptors pdlb keeps for itself whatever its clients do.
const (
	// reservedDescriptors: standard streams, listeners (main, admin,
	// pprof) and their admin clients, the runtime's poller, log files,
	// DNS lookups.
	reservedDescriptors = 64
	// descriptorsPerWorker: a worker's health probes (2 at most, as
	// health's client allows), its bootstrap server's and /server_info
	// reads, with room to spare.
	descriptorsPerWorker = 8
	// minMaxConnections is the smallest budget derived from a limit.
	minMaxConnections = 16
	// maxMaxConnections is the largest: an idle connection costs about
	// 6 KiB of memory too (a goroutine's stack, most of it), and
	// containers often allow a million descriptors, which would let idle
	// connections take gigabytes. A larger budget is set explicitly.
	maxMaxConnections = 1 << 16
)

// defaultMaxConnections is the client connection budget of a process
// allowed nofile descriptors, with workers workers each reached by up to
// maxConnsPerWorker pooled connections (Config.MaxConnsPerBackend). What is
// spare once reservedDescriptors and descriptorsPerWorker are set aside is
// shared between clients and the worker pools: a client whose request is
// under way holds a prefill and a decode connection (one, decode-only), and
// the pools keep them a while after. So clients get what the pools leave at
// their largest, but at least a third of the spare: then even with every
// client mid-request, its two worker connections fit beside it. The
// budget is kept within minMaxConnections and maxMaxConnections.
func defaultMaxConnections(nofile uint64, workers, maxConnsPerWorker int) int {
	spare := int64(min(nofile, 1<<40)) - reservedDescriptors - descriptorsPerWorker*int64(workers)
	n := max(spare-int64(workers)*int64(maxConnsPerWorker), spare/3)
	return int(min(max(n, minMaxConnections), maxMaxConnections))
}

// openFileLimit is the process's descriptor limit (RLIMIT_NOFILE) as Go
// leaves it: the runtime raises the soft limit to the hard one at start.
func openFileLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

// connectionLimit is the client connection budget: Config.MaxConnections,
// derived from the descriptor limit when zero; math.MaxInt for none.
func (s *Server) connectionLimit() int {
	switch n := s.cfg.MaxConnections; {
	case n > 0:
		return n
	case n < 0:
		return math.MaxInt
	}
	nofile, err := s.fileLimit()
	if err != nil {
		s.log.Warn().Err(err).Msg("cannot read the descriptor limit; client connections are not bounded (set --max-connections)")
		return math.MaxInt
	}
	return defaultMaxConnections(nofile, len(s.allBackends())+len(s.draining), s.cfg.MaxConnsPerBackend)
}

// newConnBudget makes the client connection budget (connectionLimit), its
// refusal the JSON 503 of pdlb's errors, counted among them, and its
// figures in s's metrics.
func (s *Server) newConnBudget() *wire.Budget {
	max := s.connectionLimit()
	b := wire.NewBudget(max, connRefusal(max), s.connsEvicted.Inc, func() {
		s.connsRefused.Inc()
		s.errorsByReason[reasonTooManyConnections].Inc()
	})
	s.ms.NewGauge(`pdlb_client_connections`, func() float64 { return float64(b.Open()) })
	s.ms.NewGauge(`pdlb_client_connections_max`, func() float64 {
		if max := b.Max(); max < math.MaxInt {
			return float64(max)
		}
		return math.Inf(1)
	})
	return b
}

// connRefusal is the whole answer to a connection refused by a budget of
// max connections.
func connRefusal(max int) []byte {
	msg := "pdlb has " + strconv.Itoa(max) + " client connections open, its limit (--max-connections), " +
		"and each has a request under way; retry shortly"
	body := appendErrorJSON(nil, fasthttp.StatusServiceUnavailable, msg)
	return append([]byte("HTTP/1.1 503 Service Unavailable\r\nServer: pdlb\r\nContent-Type: application/json\r\n"+
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)
}

// resizeConnBudget derives the connection budget again from the workers
// now members (or still draining), when it is derived (no
// Config.MaxConnections): each worker's pooled connections take
// descriptors that clients then cannot. Called as a worker joins or is
// torn down.
func (s *Server) resizeConnBudget() {
	if s.conns == nil || s.cfg.MaxConnections != 0 {
		return
	}
	if max := s.connectionLimit(); max != s.conns.Max() {
		s.conns.SetMax(max, connRefusal(max))
		s.log.Info().Int("max_connections", max).Msg("client connection budget derived again for the workers now known")
	}
}

// evictedMessage is what pdlb logs of a request whose connection it closed
// to make room, as its client sent it too slowly.
const evictedMessage = "closed to make room for another connection (--max-connections) while still sending its request"
