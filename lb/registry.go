package lb

import (
	"github.com/rs/zerolog"

	"pdlb/bootstrap"
	"pdlb/health"
)

// The bootstrap registry's part in lb: building it, and following the
// prefills that join and leave (membership.go). The registry knows a
// prefill by its index (Backend.index), which it never gives twice; its
// callbacks find the prefill in Server.byIndex.

// buildRegistry sets up the bootstrap registry of the prefills. When one
// becomes ready or changes, its pairs are warmed (again).
func (s *Server) buildRegistry(log zerolog.Logger) {
	targets := make([]bootstrap.Target, len(s.prefills.backends()))
	s.byIndex = make(map[int]*Backend, len(targets))
	for i, b := range s.prefills.backends() {
		targets[i] = registryTarget(b, s.cfg.Prefill[i].BootstrapPort)
		s.byIndex[b.index] = b
	}
	s.registry = bootstrap.NewRegistry(bootstrap.Config{
		Targets:         targets,
		Dial:            s.link.dialer.Dial,
		Authorization:   s.workerAuthorization(),
		APITLS:          s.cfg.WorkerTLS,
		RefreshInterval: s.cfg.BootstrapRefresh,
		Inconclusive:    health.OutOfResources, // pdlb's own shortage says nothing of a prefill (issue 19)
		Metrics:         s.ms,
		Log:             log.With().Str("component", "bootstrap").Logger(),
		Now:             s.cfg.Now,
		OnChange: func(i int, st *bootstrap.State) {
			b := s.registered(i)
			if b == nil {
				return // gone for good
			}
			switch {
			case st.Ready:
				// Selection reads it from here (Backend.takes).
				b.dpSize.Store(int32(st.Info.DPSize))
			case !st.Updated.IsZero():
				// Down, or registering anew: it may come back with
				// other ranks, so none of its old ones is a reason to
				// refuse a request.
				b.dpSize.Store(0)
			}
			s.followBootstrap(b, st)
			if s.warm != nil && st.Ready {
				s.warm.prewarm(b)
			}
		},
	})
}

// registryTarget is prefill b's target in the bootstrap registry, port its
// bootstrap port (0: learned from its /server_info, else the default).
func registryTarget(b *Backend, port int) bootstrap.Target {
	return bootstrap.Target{APIAddr: b.addr, Host: b.host, Port: port, TLS: b.hc.IsTLS}
}

// bootstrapPort is the bootstrap_port sent for prefill p: the one given on
// the command line or learned from its /server_info, or the default one
// once the registry has reached it there; 0 (sent as null, as mini_lb
// does) before.
func (s *Server) bootstrapPort(p *Backend) int {
	st := s.registry.State(p.index)
	if st.PortSource == "default" && !st.Ready {
		return 0
	}
	return st.Port
}

// register has the bootstrap registry follow b, when a prefill, with its
// bootstrap port, and returns what lets the registry's callbacks run
// again: call it once b has joined, so that the news of b (ready: warm
// its pairs) finds it a member with its pairs. The registry reads b at
// once, and may call back before Add returns.
func (s *Server) register(b *Backend, port int) (joined func()) {
	if b.role != rolePrefill {
		return func() {}
	}
	s.indexMu.Lock()
	b.index = s.registry.Add(registryTarget(b, port))
	s.byIndex[b.index] = b
	return s.indexMu.Unlock
}

// registered returns the prefill of registry index i, nil once it is gone
// for good. It waits while a prefill joins (register).
func (s *Server) registered(i int) *Backend {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	return s.byIndex[i]
}

// unregister has the registry forget prefill b, torn down.
func (s *Server) unregister(b *Backend) {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	delete(s.byIndex, b.index)
	s.registry.Remove(b.index)
}

// repoint has the registry read prefill b, added again, on bootstrap port
// port (0: learned from its /server_info), when it was given another: DNS
// discovery removes a prefill whose port changed and adds it again
// (applyDNSChange), which takes it back while it drains. The registry's
// next read moves its generation on, so its pairs are warmed anew.
func (s *Server) repoint(b *Backend, port int) {
	if b.role == rolePrefill && s.registry.SetPort(b.index, port) {
		b.log.Info().Int("bootstrap_port", port).Msg("following the prefill's bootstrap server on another port")
	}
}
