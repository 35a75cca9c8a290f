package discovery

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// Defaults for the zero fields of Config: those of the issue's
// --dns-refresh-secs and --dns-remove-after-secs, and, for the worker
// port, sglang_router's --service-discovery-port (RouterArgs in
// sgl-router/py_src/sglang_router/router_args.py, SGLang).
const (
	defaultInterval    = 5 * time.Second
	defaultRemoveAfter = 30 * time.Second
	defaultPort        = 80
	defaultScheme      = "http"
)

// Role is the pool a discovered worker joins.
type Role uint8

// The roles, in the order Change lists them.
const (
	Prefill Role = iota
	Decode
	// Fallback is the aggregated pool (sglang_router's "regular" workers).
	Fallback
)

// String returns the role as pdlb's pools and metrics name it.
func (r Role) String() string {
	switch r {
	case Prefill:
		return "prefill"
	case Decode:
		return "decode"
	case Fallback:
		return "fallback"
	}
	panic("BUG: unknown role " + strconv.Itoa(int(r)))
}

// Config says which names a Source resolves, how often, and whom it tells.
// The zero value is a valid Source that resolves nothing.
type Config struct {
	// Prefill, Decode and Fallback are the names resolved for each role,
	// each "NAME" or "NAME:PORT" (a Kubernetes headless Service, a compose
	// service, any name with A or AAAA records). PORT is the workers' port
	// when the name has no _http._tcp SRV records; without it, Port is.
	Prefill, Decode, Fallback []string
	// Interval is the time between two refreshes, and the bound on the
	// lookups of one; 0 means 5 s.
	Interval time.Duration
	// RemoveAfter is how long a worker may be missing from the answers
	// before it is removed; 0 means 30 s. A short absence, such as a pod
	// whose readiness flaps or a record that one DNS replica lags on,
	// does not drain a worker.
	RemoveAfter time.Duration
	// Port is the workers' port for a name given without one and without
	// _http._tcp SRV records; 0 means 80, sglang_router's default.
	Port int
	// Scheme is the workers' URL scheme, "http" (the default, for "") or
	// "https".
	Scheme string
	// Server is the DNS server asked, "HOST:PORT"; "" means the system's
	// (/etc/resolv.conf). When set, every query goes to it, over UDP, and
	// over TCP when an answer is truncated. /etc/hosts is read first in
	// both cases, as Go's resolver always does.
	Server string
	// OnChange receives each change of the set of workers, one call at a
	// time, in order, from the goroutine that runs Refresh; the caller
	// applies it (removals first). It must not call Refresh. nil drops
	// the changes: Workers still tells the set.
	OnChange func(Change)
	// Kept, when set, counts the answers not taken for a name: a lookup
	// that failed, or an empty answer after a non-empty one, each of which
	// keeps the name's last good workers.
	Kept *metrics.Counter
	// Log receives a line when a name starts or stops keeping its last
	// good workers, and at debug level one per worker added or removed.
	// New adds the field component=discovery.
	Log zerolog.Logger
}

func (cfg Config) withDefaults() Config {
	if cfg.Interval == 0 {
		cfg.Interval = defaultInterval
	}
	if cfg.RemoveAfter == 0 {
		cfg.RemoveAfter = defaultRemoveAfter
	}
	if cfg.Port == 0 {
		cfg.Port = defaultPort
	}
	if cfg.Scheme == "" {
		cfg.Scheme = defaultScheme
	}
	return cfg
}

// validate checks what withDefaults left; the names are checked as they
// are parsed.
func (cfg Config) validate() error {
	if cfg.Interval < 0 {
		return fmt.Errorf("refresh interval %s is negative", cfg.Interval)
	}
	if cfg.RemoveAfter < 0 {
		return fmt.Errorf("remove-after %s is negative", cfg.RemoveAfter)
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return fmt.Errorf("default worker port %d is outside 1..65535", cfg.Port)
	}
	if cfg.Scheme != "http" && cfg.Scheme != "https" {
		return fmt.Errorf("scheme %q is neither http nor https", cfg.Scheme)
	}
	if cfg.Server != "" {
		if _, _, err := net.SplitHostPort(cfg.Server); err != nil {
			return fmt.Errorf("cannot parse DNS server %q as HOST:PORT: %w", cfg.Server, err)
		}
	}
	return nil
}
