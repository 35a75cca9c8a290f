package lb

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"pdlb/bootstrap"
	"pdlb/health"
)

// buildChecker sets up the active health checks of every worker; their
// results reach each Backend through its health state. Prefills' bootstrap
// servers are followed by the registry, whose readiness counts too. log is
// the root logger, from which the checker derives its own.
func (s *Server) buildChecker(log zerolog.Logger) {
	hc := s.cfg.HealthCheck
	if hc.Disable {
		return
	}
	all := s.allBackends()
	targets := make([]health.Target, len(all))
	for i, b := range all {
		targets[i] = s.healthTarget(b)
		b.probe = i
	}
	s.checker = health.NewChecker(health.Config{
		Interval: hc.Interval,
		Timeout:  hc.Timeout,
		Rise:     hc.Rise,
		Fall:     hc.Fall,
		// SGLang does not ask for the key on /health, but the probed path
		// may be another (--health-check-endpoint).
		Authorization: s.workerAuthorization(),
		TLSConfig:     s.cfg.WorkerTLS,
		Dial:          s.link.dialer.Dial,
		Log:           log,
	}, targets)
}

// healthTarget is b's target in the health checker.
func (s *Server) healthTarget(b *Backend) health.Target {
	return health.Target{
		Name: b.role + " " + b.addr,
		Addr: b.addr,
		Path: s.cfg.HealthCheck.Path,
		TLS:  b.hc.IsTLS,
		OnChange: func(st health.State) {
			if health.State(b.health.Swap(int32(st))) == health.Down && st == health.Up {
				// Back from down, maybe restarted with empty caches,
				// even if it went down through timeouts, which are no
				// sign: its pairs are cold, and the probe that brought
				// it back warms them (probed, which runs next).
				suspectRestart(b)
			}
		},
		OnProbe: func(err error) { s.probed(b, err) },
	}
}

// followBootstrap keeps a prefill out of selection while its bootstrap
// server cannot be reached or is not fully registered: no KV transfer can
// go through it. Before its first refresh, a prefill counts as up.
func (s *Server) followBootstrap(b *Backend, st *bootstrap.State) {
	if s.cfg.HealthCheck.Disable {
		return
	}
	down := !st.Ready && !st.Updated.IsZero()
	if b.bootstrapDown.Swap(down) != down && down {
		b.log.Warn().Str("error", st.Err).Msg("taking the prefill out of selection: its bootstrap server is not ready")
	}
}

// poolStatus is one pool's line in /readiness.
type poolStatus struct {
	Workers int `json:"workers"`
	Ready   int `json:"ready"`
}

// serveReadiness answers 200 when pdlb can serve a generation: a ready
// prefill and a ready decode, or a ready fallback worker; 503 otherwise,
// with each pool's count. Ready means known up by the active checks (when
// they run), not ejected, and for a prefill, with its bootstrap server
// ready.
func (s *Server) serveReadiness(ctx *fasthttp.RequestCtx) {
	checked := s.checker != nil
	count := func(p *Pool) poolStatus {
		ws := p.backends()
		ps := poolStatus{Workers: len(ws)}
		for _, b := range ws {
			if b.confirmed(checked) {
				ps.Ready++
			}
		}
		return ps
	}
	out := struct {
		Ready    bool       `json:"ready"`
		Prefill  poolStatus `json:"prefill"`
		Decode   poolStatus `json:"decode"`
		Fallback poolStatus `json:"fallback"`
		// Missing says what pdlb lacks to serve, when it is not ready:
		// "a ready prefill", "a ready decode", "or a ready fallback", and
		// the Kubernetes API while it fails.
		Missing []string `json:"missing,omitempty"`
	}{Prefill: count(s.prefills), Decode: count(s.decodes), Fallback: count(s.fallbacks)}
	out.Ready = out.Prefill.Ready > 0 && out.Decode.Ready > 0 || out.Fallback.Ready > 0
	if !out.Ready {
		if out.Prefill.Ready == 0 {
			out.Missing = append(out.Missing, "a ready prefill")
		}
		if out.Decode.Ready == 0 {
			out.Missing = append(out.Missing, "a ready decode")
		}
		out.Missing = append(out.Missing, "or a ready fallback")
		if s.kube != nil && s.kube.source.Failing() {
			// The pools may be empty for want of the pods' list.
			out.Missing = append(out.Missing, "the Kubernetes API, which cannot be reached or refuses to list pods (see the log)")
		}
	}
	body, _ := json.Marshal(out)
	ctx.SetContentType("application/json")
	if !out.Ready {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
	ctx.SetBody(body)
}

// runChecker probes every worker until shutdown.
func (s *Server) runChecker() {
	if s.checker == nil {
		return
	}
	s.bg.Go(func() {
		s.checker.Run(s.ctx.Done())
	})
}

// checkOnce probes every worker once, for tests.
func (s *Server) checkOnce(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	s.checker.CheckOnce(ctx)
}

// whyOut says why b is out of selection, "" if it is not. It is for the
// 503 of a request that found a whole pool out, and only built then.
func (s *Server) whyOut(b *Backend) string {
	switch {
	case b.bootstrapDown.Load():
		st := s.registry.State(b.index)
		server := "bootstrap server"
		if addr := net.JoinHostPort(b.host, strconv.Itoa(st.Port)); st.Port > 0 && !strings.Contains(st.Err, addr) {
			server += " " + addr
		}
		return server + " not ready: " + st.Err
	case health.State(b.health.Load()) == health.Down:
		if e := s.probeError(b); e != "" {
			return "failed its health check (" + e + ")"
		}
		return "failed its health check"
	case b.breaker != nil && !b.breaker.Allow():
		return "ejected after consecutive failures"
	}
	return ""
}

// probeError is why b's last health probe failed, "" if it did not.
func (s *Server) probeError(b *Backend) string {
	if s.checker == nil || b.probe < 0 || b.leaving.Load() {
		return ""
	}
	return s.checker.LastError(b.probe)
}

// maxWhyOut bounds the workers a 503 names, so that a large pool does not
// make a long answer.
const maxWhyOut = 3

// whyPoolOut lists why p's workers are out, as " (addr: why; ...)",
// or "" when none is (they failed this request instead, which the answer
// says apart).
func (s *Server) whyPoolOut(p *Pool) string {
	ws := p.backends()
	if len(ws) == 0 {
		return " (the " + p.role + " pool has no workers)"
	}
	var b strings.Builder
	n := 0
	for _, w := range ws {
		why := s.whyOut(w)
		if why == "" {
			continue
		}
		if n++; n > maxWhyOut {
			continue
		}
		if n == 1 {
			b.WriteString(" (")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(w.addr + ": " + why)
	}
	if n == 0 {
		return ""
	}
	if n > maxWhyOut {
		b.WriteString("; " + strconv.Itoa(n-maxWhyOut) + " more")
	}
	b.WriteString(")")
	return b.String()
}
