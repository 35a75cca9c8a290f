package serve

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"github.com/rs/zerolog"

	"pdlb/lb"
	"pdlb/lb/cli"
)

// serveAdmin serves the admin routes (/metrics, and profiles with pprof) on
// addr in the background.
func serveAdmin(srv *lb.Server, addr string, pprof bool, log zerolog.Logger) error {
	ln, err := cli.Listen(addr)
	if err != nil {
		return err
	}
	go func() {
		if err := srv.ServeAdmin(ln, pprof); err != nil {
			log.Error().Err(err).Str("addr", addr).Msg("an admin listener stopped")
		}
	}()
	return nil
}

// serveUntilSignal serves until the first of sigs, then drains for grace.
// Another signal during the drain ends it at once: an operator's second
// Ctrl-C or TERM means now (but see cli.SameSignalWindow). It returns the exit
// status: 0 when every request finished, 1 when some were cut, at the grace
// period's end or by the second signal.
func serveUntilSignal(srv *lb.Server, ln net.Listener, grace time.Duration, sigs <-chan os.Signal, log zerolog.Logger) (int, error) {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	var sig os.Signal
	select {
	case err := <-served:
		return 0, err
	case sig = <-sigs:
	}
	first := time.Now()
	log.Info().Str("signal", sig.String()).Dur("grace", grace).
		Msg("shutting down: draining requests in flight; a second signal exits at once")
	drain, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(drain) }()
	for {
		select {
		case err := <-shut:
			var cut *lb.CutError
			switch {
			case errors.As(err, &cut):
				log.Warn().Int("cut", cut.Requests).Msg("stopped, with requests cut at the end of the grace period")
				return 1, nil
			case err != nil:
				log.Warn().Err(err).Msg("stopped")
				return 1, nil
			}
			log.Info().Msg("stopped")
			return 0, nil
		case sig = <-sigs:
			if time.Since(first) < cli.SameSignalWindow {
				continue // the first signal, delivered twice
			}
			log.Warn().Str("signal", sig.String()).Msg("exiting at once: a second signal during the drain")
			return 1, nil
		}
	}
}
