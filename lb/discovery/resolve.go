package discovery

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// newResolver returns Go's own resolver (PreferGo), which asks server for
// every query when server is set, or the system's servers otherwise. Go's
// resolver, not the C library's, so that SRV and address lookups behave
// alike on every platform and a test's server is really the one asked.
func newResolver(server string) *net.Resolver {
	r := &net.Resolver{PreferGo: true}
	if server != "" {
		r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}
	}
	return r
}

// endpoint is one address and port a name's records give.
type endpoint struct {
	addr netip.Addr
	port int
}

// resolve returns the workers that n's records give, sorted, or an error
// when any lookup failed other than for want of a record (the answer would
// then be partial, and a partial answer must not remove workers).
//
// With _http._tcp.NAME SRV records, each target's addresses are workers on
// the target's port; without, NAME's A and AAAA records are, on n.port.
// A prefill's bootstrap port is that of the _bootstrap._tcp.NAME target
// with the worker's address, if any (0 otherwise: the caller learns it as
// for a prefill given without one).
func (s *Source) resolve(ctx context.Context, n name) ([]Worker, error) {
	eps, err := s.lookupSRVEndpoints(ctx, "http", n.host)
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		addrs, err := s.lookupAddrs(ctx, n.host)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			eps = append(eps, endpoint{a, n.port})
		}
	}
	var bootstrap map[netip.Addr]int
	if n.role == Prefill && len(eps) > 0 {
		if bootstrap, err = s.lookupBootstrap(ctx, n.host); err != nil {
			return nil, err
		}
	}
	workers := make([]Worker, 0, len(eps))
	for _, ep := range eps {
		w := Worker{Role: n.role, URL: s.cfg.Scheme + "://" + net.JoinHostPort(ep.addr.String(), strconv.Itoa(ep.port))}
		if n.role == Prefill {
			w.BootstrapPort = bootstrap[ep.addr]
		}
		workers = append(workers, w)
	}
	slices.SortFunc(workers, compareWorkers)
	return slices.CompactFunc(workers, func(a, b Worker) bool { return a.URL == b.URL }), nil
}

// lookupSRVEndpoints returns the address and port of every target of the
// SRV records _service._tcp.host, or none when there are no such records.
// Priorities and weights are ignored: every target is a worker, and the
// caller's policies spread the load.
func (s *Source) lookupSRVEndpoints(ctx context.Context, service, host string) ([]endpoint, error) {
	_, srvs, err := s.resolver.LookupSRV(ctx, service, "tcp", host)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap(err)
	}
	var eps []endpoint
	for _, srv := range srvs {
		if srv.Target == "." { // RFC 2782: the service is decidedly not available
			continue
		}
		addrs, err := s.lookupAddrs(ctx, srv.Target)
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			eps = append(eps, endpoint{a, int(srv.Port)})
		}
	}
	return eps, nil
}

// lookupBootstrap maps each address of a _bootstrap._tcp.host SRV target
// to its port; an address given more than one port keeps the lowest, so
// that every replica picks the same.
func (s *Source) lookupBootstrap(ctx context.Context, host string) (map[netip.Addr]int, error) {
	eps, err := s.lookupSRVEndpoints(ctx, "bootstrap", host)
	if err != nil {
		return nil, err
	}
	ports := make(map[netip.Addr]int, len(eps))
	for _, ep := range eps {
		if p, ok := ports[ep.addr]; !ok || ep.port < p {
			ports[ep.addr] = ep.port
		}
	}
	return ports, nil
}

// lookupAddrs returns host's IPv4 and IPv6 addresses (IPv4-mapped ones as
// IPv4), or none when host has no such record.
func (s *Source) lookupAddrs(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, err := s.resolver.LookupNetIP(ctx, "ip", host)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap(err)
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}

// isNotFound tells a name or record that does not exist (NXDOMAIN, or no
// record of the type) from a failure to learn whether it does.
func isNotFound(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound
}

// wrap names the server really asked: with Config.Server set, Go's
// resolver still names the system's server in its errors.
func (s *Source) wrap(err error) error {
	var dnsErr *net.DNSError
	if s.cfg.Server == "" || !errors.As(err, &dnsErr) {
		return err
	}
	e := *dnsErr
	e.Server = s.cfg.Server
	return &e
}

// compareWorkers orders workers by role, then URL: the order of Change and
// Workers, the same in every replica.
func compareWorkers(a, b Worker) int {
	return cmp.Or(cmp.Compare(a.Role, b.Role), strings.Compare(a.URL, b.URL))
}
