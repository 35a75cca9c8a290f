package lb

import (
	"errors"

	"github.com/VictoriaMetrics/metrics"

	"pdlb/lb/discovery"
)

// Workers that discovery finds (issue 23 §3, issue 24 §1): DNS
// (dnsmembers.go) and Kubernetes (kubemembers.go) each tell the Server how
// the set of workers they find changes, as a discovery.Change, and the
// Server applies it alike through its one membership path (membership.go),
// naming the source, so that a worker another source gives too stays.

// changeCounts count what the changes of one discovery source did.
type changeCounts struct {
	// added and removed count the workers a change added and removed
	// through the membership path (not those another source keeps);
	// failed, those it refused.
	added, removed, failed *metrics.Counter
}

// newChangeCounts registers in ms the counters of family, a name such as
// pdlb_dns_workers_changed_total, labelled by change.
func newChangeCounts(ms *metrics.Set, family string) changeCounts {
	return changeCounts{
		added:   ms.NewCounter(family + `{change="added"}`),
		removed: ms.NewCounter(family + `{change="removed"}`),
		failed:  ms.NewCounter(family + `{change="failed"}`),
	}
}

// applyChange applies c, found by from, through the membership path,
// removals first, as discovery.Change asks. A worker in both lists, whose
// bootstrap port changed, is only re-pointed by its add: removed first, it
// would drain and be taken back, and a pool of one would be empty between. A change the path
// refuses is logged and counted in n, and the rest applied: one worker
// that cannot join must not keep the others out. A worker removed stays a
// member while another source gives it (sources.go).
func (s *Server) applyChange(c discovery.Change, from source, n changeCounts) {
	repointed := map[discovery.Worker]bool{} // by role and URL, port 0
	for _, w := range c.Added {
		repointed[discovery.Worker{Role: w.Role, URL: w.URL}] = true
	}
	for _, w := range c.Removed {
		if repointed[discovery.Worker{Role: w.Role, URL: w.URL}] {
			continue // its bootstrap port changed: the add re-points it, no drain
		}
		role := w.Role.String()
		gone, err := s.removeWorker(role, w.URL, from)
		switch {
		case errors.Is(err, errNotMember):
			// Removed already, by the worker API's DELETE: nothing to do.
			s.log.Debug().Str("source", from.name()).Str("role", role).Str("worker", w.URL).Msg("worker no longer found, and no longer a member")
		case err != nil:
			n.failed.Inc()
			s.log.Warn().Err(err).Str("source", from.name()).Str("role", role).Str("worker", w.URL).Msg("cannot remove a worker discovery no longer finds")
		case gone: // else another source keeps it, as removeWorker logs
			n.removed.Inc()
			s.log.Info().Str("source", from.name()).Str("role", role).Str("worker", w.URL).Msg("worker no longer found: removing it")
		}
	}
	for _, w := range c.Added {
		role := w.Role.String()
		if _, err := s.addWorker(role, PrefillSpec{URL: w.URL, BootstrapPort: w.BootstrapPort}, from); err != nil {
			n.failed.Inc()
			s.log.Warn().Err(err).Str("source", from.name()).Str("role", role).Str("worker", w.URL).Msg("cannot add a worker discovery found")
			continue
		}
		n.added.Inc()
		s.log.Info().Str("source", from.name()).Str("role", role).Str("worker", w.URL).Int("bootstrap_port", w.BootstrapPort).Msg("worker found: adding it")
	}
}
