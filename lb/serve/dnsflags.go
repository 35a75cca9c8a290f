package serve

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"pdlb/lb"
	"pdlb/lb/cli"
)

// dnsFlags are the flags of DNS discovery (issue 23 §3): names whose
// workers join and leave the pools at run time.
type dnsFlags struct {
	PrefillDNS         []string `name:"prefill-dns" help:"A name (NAME or NAME:PORT) whose addresses (A/AAAA records, or SRV _http._tcp.NAME) are prefill workers, re-resolved every --dns-refresh-secs: a Kubernetes headless Service, a compose service; PORT is the workers' port without SRV records (default 80), and SRV _bootstrap._tcp.NAME gives their bootstrap port. Repeat for more (or list them with commas). With it, --prefill may be left out." placeholder:"NAME" sep:"," group:"discovery"`
	DecodeDNS          []string `name:"decode-dns" help:"As --prefill-dns, for decode workers; with it, --decode may be left out." placeholder:"NAME" sep:"," group:"discovery"`
	FallbackDNS        []string `name:"fallback-dns" help:"As --prefill-dns, for fallback (aggregated) workers." placeholder:"NAME" sep:"," group:"discovery"`
	DNSRefreshSecs     int      `name:"dns-refresh-secs" help:"Time between two resolutions of the names. A failed lookup, or an empty answer after a non-empty one, keeps the last workers found." default:"5" group:"discovery"`
	DNSRemoveAfterSecs int      `name:"dns-remove-after-secs" help:"How long a worker may be missing from the answers before it is drained (--drain-timeout-secs) and removed." default:"30" group:"discovery"`
	DNSServer          string   `name:"dns-server" help:"The DNS server to ask, instead of the system's (/etc/resolv.conf); /etc/hosts is read first either way." placeholder:"HOST:PORT" group:"discovery"`
}

// dnsConfig is the lb.DNSConfig of the flags.
func (f *dnsFlags) dnsConfig() lb.DNSConfig {
	return lb.DNSConfig{
		Prefill:     cli.ListItems(f.PrefillDNS),
		Decode:      cli.ListItems(f.DecodeDNS),
		Fallback:    cli.ListItems(f.FallbackDNS),
		Refresh:     time.Duration(f.DNSRefreshSecs) * time.Second,
		RemoveAfter: time.Duration(f.DNSRemoveAfterSecs) * time.Second,
		Server:      f.DNSServer,
	}
}

// validate refuses what the flags' types let through; the names are
// checked by lb.Config.Validate.
func (f *dnsFlags) validate() error {
	if f.DNSRefreshSecs <= 0 || f.DNSRemoveAfterSecs <= 0 {
		return errors.New("--dns-refresh-secs and --dns-remove-after-secs must be positive")
	}
	if f.DNSServer == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(f.DNSServer)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("--dns-server must be HOST:PORT, e.g. 10.96.0.10:53, got %q", f.DNSServer)
	}
	return nil
}
