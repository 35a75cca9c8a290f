package lb

import (
	"context"
	"fmt"
	"time"
)

// A shutdown stops taking clients and drains what is in flight for a grace
// period; what is still in flight then is cut, but answered: each exchange
// is cancelled with errShutdown, and its usual failure path tells its
// client, rather than the process's exit closing the connection without a
// word.

// cutGrace is how long Shutdown waits, after cutting the requests in
// flight, for their answers to be written: long enough for any client
// that reads, and bounded for one that does not.
const cutGrace = 3 * time.Second

// dropGrace is how long Shutdown waits, after closing the connections of
// clients still being answered, for their answers to be accounted.
const dropGrace = time.Second

// CutError is Shutdown's error when its grace period ended with requests in
// flight, and it cut them.
type CutError struct {
	// Requests is how many requests were cut.
	Requests int
}

func (e *CutError) Error() string {
	return fmt.Sprintf("the shutdown grace period ended with %d requests in flight, which were cut", e.Requests)
}

// Shutdown stops accepting clients and waits, up to ctx's deadline, for
// requests and streams in flight to finish; then it stops the admin
// listeners and background work.
// Requests still in flight when ctx ends are cut: their worker calls are
// cancelled, and each client gets a 503 JSON error, or its stream an SSE
// error event and [DONE], within cutGrace. The connections of clients
// still being answered then (a client that does not read) are closed, and
// their requests accounted within dropGrace. Shutdown then returns a
// *CutError if it cut any, else ctx's error if clients were still being
// answered after that (a control route).
func (s *Server) Shutdown(ctx context.Context) error {
	// The background work a Serve starts is started, or never will be,
	// before the wait for it below (a signal may come as Serve begins).
	s.startOnce.Do(func() {})
	s.clientListeners.close()
	// fasthttp closes keep-alive connections (CloseOnShutdown) only while
	// its shutdown runs, so it runs on until the cut answers are out too.
	wait, stopWaiting := context.WithCancel(context.Background())
	defer stopWaiting()
	drained := make(chan error, 1)
	go func() {
		err := s.srv.ShutdownWithContext(wait)
		if err == nil {
			err = s.waitExchanges(wait)
		}
		drained <- err
	}()
	var err error
	select {
	case err = <-drained:
	case <-ctx.Done():
		s.cutInflight()
		t := time.NewTimer(cutGrace)
		select {
		case err = <-drained:
		case <-t.C:
			// Clients that read nothing still hold their answers: their
			// connections are closed, so each answer ends, and is
			// accounted, as cut off (a 499), before the process goes.
			s.dropClients()
			t.Reset(dropGrace)
			select {
			case err = <-drained:
			case <-t.C:
				stopWaiting()
				<-drained
				err = fmt.Errorf("clients still being answered %s after the grace period: %w", cutGrace+dropGrace, ctx.Err())
			}
		}
		t.Stop()
		// Counted as they are answered, whatever they waited on: a call,
		// a slot, a warm-up.
		if n := s.errorsByReason[reasonShutdown].Get(); n > 0 {
			err = &CutError{Requests: int(n)}
		}
	}
	// The admin listeners (metrics, pprof) serve through the drain, so it
	// can be watched, and close last.
	// A scraper's keep-alive connection is given a second to finish.
	last, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.adminListeners.close()
	s.adminMu.Lock()
	for _, a := range s.admin {
		_ = a.ShutdownWithContext(last)
	}
	s.adminMu.Unlock()
	s.cancel()
	s.bg.Wait()
	return err
}

// cutInflight cancels the exchanges in flight with errShutdown, and those
// that start from now on; their failure paths answer the clients. Requests
// waiting for an admission slot or a pair warm-up get errShutdown too.
func (s *Server) cutInflight() {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	if s.cutting {
		return
	}
	s.cutting = true
	close(s.cut)
	for _, x := range s.flight {
		x.cutShort()
	}
	if n := len(s.flight) + int(s.admission.queued.Load()); n > 0 {
		s.log.Warn().Int("requests", n).Msg("shutdown grace period over: cutting the requests in flight")
	}
}

// dropClients closes the connection of every client still being answered:
// a write to it then fails at once, and its answer ends.
func (s *Server) dropClients() {
	s.flightMu.Lock()
	defer s.flightMu.Unlock()
	for _, x := range s.flight {
		if x.client != nil {
			_ = x.client.Close()
		}
	}
}

// track records x as serving a client until untrack, so that a shutdown can
// cut it; x is cut at once if one has. The exchange's calls must be
// prepared: cutShort reads them.
func (s *Server) track(x *exchange) {
	s.flightMu.Lock()
	x.slot = len(s.flight)
	s.flight = append(s.flight, x)
	if s.cutting {
		x.cutShort()
	}
	s.flightMu.Unlock()
}

// untrack forgets x, if track recorded it.
func (s *Server) untrack(x *exchange) {
	s.flightMu.Lock()
	if x.slot < 0 { // another's untrack may move x: read under the lock
		s.flightMu.Unlock()
		return
	}
	last := len(s.flight) - 1
	moved := s.flight[last]
	s.flight[x.slot], moved.slot = moved, x.slot
	s.flight[last] = nil
	s.flight = s.flight[:last]
	x.slot = -1
	s.flightMu.Unlock()
}

// waitExchanges waits until every exchange has been released, or ctx ends.
// It polls, as fasthttp's own shutdown does: a drain is no hot path.
func (s *Server) waitExchanges(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.live.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
