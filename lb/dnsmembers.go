package lb

import (
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"pdlb/lb/discovery"
)

// Workers found in DNS (issue 23 §3): package discovery resolves the names
// of DNSConfig every Refresh and tells the Server how the set of workers
// changes; the Server applies each change through its one membership path
// (membership.go), removals first, so that a worker found in DNS is
// health-checked and warmed like one the worker API adds, and one gone from
// DNS for RemoveAfter is drained like one it removes.

// DNSConfig names the workers pdlb finds in DNS, beside (or instead of) the
// ones Config lists. A role given a name may be given no worker in Config:
// pdlb then starts with that pool empty, /readiness answering 503 naming
// what is missing until DNS fills it.
type DNSConfig struct {
	// Prefill, Decode and Fallback are the names resolved for each role,
	// each "NAME" or "NAME:PORT" (--prefill-dns, --decode-dns,
	// --fallback-dns). package discovery says which records are read.
	Prefill, Decode, Fallback []string
	// Refresh is the time between two resolutions of every name. Zero
	// means 5 s (--dns-refresh-secs).
	Refresh time.Duration
	// RemoveAfter is how long a worker may be missing from every answer
	// before it is drained and removed. Zero means 30 s
	// (--dns-remove-after-secs).
	RemoveAfter time.Duration
	// Server is the DNS server asked, "HOST:PORT". Empty means the
	// system's resolver (/etc/resolv.conf).
	Server string
	// Port is the workers' port for a name given without one and without
	// _http._tcp SRV records. Zero means 80, sglang_router's default.
	Port int
}

// names reports whether c names any worker to find.
func (c *DNSConfig) names() bool {
	return len(c.Prefill)+len(c.Decode)+len(c.Fallback) > 0
}

// source returns the discovery configuration of c, with its Change going
// to onChange. Validate and New build their Sources from it alike.
func (c *DNSConfig) source(onChange func(discovery.Change), kept *metrics.Counter, log zerolog.Logger) discovery.Config {
	return discovery.Config{
		Prefill:     c.Prefill,
		Decode:      c.Decode,
		Fallback:    c.Fallback,
		Interval:    c.Refresh,
		RemoveAfter: c.RemoveAfter,
		Port:        c.Port,
		Server:      c.Server,
		OnChange:    onChange,
		Kept:        kept,
		Log:         log,
	}
}

// check reports the first name or setting of c that cannot be used.
// Building a Source resolves nothing.
func (c *DNSConfig) check() error {
	if _, err := discovery.New(c.source(nil, nil, zerolog.Nop())); err != nil {
		return fmt.Errorf("invalid DNS discovery: %w", err)
	}
	return nil
}

// dnsMembers is the Server's part of DNS discovery: the Source, and the
// counts of what it changed.
type dnsMembers struct {
	source *discovery.Source
	// kept counts the answers not taken, each keeping a name's last good
	// workers (discovery.Config.Kept).
	kept *metrics.Counter
	// changes count what the Source's changes did.
	changes changeCounts
}

// buildDiscovery sets up the Source of Config.DNS, when it names any
// worker; nothing is resolved until startBackground runs it.
func (s *Server) buildDiscovery(log zerolog.Logger) error {
	if !s.cfg.DNS.names() {
		return nil
	}
	d := &dnsMembers{
		kept:    s.ms.NewCounter(`pdlb_dns_kept_total`),
		changes: newChangeCounts(s.ms, `pdlb_dns_workers_changed_total`),
	}
	apply := func(c discovery.Change) { s.applyChange(c, sourceDNS, d.changes) }
	var err error
	d.source, err = discovery.New(s.cfg.DNS.source(apply, d.kept, log))
	if err != nil {
		return fmt.Errorf("invalid DNS discovery: %w", err)
	}
	s.dns = d
	return nil
}

// runDiscovery resolves Config.DNS's names until shutdown.
func (s *Server) runDiscovery() {
	if s.dns == nil {
		return
	}
	s.bg.Go(func() {
		s.dns.source.Run(s.ctx)
	})
}
