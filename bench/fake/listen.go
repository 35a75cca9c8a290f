package fake

import (
	"fmt"
	"net"

	"github.com/valyala/fasthttp"
)

// slot is an address a started Server serves, its HTTP API or a prefill's
// bootstrap server, which FaultRefuse (or SetBootstrapDown) stops and
// starts again on the same address. Its fields are guarded by Server.mu;
// conns guards itself.
type slot struct {
	addr    string // the address listened on, as the listener reports it
	name    string // the Server header: SGLang's uvicorn or aiohttp
	handler fasthttp.RequestHandler
	ln      net.Listener  // nil while refusing
	done    chan struct{} // closed when the Serve of ln returns
	conns   *connSet
}

// newSlot serves h on ln at once.
func (s *Server) newSlot(ln net.Listener, name string, h fasthttp.RequestHandler) *slot {
	sl := &slot{addr: ln.Addr().String(), name: name, handler: h, conns: newConnSet()}
	s.serve(sl, ln)
	return sl
}

// serve serves sl on ln, with a fasthttp.Server of its own: one whose Serve
// returned is not served again.
func (s *Server) serve(sl *slot, ln net.Listener) {
	srv := &fasthttp.Server{
		Handler:               sl.handler,
		Name:                  sl.name,
		IdleTimeout:           s.cfg.IdleTimeout,
		MaxRequestBodySize:    maxBodySize,
		ReadBufferSize:        s.cfg.MaxHeaderSize,
		MaxIdleWorkerDuration: maxIdleWorker,
		ConnState:             sl.conns.track,
		Logger:                &s.log,
	}
	sl.ln = watchListener{ln}
	sl.done = make(chan struct{})
	go func(ln net.Listener, done chan<- struct{}) {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !s.closing() {
			s.log.Error().Err(err).Str("addr", sl.addr).Msg("fake server stopped serving")
		}
	}(sl.ln, sl.done)
}

// stop closes the listener, if any, and waits for its Serve to return.
func (sl *slot) stop() error {
	if sl.ln == nil {
		return nil
	}
	err := sl.ln.Close()
	<-sl.done
	sl.ln = nil
	return err
}

// refuse stops sl and breaks every connection it has, as when the process
// behind the address dies. Refusing twice does nothing more.
func (sl *slot) refuse() error {
	if sl.ln == nil {
		return nil
	}
	err := sl.stop()
	sl.conns.drop()
	return err
}

// setRefusing makes sl refuse connections, or listen again on n at its
// address.
func (s *Server) setRefusing(sl *slot, refuse bool) error {
	if refuse {
		if err := sl.refuse(); err != nil {
			return fmt.Errorf("cannot close the listener on %s: %w", sl.addr, err)
		}
		return nil
	}
	if sl.ln != nil {
		return nil
	}
	ln, err := s.net.Listen(sl.addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s again: %w", sl.addr, err)
	}
	sl.conns.undrop()
	s.serve(sl, ln)
	return nil
}
